//! The tiled attention template: a workgroup of `rows` queries by `lanes`
//! keys of a tile, each invocation computing one score and its share of
//! the value columns, the scores and weights shared through workgroup
//! memory.

use ircc_core::{Module, OpId, ValueId};
use ircc_dialects::graph;
use ircc_dialects::kernel::Target;
use ircc_dialects::kernel::ops::{BinaryFn, CmpPred, FuncTemplate, IdKind, UnaryFn};

use super::super::lowering::guarded;
use super::super::lowering::{Ix, KernelBuilder};
use super::super::values::ACC;
use super::{
    Dims, R, Scorer, Team, Tile, Weight, kv_head, padded_stride, read_or_zero, round4,
    rows_contiguous, split, store_result, wrap,
};

/// The tiled template's workgroup: `rows` queries by `lanes` invocations,
/// one key of each tile of `lanes` keys (a multiple of four) and its
/// share of the value columns apiece.
struct Tiles {
    rows: i64,
    lanes: i64,
}

impl Tiles {
    fn of(t: &Target) -> Tiles {
        Tiles {
            rows: t.attention_query_tile,
            lanes: t.attention_key_tile,
        }
    }

    /// Value columns per invocation: adjacent ones, four at a time where
    /// there are that many, so each is read as a vector.
    fn columns(&self, d: &Dims) -> i64 {
        let c = (d.value_size + self.lanes - 1) / self.lanes;
        if c >= 4 { round4(c) } else { c }
    }

    /// The row stride of the query block: whole vectors.
    fn query_stride(&self, d: &Dims) -> i64 {
        round4(d.size)
    }

    /// The row stride of the value tile: every lane's columns.
    fn value_stride(&self, d: &Dims) -> i64 {
        self.lanes * self.columns(d)
    }

    /// Words of workgroup memory: the query block, the key and value
    /// tiles, the scores and the weights.
    fn words(&self, d: &Dims) -> i64 {
        self.rows * self.query_stride(d)
            + self.lanes * (padded_stride(d.size) + self.value_stride(d))
            + 2 * self.rows * self.lanes
    }
}

/// Whether the tiled template computes the attention op `op` on the
/// target: its tiles fit in workgroup memory, its value columns in
/// registers, and its blocks of queries and its heads in the grid.
pub(super) fn fits(m: &Module, op: OpId, t: &Target) -> bool {
    let Some(d) = graph::ops::Attention::new(m, op).and_then(|a| Dims::of(m, &a)) else {
        return false;
    };
    let tiles = Tiles::of(t);
    tiles.words(&d) * 4 <= t.max_workgroup_storage_bytes
        && tiles.columns(&d) <= t.attention_max_columns
        && d.batch * d.heads <= t.max_workgroups_per_dimension
        && (d.queries + tiles.rows - 1) / tiles.rows <= t.max_workgroups_per_dimension
}

