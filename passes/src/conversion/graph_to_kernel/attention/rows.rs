//! The register attention template: an invocation per query (or `lanes`,
//! splitting its keys), holding the query and its weighted sum of values
//! in registers. A workgroup of `rows` queries of one head reads a tile of
//! `keys` keys and values into workgroup memory; the invocations of a
//! lane then read the same key at once (a broadcast; the lanes, one key
//! each, in different banks), four keys per softmax step, so that a step's
//! rescaling of the sum is shared by four keys. The next tile's loads go
//! out before the current tile is computed (held in registers, stored
//! after it), so that a workgroup does not wait on memory at every tile.
//!
//! Where the blocks of queries are too few to give the device's units
//! work, the key tiles of each block are split over workgroups, as
//! FlashAttention's split-KV does: each writes its unnormalised sums, its
//! maximum and its total, and the kernel that reads the result rescales
//! them to the largest maximum and divides (`combine_attention`).

use ircc_core::{ElemType, Module, OpId, Type, ValueId};
use ircc_dialects::graph;
use ircc_dialects::kernel::AttentionRowsSchedule;
use ircc_dialects::kernel::Target;
use ircc_dialects::kernel::ops::{BinaryFn, CmpPred, FuncTemplate, IdKind, UnaryFn};

use super::super::lowering::{ArgRole, Ix, KernelBuilder};
use super::super::lowering::{guarded, target, tensor_shape};
use super::super::values::ACC;
use super::{
    Dims, R, Scorer, Team, Tile, Weight, kv_head, padded_stride, round4, store_result, wrap,
};

/// The register template's tiles: a workgroup of `rows` queries by
/// `lanes` invocations each, which share out a tile of `keys` keys (four
/// at a time, a multiple of `4 * lanes`) and combine their sums at the end.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in super::super) struct Rows {
    rows: i64,
    lanes: i64,
    keys: i64,
    /// Workgroups sharing a block of queries, each taking an equal range of
    /// the key tiles and writing its partial sums (`splits` > 1).
    splits: i64,
}

impl Rows {
    pub(in super::super) fn of(s: AttentionRowsSchedule) -> Rows {
        Rows {
            rows: s.rows,
            lanes: s.lanes,
            keys: s.keys,
            splits: s.splits,
        }
    }

    pub(in super::super) fn schedule(&self) -> AttentionRowsSchedule {
        AttentionRowsSchedule {
            rows: self.rows,
            lanes: self.lanes,
            keys: self.keys,
            splits: self.splits,
        }
    }

    /// The tiles for the attention op `op` on target `t`, for a device of
    /// `units` compute units (a GPU where `gpu`); `None` where a query and
    /// its sum of values exceed the target's registers, or a tile its
    /// workgroup memory, or the heads its grid.
    ///
    /// On a GPU a query takes `attention_max_key_lanes` invocations, which
    /// split its keys: a query's time is its keys' chain of steps, and
    /// only splitting it shortens that; and its key tiles are split over
    /// at least `attention_gpu_least_splits` workgroups. On a CPU it takes
    /// one, or where that leaves the device fewer than
    /// `attention_unit_invocations` per compute unit, up to
    /// `attention_max_key_lanes`. A
    /// workgroup takes `attention_rows_queries` queries, fewer where their
    /// lanes would pass `attention_rows_max_threads`, and a tile
    /// `attention_rows_tile_keys` keys, as workgroup memory allows; the
    /// tiles of a block are split over workgroups as [`splits`] says.
    pub(in super::super) fn choose(
        m: &Module,
        op: OpId,
        t: &Target,
        units: i64,
        gpu: bool,
    ) -> Option<Rows> {
        let d = graph::ops::Attention::new(m, op).and_then(|a| Dims::of(m, &a))?;
        if d.size + d.value_size > t.attention_max_register_words {
            return None;
        }
        // On a GPU the most lanes, even where fewer fill the units: each
        // takes a share of the query's chain of steps (on an H200, 12
        // heads of 64 and 4096 queries: 2559 us at one lane a query, 2057
        // at two).
        let mut lanes = if gpu { t.attention_max_key_lanes } else { 1 };
        while lanes * 2 <= t.attention_max_key_lanes && !fills(t, &d, lanes, units) {
            lanes *= 2;
        }
        // Fewer lanes where a tile for them does not fit, the key tile's
        // memory would not hold a chunk of their columns, or the grid of
        // their (fewer) queries a workgroup would pass its limit.
        loop {
            let rows = t
                .attention_rows_queries
                .min(t.attention_rows_max_threads / lanes);
            let words = t.max_workgroup_storage_bytes / 4 - 2 * rows * lanes;
            let per_tile = 4 * lanes;
            let fit = words / (padded_stride(d.size) + padded_stride(d.value_size));
            let keys = fit
                .min(t.attention_rows_tile_keys)
                .min(d.keys + per_tile - 1)
                / per_tile
                * per_tile;
            let blocks = (d.queries + rows - 1) / rows;
            let splits = splits(
                t,
                d.batch * d.heads * blocks,
                (d.keys + keys.max(1) - 1) / keys.max(1),
                units,
                if gpu { t.attention_gpu_least_splits } else { 1 },
            );
            let tiles = Rows {
                rows,
                lanes,
                keys,
                splits,
            };
            let grid_fits = d.batch * d.heads <= t.max_workgroups_per_dimension
                && blocks <= t.max_workgroups_per_dimension;
            if keys > 0 && grid_fits && (lanes == 1 || tiles.chunk(&d) >= lanes) {
                return Some(tiles);
            }
            if lanes == 1 {
                return None;
            }
            lanes /= 2;
        }
    }

