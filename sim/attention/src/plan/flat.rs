//! FLAT (§5.1): Q is split into row blocks and, per block, QKᵀ, softmax and
//! PV run on-chip one after another; only O goes back to DRAM.
//!
//! FLAT keeps one fused row block resident: Q_i, C_i/P_i and O_i hold their
//! L1 space until O_i is written back, and only then does the next block's
//! Q load start, so each block's Q and O transfers are exposed. K_h and V_h
//! stay resident per head (FLAT's row granularity needs all of them for
//! every block) and are double-buffered across heads.

use super::{Builder, Geom, MatMul, Need, Resident};
use crate::engine::TaskId;
use crate::tiling::Tiling;

pub(super) fn need(g: &Geom, t: Tiling) -> Need {
    let (s, d, rows) = (u64::from(g.seq), u64::from(g.dim), u64::from(t.rows));
    let cores = u64::from(g.cores);
    Need {
        l1_elems: 4 * s * d + rows * (s + 2 * d),
        tasks: g.blocks(t.rows) * (3 + 3 * cores) + 2 * u64::from(g.heads),
    }
}

pub(super) fn build(b: &mut Builder, t: Tiling) {
    let rows = t.rows;
    let block_elems = u64::from(rows) * u64::from(b.geom.dim);
    let (mut k, mut v) = (Resident::new(), Resident::new());
    let mut retired: Option<TaskId> = None;
    for head in b.geom.block_heads(rows) {
        let lk = k.fetch(b, head, None);
        let lv = v.fetch(b, head, None);
        let q = b.load(block_elems, &[retired]);
        let seq = b.geom.seq;
        let outputs = b.per_core(rows, |b, core, r| {
            let c = b.matmul(MatMul::Qk, core, r, seq, &[Some(q), Some(lk)]);
            let p = b.softmax(core, r, &[Some(c)]);
            b.matmul(MatMul::Pv, core, r, seq, &[Some(p), Some(lv)])
        });
        let done = b.join(&outputs);
        k.used_by(done);
        v.used_by(done);
        retired = Some(b.store(block_elems, &[Some(done)]));
    }
}
