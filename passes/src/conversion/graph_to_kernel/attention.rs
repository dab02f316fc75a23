//! `graph.attention` in kernels.
//!
//! The tiled template (`attention_tiled`) computes attention as
//! FlashAttention does, never storing the scores: a workgroup takes a
//! block of queries of one head and walks the keys a tile at a time,
//! keeping per query a running maximum, sum of weights and weighted sum
//! of values that it rescales as the maximum grows (an online softmax).
//! Each tile's keys and values are read from memory once for the whole
//! block, into workgroup memory; each invocation computes one key's score
//! for its query and an adjacent share of the value columns, reading
//! workgroup memory four words at a time.
//!
//! Where the tiles would not fit in workgroup memory (long heads), each
//! result element is computed on its own (`attention_at`): one invocation
//! walks every key for one value column.

use ircc_core::{ElemType, Module, OpId, ValueId};
use ircc_dialects::graph::{self, attention};
use ircc_dialects::kernel::Target;
use ircc_dialects::kernel::ops::{BinaryFn, CmpPred, FuncTemplate, IdKind, UnaryFn};

use super::lowering::{Input, Ix, KernelBuilder, kernel_elem};
use super::templates::{guarded, store_outputs};
use super::values::{ACC, tensor_shape};

type R<T> = Result<T, String>;

/// The shapes an attention op reads: `[batch, heads, queries, size]`,
/// `[batch, kv heads, keys, size]`, `[.., keys, value size]`.
struct Dims {
    batch: i64,
    heads: i64,
    queries: i64,
    keys: i64,
    size: i64,
    value_size: i64,
    /// Query heads per key/value head.
    group: i64,
}

impl Dims {
    fn of(m: &Module, a: &graph::ops::Attention) -> Option<Dims> {
        let shape = |v: ValueId| m.value_type(v).as_tensor().map(|t| t.shape.clone());
        let (q, k, v) = (shape(a.q())?, shape(a.k())?, shape(a.v())?);
        Some(Dims {
            batch: q[0],
            heads: q[1],
            queries: q[2],
            keys: k[2],
            size: q[3],
            value_size: v[3],
            group: q[1] / k[1].max(1),
        })
    }
}

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

    /// The row stride of the key tile: whole vectors and one more, so that
    /// the lanes' vector reads of one key each fall in different banks.
    fn key_stride(&self, d: &Dims) -> i64 {
        round4(d.size) + 4
    }

    /// The row stride of the value tile: every lane's columns.
    fn value_stride(&self, d: &Dims) -> i64 {
        self.lanes * self.columns(d)
    }

    /// Words of workgroup memory: the query block, the key and value
    /// tiles, the scores and the weights.
    fn words(&self, d: &Dims) -> i64 {
        self.rows * self.query_stride(d)
            + self.lanes * (self.key_stride(d) + self.value_stride(d))
            + 2 * self.rows * self.lanes
    }
}

fn round4(n: i64) -> i64 {
    (n + 3) / 4 * 4
}

/// Whether the tiled template computes the attention op `op` on the
/// target: its tiles fit in workgroup memory, its value columns in
/// registers, and its blocks of queries and its heads in the grid.
pub(super) fn tiled_fits(m: &Module, op: OpId, t: &Target) -> bool {
    let Some(d) = graph::ops::Attention::new(m, op).and_then(|a| Dims::of(m, &a)) else {
        return false;
    };
    let tiles = Tiles::of(t);
    tiles.words(&d) * 4 <= t.max_workgroup_storage_bytes
        && tiles.columns(&d) <= t.attention_max_columns
        && d.batch * d.heads <= t.max_workgroups_per_dimension
        && (d.queries + tiles.rows - 1) / tiles.rows <= t.max_workgroups_per_dimension
}

/// The score of query `i` for key `j` from their dot product: scaled,
/// capped and masked (a float mask added), with the flag of whether the
/// key is visible at all (`None`: always).
struct Scorer {
    op: OpId,
    scale: f64,
    softcap: f64,
    frontier: attention::Frontier,
    keys: i64,
}

impl Scorer {
    fn of(m: &Module, op: OpId, d: &Dims) -> R<Scorer> {
        let a = graph::ops::Attention::new(m, op).ok_or("not a graph.attention")?;
        Ok(Scorer {
            op,
            scale: attention::scale(&a, d.size),
            softcap: a.softcap(),
            frontier: attention::Frontier::of(&a),
            keys: d.keys,
        })
    }