/// The tiled template over `[batch, heads, queries, value size]`: a
/// workgroup per block of `rows` queries of one head.
pub(super) fn attention_tiled(
    kb: &mut KernelBuilder,
    op: OpId,
    outputs: &[(ValueId, ValueId)],
    t: &Target,
) -> R<()> {
    let a = graph::ops::Attention::new(kb.m(), op).ok_or("not a graph.attention")?;
    let (q, k, v) = (a.q(), a.k(), a.v());
    let d = Dims::of(kb.m(), &a).ok_or("attention of tensors")?;
    let scorer = Scorer::of(kb.m(), op, &d)?;
    let tiles = Tiles::of(t);
    let (rows, lanes, columns) = (tiles.rows, tiles.lanes, tiles.columns(&d));
    let threads = rows * lanes;
    let blocks = (d.queries + rows - 1) / rows;
    let lane = kb.id(IdKind::Local, 0, lanes);
    let row = kb.id(IdKind::Local, 1, rows);
    let block = kb.id(IdKind::Workgroup, 0, blocks);
    let head = kb.id(IdKind::Workgroup, 1, d.batch * d.heads);
    let b = head.clone().floor_div(Ix::constant(d.heads));
    let h = head.modulo(Ix::constant(d.heads));
    let g = kv_head(&h, d.group);
    let tid = row.clone() * Ix::constant(lanes) + lane.clone();
    let i = block * Ix::constant(rows) + row.clone();
    let (size, value_size) = (d.size, d.value_size);
    let (q_row, k_row, v_row) = (
        tiles.query_stride(&d),
        padded_stride(d.size),
        tiles.value_stride(&d),
    );
    let queries = kb.ir.alloc(rows * q_row, ACC);
    let keys = kb.ir.alloc(lanes * k_row, ACC);
    let values = kb.ir.alloc(lanes * v_row, ACC);
    let scores = kb.ir.alloc(threads, ACC);
    let weights = kb.ir.alloc(threads, ACC);
    let team = Team {
        tid: tid.clone(),
        threads,
    };
    let queries_by_row = rows_contiguous(kb, q);
    let zero = kb.ir.constant(0.0, ACC);
    team.zero_padding(kb, queries, rows, q_row, size)?;
    team.zero_padding(kb, keys, lanes, k_row, size)?;
    // The block's queries, once; rows past the last query are zeros.
    let first = i.clone() - row.clone();
    team.spread(kb, rows * size, &mut |kb, e| {
        let (r, c) = split(&e, rows, size, queries_by_row);
        let query = first.clone() + r.clone();
        let ragged = d.queries % rows != 0;
        let x = read_or_zero(kb, q, [&b, &h, &query, &c], (d.queries, ragged), ACC, None)?[0];
        kb.store(x, queries, &(r * Ix::constant(q_row) + c));
        Ok(())
    })?;
    let lowest = kb.ir.constant(f64::from(f32::MIN), ACC);
    let mut init = vec![lowest, zero];
    init.extend(std::iter::repeat_n(zero, columns as usize));
    let key_tiles = (d.keys + lanes - 1) / lanes;
    let ragged = d.keys % lanes != 0;
    let carried = kb.for_loop(key_tiles, init, &mut |kb, tile, c| {
        let (max, total, acc) = (c[0], c[1], &c[2..]);
        let first_key = tile.clone() * Ix::constant(lanes);
        let keys_tile = Tile::new(kb, k, keys, [lanes, size], k_row);
        let values_tile = Tile::new(kb, v, values, [lanes, value_size], v_row);
        for tile in [&keys_tile, &values_tile] {
            team.load_tile(kb, tile, [&b, &g], &first_key, d.keys)?;
        }
        kb.ir.barrier();
        // This invocation's key: its score for its query.
        // (The rows' padding past the head size holds zeros.)
        let dot = kb.for_loop(q_row / 4, vec![zero], &mut |kb, c, acc| {
            let c = c * Ix::constant(4);
            let xs = kb.load4(queries, &(row.clone() * Ix::constant(q_row) + c.clone()));
            let ys = kb.load4(keys, &(lane.clone() * Ix::constant(k_row) + c));
            let mut acc = acc[0];
            for (x, y) in xs.into_iter().zip(ys) {
                let p = kb.ir.binary(BinaryFn::Mul, x, y);
                acc = kb.ir.binary(BinaryFn::Add, acc, p);
            }
            Ok(vec![acc])
        })?[0];
        let j = first_key.clone() + lane.clone();
        let qi = wrap(&i, d.queries, d.queries % rows != 0);
        let (seen, allowed) = scorer.score_key(kb, dot, [&b, &h, &qi], &j, ragged, lowest)?;
        let slot = row.clone() * Ix::constant(lanes);
        kb.store(seen, scores, &tid);
        kb.ir.barrier();
        let next_max = kb.for_loop(lanes / 4, vec![max], &mut |kb, x, m| {
            let s = kb.load4(scores, &(slot.clone() + x * Ix::constant(4)));
            Ok(vec![
                s.into_iter()
                    .fold(m[0], |m, s| kb.ir.binary(BinaryFn::Max, m, s)),
            ])
        })?[0];
        let shift = kb.ir.binary(BinaryFn::Sub, seen, next_max);
        let mut weight = kb.ir.unary(UnaryFn::Exp, shift);
        if let Some(flag) = allowed {
            weight = kb.ir.select(flag, weight, zero);
        }
        kb.store(weight, weights, &tid);
        kb.ir.barrier();
        let drop = kb.ir.binary(BinaryFn::Sub, max, next_max);
        let rescale = kb.ir.unary(UnaryFn::Exp, drop);
        let mut sums = vec![kb.ir.binary(BinaryFn::Mul, total, rescale)];
        sums.extend(acc.iter().map(|&x| kb.ir.binary(BinaryFn::Mul, x, rescale)));
        let sums = kb.for_loop(lanes / 4, sums, &mut |kb, x, sums| {
            let x = x * Ix::constant(4);
            let ws = kb.load4(weights, &(slot.clone() + x.clone()));
            let mut next = sums.to_vec();
            for (jj, &w) in ws.iter().enumerate() {
                next[0] = kb.ir.binary(BinaryFn::Add, next[0], w);
                let at = (x.clone() + Ix::constant(jj as i64)) * Ix::constant(v_row)
                    + lane.clone() * Ix::constant(columns);
                let vs: Vec<ValueId> = if columns % 4 == 0 {
                    (0..columns / 4)
                        .flat_map(|c| kb.load4(values, &(at.clone() + Ix::constant(4 * c))))
                        .collect()
                } else {
                    (0..columns)
                        .map(|c| kb.load(values, &(at.clone() + Ix::constant(c))))
                        .collect()
                };
                for (col, value) in vs.into_iter().enumerate() {
                    let p = kb.ir.binary(BinaryFn::Mul, w, value);
                    next[1 + col] = kb.ir.binary(BinaryFn::Add, next[1 + col], p);
                }
            }
            Ok(next)
        })?;
        // The next tile's loads overwrite what this one read.
        kb.ir.barrier();
        let mut next = vec![next_max];
        next.extend(sums);
        Ok(next)
    })?;
    let (total, acc) = (carried[1], &carried[2..]);
    // A query whose keys are all masked has no weight: zeros.
    let any = kb.ir.cmp(CmpPred::Gt, total, zero);
    for (col, &acc) in acc.iter().enumerate() {
        let e = lane.clone() * Ix::constant(columns) + Ix::constant(col as i64);
        let mut flags = Vec::new();
        if lanes * columns > value_size {
            flags.push(kb.index_cmp(CmpPred::Lt, &e, value_size));
        }
        if d.queries % rows != 0 {
            flags.push(kb.index_cmp(CmpPred::Lt, &i, d.queries));
        }
        let cond = (!flags.is_empty()).then(|| kb.ir.all(flags));
        let idx = [b.clone(), h.clone(), i.clone(), e];
        let weight = Weight { total, any, zero };
        guarded(kb, cond, &mut |kb| {
            store_result(kb, op, outputs, &idx, acc, weight)
        })?;
    }
    kb.finish(
        [lanes, rows, 1],
        [blocks, d.batch * d.heads, 1],
        FuncTemplate::AttentionTiled,
        Some(vec![rows, lanes]),
    );
    Ok(())
}
