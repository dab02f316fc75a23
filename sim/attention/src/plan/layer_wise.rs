//! Layer-Wise (§5.1): the unfused baseline. QKᵀ, softmax and PV each run to
//! completion over all heads before the next starts, each as its own kernel
//! that reads its input from DRAM and writes its output to DRAM.
//!
//! Intermediates go to DRAM even when they would fit in L1: Table 2 only
//! makes sense that way (ViT-B/14's whole C is 0.9 MB, yet Layer-Wise is
//! 4× slower than MAS there). Each kernel is sequential: a step owns one
//! buffer from its load to its write-back. QKᵀ produces `rows`×`cols`
//! tiles of C from the resident Q_h and K_h; softmax and PV work on chunks
//! of `rows` full rows.

use super::{Builder, Geom, MatMul, Need, Resident};
use crate::engine::TaskId;
use crate::tiling::Tiling;

fn cols(t: Tiling) -> u32 {
    t.inner.unwrap_or(t.rows)
}

pub(super) fn need(g: &Geom, t: Tiling) -> Need {
    let (s, d) = (u64::from(g.seq), u64::from(g.dim));
    let (rows, cols) = (u64::from(t.rows), u64::from(cols(t)));
    let cores = u64::from(g.cores);
    let scores = 4 * s * d + rows * cols;
    let softmax = rows * s;
    let output = 2 * s * d + rows * (s + d);
    let chunks = g.blocks(t.rows);
    Need {
        l1_elems: scores.max(softmax).max(output),
        tasks: chunks * ((s / cols) * (cores + 2) + 2 * (cores + 3)) + 3 * u64::from(g.heads) + 2,
    }
}

pub(super) fn build(b: &mut Builder, t: Tiling) {
    scores(b, t.rows, cols(t));
    let gate = b.fence();
    softmax(b, t.rows, gate);
    let gate = b.fence();
    super::weighted_values(b, t.rows, gate);
}

/// The QKᵀ kernel: C tile by tile, each stored before the next is computed.
fn scores(b: &mut Builder, rows: u32, cols: u32) {
    let (mut q, mut k) = (Resident::new(), Resident::new());
    let mut retired: Option<TaskId> = None;
    for head in b.geom.block_heads(rows) {
        let lq = q.fetch(b, head, None);
        let lk = k.fetch(b, head, None);
        for _ in 0..b.geom.seq / cols {
            let tiles = b.per_core(rows, |b, core, r| {
                b.matmul(MatMul::Qk, core, r, cols, &[Some(lq), Some(lk), retired])
            });
            let done = b.join(&tiles);
            q.used_by(done);
            k.used_by(done);
            retired = Some(b.store(u64::from(rows) * u64::from(cols), &[Some(done)]));
        }
    }
}

/// The softmax kernel: load rows of C, softmax in place, store P.
fn softmax(b: &mut Builder, rows: u32, gate: TaskId) {
    let elems = u64::from(rows) * u64::from(b.geom.seq);
    let mut retired: Option<TaskId> = None;
    for _ in 0..b.geom.blocks(rows) {
        let c = b.load(elems, &[retired, Some(gate)]);
        let probs = b.per_core(rows, |b, core, r| b.softmax(core, r, &[Some(c)]));
        let deps: Vec<Option<TaskId>> = probs.iter().copied().map(Some).collect();
        retired = Some(b.store(elems, &deps));
    }
}