    fn score(
        &self,
        kb: &mut KernelBuilder,
        dot: ValueId,
        [b, h, i, j]: [&Ix; 4],
    ) -> R<(ValueId, Option<ValueId>)> {
        let factor = kb.ir.constant(self.scale, ACC);
        let mut s = kb.ir.binary(BinaryFn::Mul, dot, factor);
        if self.softcap > 0.0 {
            let cap = kb.ir.constant(self.softcap, ACC);
            let t = kb.ir.binary(BinaryFn::Div, s, cap);
            let t = kb.ir.unary(UnaryFn::Tanh, t);
            s = kb.ir.binary(BinaryFn::Mul, t, cap);
        }
        let mut allowed = Vec::new();
        // d = j - (i + offset): d <= ahead, -d <= behind.
        let ((ahead, behind), offset) = (self.frontier.bounds(), self.frontier.offset);
        let d = j.clone() - i.clone();
        if let Some(a) = ahead {
            allowed.push(kb.index_cmp(CmpPred::Lt, &d, offset + a + 1));
        }
        if let Some(b) = behind {
            allowed.push(kb.index_cmp(CmpPred::Gt, &d, offset - b - 1));
        }
        let a = graph::ops::Attention::new(kb.m(), self.op).ok_or("not a graph.attention")?;
        if let Some(mask) = a.mask() {
            let shape = tensor_shape(kb, mask);
            let last = shape.last().copied().unwrap_or(1);
            if last != 1 && last < self.keys {
                allowed.push(kb.index_cmp(CmpPred::Lt, j, last));
            }
            // Broadcast from the right; a key past a short mask reads
            // an element in it and is masked above.
            let full = [b.clone(), h.clone(), i.clone(), j.clone()];
            let at: Vec<Ix> = shape
                .iter()
                .enumerate()
                .map(|(a, &d)| match d {
                    1 => Ix::constant(0),
                    _ if a + 1 == shape.len() && last < self.keys => {
                        j.clone().modulo(Ix::constant(last))
                    }
                    _ => full[4 - shape.len() + a].clone(),
                })
                .collect();
            let m = kb.value_at(mask, &at)?;
            if kb.ir.elem(m) == ElemType::I1 {
                allowed.push(m);
            } else {
                // A -inf adds a weight of exp(-inf) = 0.
                let m = kb.widen(m);
                s = kb.ir.binary(BinaryFn::Add, s, m);
            }
        }
        Ok((s, (!allowed.is_empty()).then(|| kb.ir.all(allowed))))
    }
}

/// The result's element type in the kernel.
fn result_elem(kb: &KernelBuilder, op: OpId) -> ElemType {
    let result = kb.m().op(op).results[0];
    let elem = kb
        .m()
        .value_type(result)
        .as_tensor()
        .map_or(ElemType::F32, |t| t.elem);
    kernel_elem(elem, kb.float)
}

/// Whether operand `v` of shape `[.., rows, columns]` lies in memory with
/// its rows contiguous (a transposed view, such as the keys of
/// `q · kᵀ` read back as `k`), so a tile is read row by row to keep
/// neighbouring invocations on neighbouring words.
fn rows_contiguous(kb: &KernelBuilder, v: ValueId) -> bool {
    let Some(Input::Memory { shape, map, .. }) = kb.inputs.get(&v) else {
        return false;
    };
    let Some(map) = map else {
        return false;
    };
    let rank = map.num_dims as usize;
    let address = |at: &[i64]| -> Option<i64> {
        let idx = map.eval(at, &[]).ok()?;
        Some(idx.iter().zip(shape).fold(0, |a, (&i, &n)| a * n + i))
    };
    let origin = vec![0; rank];
    let mut next_row = origin.clone();
    next_row[rank - 2] = 1;
    let mut next_column = origin.clone();
    next_column[rank - 1] = 1;
    let (Some(o), Some(r), Some(c)) = (address(&origin), address(&next_row), address(&next_column))
    else {
        return false;
    };
    r - o == 1 && c - o != 1
}

