//! TileFlow (§5.1): all three operators fused and pipelined. The paper
//! re-implemented it from Zheng et al. (2023) without further detail; this
//! is our reading of "dividing matrices into sub-tiles that fit within
//! on-chip memory, fusing MatMul and softmax operations with pipeline
//! execution".
//!
//! A fused tile is a block of `rows` query rows. Inside it, strips of
//! `strip_rows` full rows are pipelined exactly as MAS pipelines its rounds
//! (QKᵀ of strip j+1 on the MAC units while the VEC units run the softmax
//! of strip j). The pipeline is scoped to the fused tile, as TileFlow's
//! tile-centric pipelining is: a tile's Q is loaded before and its O
//! written after, and the next tile starts only then. K_h and V_h stay
//! resident per head, double-buffered across heads. The difference to MAS
//! is thus the drain at every tile boundary with its exposed Q/O
//! transfers.

use super::{Builder, Geom, MatMul, Need, Resident, Ring, pipeline};
use crate::engine::TaskId;
use crate::tiling::Tiling;

fn strip_rows(t: Tiling) -> u32 {
    t.inner.unwrap_or(t.rows)
}

pub(super) fn need(g: &Geom, t: Tiling) -> Need {
    let (s, d) = (u64::from(g.seq), u64::from(g.dim));
    let (rows, strip) = (u64::from(t.rows), u64::from(strip_rows(t)));
    let cores = u64::from(g.cores);
    // Per strip: QKᵀ, softmax and PV per core and two joins.
    let per_tile = 3 + (rows / strip) * (3 * cores + 2);
    Need {
        l1_elems: 4 * s * d + 2 * rows * d + 2 * strip * s,
        tasks: g.blocks(t.rows) * per_tile + 2 * u64::from(g.heads),
    }
}

pub(super) fn build(b: &mut Builder, t: Tiling) {
    let (rows, strip) = (t.rows, strip_rows(t));
    let block_elems = u64::from(rows) * u64::from(b.geom.dim);
    let n = (rows / strip) as usize;
    let (mut k, mut v) = (Resident::new(), Resident::new());
    let mut strips = Ring::new(2);
    let mut retired: Option<TaskId> = None;
    for head in b.geom.block_heads(rows) {
        let seq = b.geom.seq;
        let lk = k.fetch(b, head, None);
        let lv = v.fetch(b, head, None);
        let q = b.load(block_elems, &[retired]);
        let mut scores = vec![Vec::new(); n];
        let mut probs = vec![Vec::new(); n];
        let mut slots: Vec<_> = (0..n).map(|_| None).collect();
        let mut outputs = Vec::new();
        for round in pipeline(n) {
            if let Some(j) = round.softmax {
                let c: &Vec<TaskId> = &scores[j];
                probs[j] = b.per_core(strip, |b, core, r| {
                    b.softmax(core, r, &[c.get(core as usize).copied()])
                });
            }
            if let Some(j) = round.pv {
                let p: &Vec<TaskId> = &probs[j];
                outputs = b.per_core(strip, |b, core, r| {
                    b.matmul(
                        MatMul::Pv,
                        core,
                        r,
                        seq,
                        &[p.get(core as usize).copied(), Some(lv)],
                    )
                });
                let done = b.join(&outputs);
                v.used_by(done);
                if let Some(slot) = slots[j].take() {
                    strips.release(slot, done);
                }
            }
            if let Some(j) = round.qk {
                let slot = strips.claim();
                scores[j] = b.per_core(strip, |b, core, r| {
                    b.matmul(MatMul::Qk, core, r, seq, &[Some(q), Some(lk), slot.wait])
                });
                let done = b.join(&scores[j]);
                k.used_by(done);
                slots[j] = Some(slot);
            }
        }
        let deps: Vec<Option<TaskId>> = outputs.iter().copied().map(Some).collect();
        retired = Some(b.store(block_elems, &deps));
    }
}