    /// Whether these tiles give the device's `units` the invocations the
    /// target asks of each; where they do not, the tiled template, whose
    /// invocations each take one key of a tile, is the faster (auto).
    /// (Splitting the keys over workgroups helps the register template
    /// there too, but not past the tiled one in a model: on an H100,
    /// ViT-B/16's twelve attentions of 197 queries took 448 us tiled and
    /// 466 split, combining kernels included.)
    pub(in super::super) fn fills(&self, m: &Module, op: OpId, units: i64) -> bool {
        let t = target();
        graph::ops::Attention::new(m, op)
            .and_then(|a| Dims::of(m, &a))
            .is_some_and(|d| fills(t, &d, self.lanes, units))
    }

    /// Why these tiles (a schedule's, which may come from anywhere) cannot
    /// compute attention op `op` on target `t`, if they cannot: the limits
    /// [`Rows::choose`] keeps to.
    pub(in super::super) fn unfit(&self, m: &Module, op: OpId, t: &Target) -> Option<String> {
        let Some(d) = graph::ops::Attention::new(m, op).and_then(|a| Dims::of(m, &a)) else {
            return Some("not a graph.attention".into());
        };
        let Rows {
            rows,
            lanes,
            keys,
            splits,
        } = *self;
        // Each test reads only what the tests before it bounded.
        let words = || t.max_workgroup_storage_bytes / 4 - 2 * rows * lanes;
        let blocks = || (d.queries + rows - 1) / rows;
        let key_tiles = || (d.keys + keys - 1) / keys;
        let why = if d.size + d.value_size > t.attention_max_register_words {
            format!(
                "a query and its sum of values take {} words, over the target's {}",
                d.size + d.value_size,
                t.attention_max_register_words
            )
        } else if lanes.count_ones() != 1 || lanes > t.attention_max_key_lanes {
            format!(
                "lanes must be a power of two of at most {} (attention_max_key_lanes)",
                t.attention_max_key_lanes
            )
        } else if rows > t.attention_rows_queries || rows * lanes > t.attention_rows_max_threads {
            format!(
                "rows must be at most {} (attention_rows_queries) and rows times lanes at most {} (attention_rows_max_threads)",
                t.attention_rows_queries, t.attention_rows_max_threads
            )
        } else if keys % (4 * lanes) != 0 || keys > t.attention_rows_tile_keys {
            format!(
                "keys must be a multiple of {} (four per lane) of at most {} (attention_rows_tile_keys)",
                4 * lanes,
                t.attention_rows_tile_keys
            )
        } else if keys * (padded_stride(d.size) + padded_stride(d.value_size)) > words() {
            format!("a key tile exceeds workgroup memory ({} words)", words())
        } else if splits > key_tiles() {
            format!("more splits than its {} key tiles", key_tiles())
        } else if d.batch * d.heads > t.max_workgroups_per_dimension
            || blocks() > t.max_workgroups_per_dimension
        {
            format!(
                "the grid exceeds the target's {} workgroups a dimension",
                t.max_workgroups_per_dimension
            )
        } else if lanes > 1 && self.chunk(&d) < lanes {
            "a key tile too small to combine the lanes' sums through".to_string()
        } else {
            return None;
        };
        Some(format!(
            "attention_rows with rows = {rows}, lanes = {lanes}, keys = {keys}, splits = {splits}: {why}"
        ))
    }

