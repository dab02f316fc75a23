//! Soft-Pipe (§5.1): QKᵀ pipelined with softmax, P written to DRAM; once
//! all of P is there, PV runs sequentially, reading P back.
//!
//! Phase 1 is pipelined over row blocks of `rows` query rows
//! (double-buffered Q blocks and row blocks, K_h resident per head). Phase
//! 2 is sequential over chunks of `chunk_rows` rows of P: each chunk is
//! loaded, multiplied with the resident V_h and its O rows written back
//! before the next chunk loads.

use super::{Builder, Geom, MatMul, Need, Resident, Ring};
use crate::engine::TaskId;
use crate::tiling::Tiling;

fn chunk_rows(t: Tiling) -> u32 {
    t.inner.unwrap_or(t.rows)
}

pub(super) fn need(g: &Geom, t: Tiling) -> Need {
    let (s, d) = (u64::from(g.seq), u64::from(g.dim));
    let (rows, chunk) = (u64::from(t.rows), u64::from(chunk_rows(t)));
    let cores = u64::from(g.cores);
    let pipelined = 2 * rows * d + 2 * s * d + 2 * rows * s;
    let sequential = 2 * s * d + chunk * (s + d);
    let phase1 = g.blocks(t.rows) * (3 + 2 * cores);
    let phase2 = g.blocks(chunk_rows(t)) * (3 + cores);
    Need {
        l1_elems: pipelined.max(sequential),
        tasks: phase1 + phase2 + 2 * u64::from(g.heads) + 1,
    }
}

pub(super) fn build(b: &mut Builder, t: Tiling) {
    scores(b, t.rows);
    let gate = b.fence();
    super::weighted_values(b, chunk_rows(t), gate);
}

/// Phase 1: C_i and P_i pipelined, P_i stored.
fn scores(b: &mut Builder, rows: u32) {
    let seq = b.geom.seq;
    let mut k = Resident::new();
    let mut q_slots = Ring::new(2);
    let mut row_blocks = Ring::new(2);
    for head in b.geom.block_heads(rows) {
        let lk = k.fetch(b, head, None);
        let q_slot = q_slots.claim();
        let q = b.load(u64::from(rows) * u64::from(b.geom.dim), &[q_slot.wait]);
        let block = row_blocks.claim();
        let mut scores = Vec::new();
        let probs = b.per_core(rows, |b, core, r| {
            let c = b.matmul(MatMul::Qk, core, r, seq, &[Some(q), Some(lk), block.wait]);
            scores.push(c);
            b.softmax(core, r, &[Some(c)])
        });
        let done = b.join(&scores);
        q_slots.release(q_slot, done);
        k.used_by(done);
        let deps: Vec<Option<TaskId>> = probs.iter().copied().map(Some).collect();
        let stored = b.store(u64::from(rows) * u64::from(seq), &deps);
        row_blocks.release(block, stored);
    }
}