/// The key/value head of query head `h`.
fn kv_head(h: &Ix, group: i64) -> Ix {
    if group == 1 {
        h.clone()
    } else {
        h.clone().floor_div(Ix::constant(group))
    }
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
    let (q, k, v, y) = (a.q(), a.k(), a.v(), a.y());
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
        tiles.key_stride(&d),
        tiles.value_stride(&d),
    );
    let queries = kb.ir.alloc(rows * q_row, ACC);
    let keys = kb.ir.alloc(lanes * k_row, ACC);
    let values = kb.ir.alloc(lanes * v_row, ACC);
    let scores = kb.ir.alloc(threads, ACC);
    let weights = kb.ir.alloc(threads, ACC);
    // `count` elements of a tile, spread over the workgroup: `store(e)`
    // for every element `e` this invocation takes.
    let spread = |kb: &mut KernelBuilder,
                  count: i64,
                  store: &mut dyn FnMut(&mut KernelBuilder, Ix) -> R<()>|
     -> R<()> {
        for l in 0..(count + threads - 1) / threads {
            let e = tid.clone() + Ix::constant(l * threads);
            let cond = (count % threads != 0 && (l + 1) * threads > count)
                .then(|| kb.index_cmp(CmpPred::Lt, &e, count));
            guarded(kb, cond, &mut |kb| store(kb, e.clone()))?;
        }
        Ok(())
    };
    // Element `e` of a tile of `rows` by `columns` as (row, column): along
    // the rows where the operand lies in memory that way, so that
    // neighbouring invocations read neighbouring words.
    let split = |e: &Ix, rows: i64, columns: i64, by_row: bool| {
        if by_row {
            (
                e.clone().modulo(Ix::constant(rows)),
                e.clone().floor_div(Ix::constant(rows)),
            )
        } else {
            (
                e.clone().floor_div(Ix::constant(columns)),
                e.clone().modulo(Ix::constant(columns)),
            )
        }
    };
    let (queries_by_row, keys_by_row, values_by_row) = (
        rows_contiguous(kb, q),
        rows_contiguous(kb, k),
        rows_contiguous(kb, v),
    );
    // Workgroup memory starts undefined (OpenCL's local memory, and any
    // Vulkan driver without zero-initialisation), and the products read
    // every word of the rows' vector padding and of a ragged tile, where
    // a zero weight times a NaN would still be NaN: those words are
    // written as zeros.
    let zero = kb.ir.constant(0.0, ACC);
    let padding = |kb: &mut KernelBuilder, memory: ValueId, count: i64, stride: i64| -> R<()> {
        if stride == size {
            return Ok(());
        }
        spread(kb, count * (stride - size), &mut |kb, e| {
            let w = stride - size;
            let at = e.clone().floor_div(Ix::constant(w)) * Ix::constant(stride)
                + Ix::constant(size)
                + e.modulo(Ix::constant(w));
            kb.store(zero, memory, &at);
            Ok(())
        })
    };
    padding(kb, queries, rows, q_row)?;
    padding(kb, keys, lanes, k_row)?;
    // `value` stored at `at` where `inside` holds (read only there), else
    // zero.
    let store_or_zero = |kb: &mut KernelBuilder,
                         inside: Option<(Ix, i64)>,
                         memory: ValueId,
                         at: &Ix,
                         value: &mut dyn FnMut(&mut KernelBuilder) -> R<ValueId>|
     -> R<()> {
        let Some((x, n)) = inside else {
            let v = value(kb)?;
            kb.store(v, memory, at);
            return Ok(());
        };
        let flag = kb.index_cmp(CmpPred::Lt, &x, n);
        kb.if_then(flag, &mut |kb| {
            let v = value(kb)?;
            kb.store(v, memory, at);
            Ok(())
        })?;
        let outside = kb.index_cmp(CmpPred::Ge, &x, n);
        kb.if_then(outside, &mut |kb| {
            kb.store(zero, memory, at);
            Ok(())
        })
    };
    // The block's queries, once; rows past the last query are zeros.
    let first = i.clone() - row.clone();
    spread(kb, rows * size, &mut |kb, e| {
        let (r, c) = split(&e, rows, size, queries_by_row);
        let query = first.clone() + r.clone();
        let inside = (d.queries % rows != 0).then(|| (query.clone(), d.queries));
        let at = r.clone() * Ix::constant(q_row) + c.clone();
        store_or_zero(kb, inside, queries, &at, &mut |kb| {
            let x = kb.value_at(q, &[b.clone(), h.clone(), query.clone(), c.clone()])?;
            Ok(kb.widen(x))
        })
    })?;
    let lowest = kb.ir.constant(f64::from(f32::MIN), ACC);
    let mut init = vec![lowest, zero];
    init.extend(std::iter::repeat_n(zero, columns as usize));
    let key_tiles = (d.keys + lanes - 1) / lanes;
    let ragged = d.keys % lanes != 0;
    let carried = kb.for_loop(key_tiles, init, &mut |kb, tile, c| {
        let (max, total, acc) = (c[0], c[1], &c[2..]);
        let first_key = tile.clone() * Ix::constant(lanes);
        // The tile's keys and values; past the last key, zeros (their
        // weights are zero too).
        // `operand`'s rows of this tile (`width` wide, `by_row` as it lies in
        // memory) into `memory`, rows `stride` apart.
        let load = |kb: &mut KernelBuilder,
                    operand: ValueId,
                    memory: ValueId,
                    width: i64,
                    stride: i64,
                    by_row: bool|
         -> R<()> {
            spread(kb, lanes * width, &mut |kb, e| {
                let (jj, c) = split(&e, lanes, width, by_row);
                let j = first_key.clone() + jj.clone();
                let inside = ragged.then(|| (j.clone(), d.keys));
                let at = jj * Ix::constant(stride) + c.clone();
                store_or_zero(kb, inside, memory, &at, &mut |kb| {
                    let x = kb.value_at(operand, &[b.clone(), g.clone(), j.clone(), c.clone()])?;
                    Ok(kb.widen(x))
                })
            })
        };
        load(kb, k, keys, size, k_row, keys_by_row)?;
        load(kb, v, values, value_size, v_row, values_by_row)?;
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
        // Rows past the last query and keys past the last key read the
        // mask at an index inside it; their results are never used.
        let wrap = |x: &Ix, n: i64, ragged: bool| {
            if ragged {
                x.clone().modulo(Ix::constant(n))
            } else {
                x.clone()
            }
        };
        let (qi, kj) = (
            wrap(&i, d.queries, d.queries % rows != 0),
            wrap(&j, d.keys, ragged),
        );
        let (s, mut allowed) = scorer.score(kb, dot, [&b, &h, &qi, &kj])?;
        if ragged {
            let inside = kb.index_cmp(CmpPred::Lt, &j, d.keys);
            allowed = Some(match allowed {
                Some(a) => kb.ir.all(vec![a, inside]),
                None => inside,
            });
        }
        let seen = match allowed {
            Some(flag) => kb.ir.select(flag, s, lowest),
            None => s,
        };
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
        let shift = kb.ir.binary(BinaryFn::Sub, s, next_max);
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
    let out = result_elem(kb, op);
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
        guarded(kb, cond, &mut |kb| {
            let r = kb.ir.binary(BinaryFn::Div, acc, total);
            let r = kb.ir.select(any, r, zero);
            let r = kb.narrow(r, out);
            kb.memo_put(y, &idx, r);
            store_outputs(kb, outputs, &idx)
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

impl KernelBuilder<'_> {
    /// The attention op `op` at one result element `[b, h, i, e]`: the
    /// invocation walks every key once with an online softmax.
    pub(super) fn attention_at(&mut self, op: OpId, idx: &[Ix]) -> R<ValueId> {
        let a = graph::ops::Attention::new(self.m(), op).ok_or("not a graph.attention")?;
        let (q, k, v) = (a.q(), a.k(), a.v());
        let d = Dims::of(self.m(), &a).ok_or("attention of tensors")?;
        let scorer = Scorer::of(self.m(), op, &d)?;
        let out = result_elem(self, op);
        let [b, h, i, e] = [0, 1, 2, 3].map(|x| idx[x].clone());
        let g = kv_head(&h, d.group);
        let lowest = self.ir.constant(f64::from(f32::MIN), ACC);
        let zero = self.ir.constant(0.0, ACC);
        let carried = self.for_loop(d.keys, vec![lowest, zero, zero], &mut |kb, j, c| {
            let (max, total, acc) = (c[0], c[1], c[2]);
            let dot = kb.sum(&[d.size], ACC, &mut |kb, x| {
                let x0 = kb.value_at(q, &[b.clone(), h.clone(), i.clone(), x[0].clone()])?;
                let y0 = kb.value_at(k, &[b.clone(), g.clone(), j.clone(), x[0].clone()])?;
                let (x0, y0) = (kb.widen(x0), kb.widen(y0));
                Ok(kb.ir.binary(BinaryFn::Mul, x0, y0))
            })?;
            let (s, allowed) = scorer.score(kb, dot, [&b, &h, &i, &j])?;
            let mut next_max = kb.ir.binary(BinaryFn::Max, max, s);
            if let Some(flag) = allowed {
                next_max = kb.ir.select(flag, next_max, max);
            }
            let shift = kb.ir.binary(BinaryFn::Sub, max, next_max);
            let rescale = kb.ir.unary(UnaryFn::Exp, shift);
            let diff = kb.ir.binary(BinaryFn::Sub, s, next_max);
            let mut weight = kb.ir.unary(UnaryFn::Exp, diff);
            if let Some(flag) = allowed {
                weight = kb.ir.select(flag, weight, zero);
            }
            let value = kb.value_at(v, &[b.clone(), g.clone(), j.clone(), e.clone()])?;
            let value = kb.widen(value);
            let kept = kb.ir.binary(BinaryFn::Mul, total, rescale);
            let next_total = kb.ir.binary(BinaryFn::Add, kept, weight);
            let kept = kb.ir.binary(BinaryFn::Mul, acc, rescale);
            let added = kb.ir.binary(BinaryFn::Mul, weight, value);
            let next_acc = kb.ir.binary(BinaryFn::Add, kept, added);
            Ok(vec![next_max, next_total, next_acc])
        })?;
        let (total, acc) = (carried[1], carried[2]);
        // A query whose keys are all masked has no weight: zeros.
        let any = self.ir.cmp(CmpPred::Gt, total, zero);
        let y = self.ir.binary(BinaryFn::Div, acc, total);
        let y = self.ir.select(any, y, zero);
        Ok(self.narrow(y, out))
    }
}