    /// Value columns the lanes of a query combine at a time, through the
    /// key tile's memory: a multiple of the lanes.
    fn chunk(&self, d: &Dims) -> i64 {
        let room = self.keys * padded_stride(d.size) / (self.rows * self.lanes);
        (room / self.lanes * self.lanes)
            .min((d.value_size + self.lanes - 1) / self.lanes * self.lanes)
    }
}

/// Workgroups to split each block's key tiles over, for a grid of `grid`
/// workgroups and `key_tiles` tiles: `least`, or where the grid gives the
/// device's `units` fewer than `attention_split_below` workgroups
/// apiece, as many as bring it to `attention_split_workgroups_per_unit`;
/// each split taking at least `attention_split_min_tiles` tiles, and all
/// as many (a split count dividing the tiles).
fn splits(t: &Target, grid: i64, key_tiles: i64, units: i64, least: i64) -> i64 {
    let wanted = if grid >= units * t.attention_split_below {
        least
    } else {
        let bring = units * t.attention_split_workgroups_per_unit;
        ((bring + grid - 1) / grid).max(least)
    };
    let most = wanted.min(key_tiles / t.attention_split_min_tiles);
    (1..=most.max(1))
        .rev()
        .find(|s| key_tiles % s == 0)
        .unwrap_or(1)
}

/// Whether `lanes` invocations per query give each of `units` compute
/// units the target's `attention_unit_invocations`.
fn fills(t: &Target, d: &Dims, lanes: i64, units: i64) -> bool {
    d.batch * d.heads * d.queries * lanes >= units * t.attention_unit_invocations
}

/// The register template over `[batch, heads, queries, value size]`: a
/// workgroup per block of `rows` queries of one head.
pub(super) fn attention_rows(
    kb: &mut KernelBuilder,
    op: OpId,
    outputs: &[(ValueId, ValueId)],
    tiles: &Rows,
) -> R<()> {
    let a = graph::ops::Attention::new(kb.m(), op).ok_or("not a graph.attention")?;
    let (q, k, v, y) = (a.q(), a.k(), a.v(), a.y());
    let d = Dims::of(kb.m(), &a).ok_or("attention of tensors")?;
    let scorer = Scorer::of(kb.m(), op, &d)?;
    let Rows {
        rows,
        lanes,
        keys: tile,
        splits,
    } = *tiles;
    let threads = rows * lanes;
    let blocks = (d.queries + rows - 1) / rows;
    let tid = kb.id(IdKind::Local, 0, threads);
    let block = kb.id(IdKind::Workgroup, 0, blocks);
    let head = kb.id(IdKind::Workgroup, 1, d.batch * d.heads);
    let split = if splits > 1 {
        kb.id(IdKind::Workgroup, 2, splits)
    } else {
        Ix::constant(0)
    };
    // This invocation's query (`row` of the block) and lane among its
    // query's.
    let (row, lane) = if lanes > 1 {
        (
            tid.clone().floor_div(Ix::constant(lanes)),
            tid.clone().modulo(Ix::constant(lanes)),
        )
    } else {
        (tid.clone(), Ix::constant(0))
    };
    let b = head.clone().floor_div(Ix::constant(d.heads));
    let h = head.modulo(Ix::constant(d.heads));
    let g = kv_head(&h, d.group);
    let i = block * Ix::constant(rows) + row.clone();
    let ragged_queries = d.queries % rows != 0;
    let qi = wrap(&i, d.queries, ragged_queries);
    let (k_row, v_row) = (padded_stride(d.size), padded_stride(d.value_size));
    let keys = kb.ir.alloc(tile * k_row, ACC);
    let values = kb.ir.alloc(tile * v_row, ACC);
    let team = Team {
        tid: tid.clone(),
        threads,
    };
    // The dot products read the keys' padding to whole vectors; the sums
    // drop the values' padded columns.
    team.zero_padding(kb, keys, tile, k_row, d.size)?;
    let zero = kb.ir.constant(0.0, ACC);
    // The query, in registers; to whole vectors, zeros (as the keys).
    let read = round4(d.size);
    let mut query = Vec::with_capacity(read as usize);
    for c in 0..d.size {
        let x = kb.value_at(q, &[b.clone(), h.clone(), qi.clone(), Ix::constant(c)])?;
        query.push(kb.widen(x));
    }
    query.resize(read as usize, zero);
    let lowest = kb.ir.constant(f64::from(f32::MIN), ACC);
    let mut init = vec![lowest, zero];
    init.extend(std::iter::repeat_n(zero, d.value_size as usize));
    let ragged_keys = d.keys % tile != 0;
    // This workgroup's share of the key tiles.
    let split_tiles = (d.keys + tile - 1) / tile / splits;
    let first_tile = split.clone() * Ix::constant(split_tiles);
    let keys_tile = Tile::new(kb, k, keys, [tile, d.size], k_row);
    let values_tile = Tile::new(kb, v, values, [tile, d.value_size], v_row);
    let state = init.len();
    let most_ahead = target().attention_read_ahead_words;
    let ahead = [&keys_tile, &values_tile]
        .iter()
        .all(|t| team.reads_ahead(t, most_ahead));
    let mut first_fetch = Vec::new();
    if ahead {
        for memory in [&keys_tile, &values_tile] {
            let first = first_tile.clone() * Ix::constant(tile);
            let f = team.read_ahead(kb, memory, [&b, &g], &first, d.keys)?;
            init.extend(f.values.iter().copied());
            first_fetch.push(f);
        }
    }
    let carried = kb.for_loop(split_tiles, init, &mut |kb, t, c| {
        let first_key = (first_tile.clone() + t.clone()) * Ix::constant(tile);
        let (c, fetched) = c.split_at(state);
        let mut next_fetch = Vec::new();
        if ahead {
            let (in_keys, in_values) = fetched.split_at(first_fetch[0].values.len());
            team.write(kb, &keys_tile, &first_fetch[0], in_keys);
            team.write(kb, &values_tile, &first_fetch[1], in_values);
            kb.ir.barrier();
            // The next tile's loads go out now, to arrive while this one
            // is computed (the last iteration reads the first tile again,
            // in bounds, and drops it).
            let next = (first_tile.clone()
                + (t + Ix::constant(1)).modulo(Ix::constant(split_tiles)))
                * Ix::constant(tile);
            for memory in [&keys_tile, &values_tile] {
                let f = team.read_ahead(kb, memory, [&b, &g], &next, d.keys)?;
                next_fetch.extend(f.values);
            }
        } else {
            for memory in [&keys_tile, &values_tile] {
                team.load_tile(kb, memory, [&b, &g], &first_key, d.keys)?;
            }
            kb.ir.barrier();
        }
        // Step `s` of this lane: the tile's keys `4 lanes s + lanes u +
        // lane` for u in 0..4, so that the lanes of a query read rows one
        // stride apart, in different banks.
        let step = |kb: &mut KernelBuilder, s: Ix, c: &[ValueId]| -> R<Vec<ValueId>> {
            let (max, total, acc) = (c[0], c[1], &c[2..]);
            let first = s * Ix::constant(4 * lanes) + lane.clone();
            let key = |u: i64| first.clone() + Ix::constant(u * lanes);
            let mut seen = Vec::with_capacity(4);
            let mut allowed = Vec::with_capacity(4);
            for u in 0..4 {
                let jj = key(u);
                // Four partial sums, one per vector lane, so that a dot
                // product is not one chain of dependent additions.
                let mut parts: [Option<ValueId>; 4] = [None; 4];
                for c4 in 0..read / 4 {
                    let at = jj.clone() * Ix::constant(k_row) + Ix::constant(4 * c4);
                    let ys = kb.load4(keys, &at);
                    for (x, y) in ys.into_iter().enumerate() {
                        let p = kb.ir.binary(BinaryFn::Mul, query[(4 * c4) as usize + x], y);
                        parts[x] = Some(match parts[x] {
                            Some(sum) => kb.ir.binary(BinaryFn::Add, sum, p),
                            None => p,
                        });
                    }
                }
                let parts = parts.map(|p| p.unwrap_or(zero));
                let low = kb.ir.binary(BinaryFn::Add, parts[0], parts[1]);
                let high = kb.ir.binary(BinaryFn::Add, parts[2], parts[3]);
                let dot = kb.ir.binary(BinaryFn::Add, low, high);
                let j = first_key.clone() + jj;
                let (s, flag) =
                    scorer.score_key(kb, dot, [&b, &h, &qi], &j, ragged_keys, lowest)?;
                seen.push(s);
                allowed.push(flag);
            }
            let next_max = seen
                .iter()
                .fold(max, |m, &s| kb.ir.binary(BinaryFn::Max, m, s));
            let drop = kb.ir.binary(BinaryFn::Sub, max, next_max);
            let rescale = kb.ir.unary(UnaryFn::Exp, drop);
            let mut next = vec![next_max, kb.ir.binary(BinaryFn::Mul, total, rescale)];
            next.extend(acc.iter().map(|&x| kb.ir.binary(BinaryFn::Mul, x, rescale)));
            for (u, (&s, flag)) in seen.iter().zip(&allowed).enumerate() {
                let shift = kb.ir.binary(BinaryFn::Sub, s, next_max);
                let mut w = kb.ir.unary(UnaryFn::Exp, shift);
                if let Some(f) = *flag {
                    w = kb.ir.select(f, w, zero);
                }
                next[1] = kb.ir.binary(BinaryFn::Add, next[1], w);
                let at = key(u as i64) * Ix::constant(v_row);
                for c4 in 0..round4(d.value_size) / 4 {
                    let vs = kb.load4(values, &(at.clone() + Ix::constant(4 * c4)));
                    for (x, value) in vs.into_iter().enumerate() {
                        let col = (4 * c4) as usize + x;
                        if col < acc.len() {
                            let p = kb.ir.binary(BinaryFn::Mul, w, value);
                            next[2 + col] = kb.ir.binary(BinaryFn::Add, next[2 + col], p);
                        }
                    }
                }
            }
            Ok(next)
        };
        let steps = tile / (4 * lanes);
        let next = if steps == 1 {
            step(kb, Ix::constant(0), c)?
        } else {
            kb.for_loop(steps, c.to_vec(), &mut |kb, s, c| step(kb, s, c))?
        };
        // The next tile's loads overwrite what this one read.
        kb.ir.barrier();
        let mut next = next;
        next.extend(next_fetch);
        Ok(next)
    })?;
    let carried = &carried[..state];
    if splits > 1 {
        // Each split writes its unnormalised sums, then its maximum and
        // total, for the kernel that reads the result to combine.
        let mut shape = tensor_shape(kb, y);
        *shape.last_mut().ok_or("attention of tensors")? = d.value_size + 2;
        shape.insert(0, splits);
        kb.partials = Some(Type::tensor(shape, ElemType::F32));
    }
    let partial_at = |col: Ix| vec![split.clone(), b.clone(), h.clone(), i.clone(), col];
    // A query whose keys are all masked has no weight (`any` false): zeros.
    let put = |kb: &mut KernelBuilder, col: Ix, sum: ValueId, total: ValueId, any| -> R<()> {
        if splits > 1 {
            kb.store_output(ArgRole::Partials, &partial_at(col), sum);
            return Ok(());
        }
        let idx = [b.clone(), h.clone(), i.clone(), col];
        store_result(kb, op, outputs, &idx, sum, Weight { total, any, zero })
    };
    let inside = |kb: &mut KernelBuilder, col: Option<&Ix>| {
        let mut flags = Vec::new();
        if ragged_queries {
            flags.push(kb.index_cmp(CmpPred::Lt, &i, d.queries));
        }
        if let Some(col) = col {
            flags.push(kb.index_cmp(CmpPred::Lt, col, d.value_size));
        }
        (!flags.is_empty()).then(|| kb.ir.all(flags))
    };
    let (max, total, acc) = (carried[0], carried[1], &carried[2..]);
    if lanes == 1 {
        let any = kb.ir.cmp(CmpPred::Gt, total, zero);
        let cond = inside(kb, None);
        return guarded(kb, cond, &mut |kb| {
            for (col, &sum) in acc.iter().enumerate() {
                put(kb, Ix::constant(col as i64), sum, total, any)?;
            }
            if splits > 1 {
                for (x, col) in [(max, d.value_size), (total, d.value_size + 1)] {
                    kb.store_output(ArgRole::Partials, &partial_at(Ix::constant(col)), x);
                }
            }
            Ok(())
        })
        .map(|()| finish(kb, tiles, blocks, &d));
    }
    // The lanes of a query combine: each one's maximum, total and sums go
    // through workgroup memory (the sums a chunk of columns at a time,
    // through the key tile), rescaled to the query's maximum; each lane
    // then sums and stores its share of the chunk's columns.
    let pairs = kb.ir.alloc(2 * threads, ACC);
    kb.store(max, pairs, &tid);
    kb.store(total, pairs, &(tid.clone() + Ix::constant(threads)));
    kb.ir.barrier();
    let first_lane = row * Ix::constant(lanes);
    let others: Vec<(ValueId, ValueId)> = (0..lanes)
        .map(|o| {
            let at = first_lane.clone() + Ix::constant(o);
            let m = kb.load(pairs, &at);
            let t = kb.load(pairs, &(at + Ix::constant(threads)));
            (m, t)
        })
        .collect();
    let query_max = others
        .iter()
        .fold(lowest, |m, &(x, _)| kb.ir.binary(BinaryFn::Max, m, x));
    let mut query_total = zero;
    for &(m, t) in &others {
        let drop = kb.ir.binary(BinaryFn::Sub, m, query_max);
        let factor = kb.ir.unary(UnaryFn::Exp, drop);
        let t = kb.ir.binary(BinaryFn::Mul, t, factor);
        query_total = kb.ir.binary(BinaryFn::Add, query_total, t);
    }
    let drop = kb.ir.binary(BinaryFn::Sub, max, query_max);
    let factor = kb.ir.unary(UnaryFn::Exp, drop);
    let any = kb.ir.cmp(CmpPred::Gt, query_total, zero);
    if splits > 1 {
        let first = kb.index_cmp(CmpPred::Lt, &lane, 1);
        let cond = match inside(kb, None) {
            Some(c) => kb.ir.all(vec![c, first]),
            None => first,
        };
        guarded(kb, Some(cond), &mut |kb| {
            for (x, col) in [(query_max, d.value_size), (query_total, d.value_size + 1)] {
                kb.store_output(ArgRole::Partials, &partial_at(Ix::constant(col)), x);
            }
            Ok(())
        })?;
    }
    let chunk = tiles.chunk(&d);
    for first_col in (0..d.value_size).step_by(chunk as usize) {
        // The chunk before has been read (the key loop's last barrier
        // covers the first).
        if first_col > 0 {
            kb.ir.barrier();
        }
        for col in first_col..(first_col + chunk).min(d.value_size) {
            let x = kb.ir.binary(BinaryFn::Mul, acc[col as usize], factor);
            let at = tid.clone() * Ix::constant(chunk) + Ix::constant(col - first_col);
            kb.store(x, keys, &at);
        }
        kb.ir.barrier();
        for part in 0..chunk / lanes {
            let local = lane.clone() + Ix::constant(part * lanes);
            let mut sum = zero;
            for o in 0..lanes {
                let at =
                    (first_lane.clone() + Ix::constant(o)) * Ix::constant(chunk) + local.clone();
                let x = kb.load(keys, &at);
                sum = kb.ir.binary(BinaryFn::Add, sum, x);
            }
            let col = local + Ix::constant(first_col);
            let ragged_cols = first_col + chunk > d.value_size;
            let cond = inside(kb, ragged_cols.then_some(&col));
            guarded(kb, cond, &mut |kb| {
                put(kb, col.clone(), sum, query_total, any)
            })?;
        }
    }
    finish(kb, tiles, blocks, &d);
    Ok(())
}

fn finish(kb: &mut KernelBuilder, tiles: &Rows, blocks: i64, d: &Dims) {
    let mut parameters = vec![tiles.rows, tiles.lanes, tiles.keys];
    if tiles.splits > 1 {
        parameters.push(tiles.splits);
    }
    kb.finish(
        [tiles.rows * tiles.lanes, 1, 1],
        [blocks, d.batch * d.heads, tiles.splits],
        FuncTemplate::AttentionRows,
        Some(parameters),
    );
}
