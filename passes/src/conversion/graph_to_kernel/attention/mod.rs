//! `graph.attention` in kernels, as FlashAttention computes it: the
//! scores are never stored. Keys and values are read a tile at a time
//! into workgroup memory, once for a block of queries of one head, and
//! each query keeps a running maximum, sum of weights and weighted sum of
//! values that it rescales as the maximum grows (an online softmax).
//!
//! Three templates share that plan (`rows.rs`, `tiled.rs`,
//! `cooperative.rs`); kernel.schedule's `attention` option picks one
//! ([`schedule`]), and `auto` the cooperative one at f16 where the target
//! has matrix units, else the register template where the target's
//! registers hold a query and its sum and its invocations fill the device:
//!
//! - `attention_rows`: an invocation per query (or a few, splitting its
//!   keys), holding the query and its weighted sum of values in
//!   registers; the invocations of a lane read the same key of the tile
//!   at once (a broadcast), so no score goes through workgroup memory and
//!   a tile costs two barriers. Where its grid is short of workgroups, its
//!   key tiles are split over several, whose partial sums the kernel
//!   reading the result combines.
//! - `attention_tiled`: an invocation per query and key of a tile, which
//!   share the scores and weights through workgroup memory; for heads too
//!   long for registers, and for too few queries to fill the device.
//! - `attention_cooperative`: FlashAttention-2's plan on the matrix units,
//!   a subgroup per 16 queries of a block multiplying f16 matrices into
//!   f32 scores and sums, the softmax between the two products through
//!   workgroup memory.
//!
//! Where none of their tiles fit, each result element is
//! computed on its own (`attention_at`): one invocation walks every key
//! for one value column.

mod cooperative;
mod rows;
mod tiled;

use ircc_core::{ElemType, Module, OpId, ValueId};
use ircc_dialects::graph::{self, attention};
use ircc_dialects::kernel::ops::{BinaryFn, CmpPred, UnaryFn};
use ircc_dialects::kernel::{DeviceProfile, Target};

use super::lowering::{Input, Ix, KernelBuilder, kernel_elem};
use super::lowering::{guarded, store_outputs, target, tensor_shape};
use super::values::ACC;
use crate::decl::KernelScheduleAttention;
use ircc_dialects::kernel::Schedule;

pub(super) use rows::Rows;

type R<T> = Result<T, String>;

/// Whether a fused template computes the attention op `op` on the target:
/// the register or tiled one, or at f16 the cooperative one on the
/// module's device (heads of 128, whose queries and sums pass the
/// register template's registers and the tiled template's columns).
pub(super) fn fits(m: &Module, op: OpId, t: &Target) -> bool {
    let cooperative = || {
        ircc_dialects::kernel::precision(m) == Ok(ElemType::F16)
            && ircc_dialects::kernel::target_profile(m)
                .is_ok_and(|d| cooperative::choose(m, op, &d, 1).is_some())
    };
    Rows::choose(m, op, t, 1, false).is_some() || tiled::fits(m, op, t) || cooperative()
}

/// The schedule of attention op `op` (which one of the templates fits) on
/// target `t` and `device`, at precision `float`: the template `choice`
/// asks for where it fits, else another that does. Auto takes the
/// cooperative template at f16 where [`cooperative::pays_off`] (measured
/// on an H100, 12 heads of 64: faster than the unfused ops and the other
/// templates at 197 to 4096 queries) or where no other fits, else the
/// register template where it gives every unit the invocations the target
/// asks and its queries walk the target's `attention_rows_min_keys` (on a
/// GPU; on a CPU whatever their length), else
/// the tiled one (the tiled template is the faster at 49 and 197 keys, the
/// register one at 512 and 2048).
pub(super) fn schedule(
    m: &Module,
    op: OpId,
    t: &Target,
    device: &DeviceProfile,
    float: ElemType,
    choice: KernelScheduleAttention,
) -> Schedule {
    let units = i64::from(device.compute_units);
    let gpu = super::schedule::gpu_lanes(device);
    let rows = Rows::choose(m, op, t, units, gpu);
    let tiled = tiled::fits(m, op, t);
    let others = rows.is_some() || tiled;
    if let Some(s) = cooperative::choose(m, op, device, units) {
        let take = match choice {
            KernelScheduleAttention::Cooperative => true,
            KernelScheduleAttention::Auto => {
                float == ElemType::F16 && cooperative::pays_off(m, op, &s) || !others
            }
            KernelScheduleAttention::Rows | KernelScheduleAttention::Tiled => !others,
        };
        if take {
            return Schedule::AttentionCooperative(s);
        }
    }
    let prefer_rows = match choice {
        KernelScheduleAttention::Rows => true,
        KernelScheduleAttention::Tiled => false,
        KernelScheduleAttention::Auto | KernelScheduleAttention::Cooperative => {
            // A CPU's few lanes (lavapipe) run the tiled template's
            // barriers one workgroup after another: the register one
            // there (ViT's attentions of 197 keys, reduced: 128 ms a run,
            // 162 tiled).
            let long = graph::ops::Attention::new(m, op)
                .and_then(|a| Dims::of(m, &a))
                .is_some_and(|d| d.keys >= t.attention_rows_min_keys);
            (long || !gpu) && rows.is_some_and(|r| r.fills(m, op, units))
        }
    };
    match rows {
        Some(rows) if prefer_rows || !tiled => Schedule::AttentionRows(rows.schedule()),
        _ => Schedule::AttentionTiled,
    }
}

/// Lowers the attention op `op` with the template and tiles `schedule`
/// gives.
pub(super) fn lower(
    kb: &mut KernelBuilder,
    op: OpId,
    outputs: &[(ValueId, ValueId)],
    schedule: Schedule,
) -> R<()> {
    let t = target();
    match schedule {
        Schedule::AttentionRows(r) => {
            if let Some(why) = Rows::of(r).unfit(kb.m(), op, t) {
                return Err(why);
            }
        }
        Schedule::AttentionTiled if !tiled::fits(kb.m(), op, t) => {
            return Err("the tiled attention template does not fit it".into());
        }
        _ => {}
    }
    // Its two products: scores (queries x keys x size) and the weighted
    // sum of values (queries x value size x keys), per head.
    kb.flops = graph::ops::Attention::new(kb.m(), op)
        .and_then(|a| Dims::of(kb.m(), &a))
        .map(|d| 2 * d.batch * d.heads * d.queries * d.keys * (d.size + d.value_size));
    match schedule {
        Schedule::AttentionRows(rows) => rows::attention_rows(kb, op, outputs, &Rows::of(rows)),
        Schedule::AttentionCooperative(s) => cooperative::attention_cooperative(kb, op, outputs, s),
        _ => tiled::attention_tiled(kb, op, outputs, t),
    }
}

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

/// The row stride of a tile of `size` words in workgroup memory: whole
/// vectors and one more. Keys read from a transposed view are stored down
/// the tile's rows, one word per invocation, and the extra vector puts
/// eight rows in eight different banks (as it does the different keys
/// that lanes of the tiled template, or of a query, read at once).
fn padded_stride(size: i64) -> i64 {
    round4(size) + 4
}

fn round4(n: i64) -> i64 {
    (n + 3) / 4 * 4
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

    /// [`Scorer::score`] of key `j`, which may run past the last key
    /// (`ragged`: it reads the mask wrapped, and is masked); a masked
    /// score reads as `lowest`. Gives that score and the key's flag.
    fn score_key(
        &self,
        kb: &mut KernelBuilder,
        dot: ValueId,
        [b, h, i]: [&Ix; 3],
        j: &Ix,
        ragged: bool,
        lowest: ValueId,
    ) -> R<(ValueId, Option<ValueId>)> {
        let kj = wrap(j, self.keys, ragged);
        let (s, mut flag) = self.score(kb, dot, [b, h, i, &kj])?;
        if ragged {
            let inside = kb.index_cmp(CmpPred::Lt, j, self.keys);
            flag = Some(match flag {
                Some(f) => kb.ir.all(vec![f, inside]),
                None => inside,
            });
        }
        let seen = match flag {
            Some(f) => kb.ir.select(f, s, lowest),
            None => s,
        };
        Ok((seen, flag))
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

/// The invocations of a workgroup sharing the loads of a tile: this one is
/// `tid` of `threads`.
struct Team {
    tid: Ix,
    threads: i64,
}

impl Team {
    /// `count` elements of a tile, spread over the workgroup: `store(e)`
    /// for every element `e` this invocation takes. Its rounds go in
    /// batches of the target's `attention_load_batch`, unrolled so that
    /// their loads are in flight together, in a loop: kernel.ace would
    /// hoist every unrolled round's address out of the key loop, each then
    /// live across it.
    fn spread(
        &self,
        kb: &mut KernelBuilder,
        count: i64,
        store: &mut dyn FnMut(&mut KernelBuilder, Ix) -> R<()>,
    ) -> R<()> {
        let threads = self.threads;
        let batch = target().attention_load_batch;
        let (rounds, rest) = (count / threads, count % threads);
        let round = |kb: &mut KernelBuilder,
                     first: Ix,
                     n: i64,
                     store: &mut dyn FnMut(&mut KernelBuilder, Ix) -> R<()>|
         -> R<()> {
            for l in 0..n {
                store(
                    kb,
                    self.tid.clone() + first.clone() + Ix::constant(l * threads),
                )?;
            }
            Ok(())
        };
        let (loops, unrolled) = if rounds > batch {
            (rounds / batch, rounds % batch)
        } else {
            (0, rounds)
        };
        if loops > 0 {
            kb.for_loop(loops, Vec::new(), &mut |kb, l, _| {
                round(kb, l * Ix::constant(batch * threads), batch, store)?;
                Ok(Vec::new())
            })?;
        }
        round(kb, Ix::constant(loops * batch * threads), unrolled, store)?;
        if rest > 0 {
            let e = self.tid.clone() + Ix::constant(rounds * threads);
            let inside = kb.index_cmp(CmpPred::Lt, &e, count);
            guarded(kb, Some(inside), &mut |kb| store(kb, e.clone()))?;
        }
        Ok(())
    }

    /// Zeros in the words from `size` to whole vectors of `count` rows `stride` apart of
    /// workgroup array `memory`. Workgroup memory starts undefined
    /// (OpenCL's local memory, and any Vulkan driver without
    /// zero-initialisation), and the templates read the rows' vector
    /// padding, where a zero weight times a NaN would still be NaN.
    fn zero_padding(
        &self,
        kb: &mut KernelBuilder,
        memory: ValueId,
        count: i64,
        stride: i64,
        size: i64,
    ) -> R<()> {
        let w = round4(size) - size;
        if w == 0 {
            return Ok(());
        }
        let zero = kb.ir.constant(0.0, ACC);
        self.spread(kb, count * w, &mut |kb, e| {
            let at = e.clone().floor_div(Ix::constant(w)) * Ix::constant(stride)
                + Ix::constant(size)
                + e.modulo(Ix::constant(w));
            kb.store(zero, memory, &at);
            Ok(())
        })
    }

    /// Rows `first..first + count` of `tile.operand` (keys or values, of
    /// head `[b, g]`) into its workgroup array; rows past the last of
    /// `total` are zeros, and their weights are zero too.
    fn load_tile(
        &self,
        kb: &mut KernelBuilder,
        tile: &Tile,
        [b, g]: [&Ix; 2],
        first: &Ix,
        total: i64,
    ) -> R<()> {
        self.spread(kb, tile.loads(), &mut |kb, e| {
            for (x, at) in tile.load(kb, [b, g], first, total, &e)? {
                kb.store(x, tile.memory, &at);
            }
            Ok(())
        })
    }

    /// Whether [`Team::read_ahead`] can take `tile`: its loads go evenly
    /// over the workgroup, at most `limit` words to an invocation (each
    /// holds a register across the loop).
    fn reads_ahead(&self, tile: &Tile, limit: i64) -> bool {
        tile.loads() % self.threads == 0 && tile.count * tile.width / self.threads <= limit
    }

    /// Rows `first..first + count` of `tile.operand` read into registers,
    /// for [`Team::write`] to store once the tile before is done with:
    /// the loads are then in flight while that tile is computed.
    fn read_ahead(
        &self,
        kb: &mut KernelBuilder,
        tile: &Tile,
        [b, g]: [&Ix; 2],
        first: &Ix,
        total: i64,
    ) -> R<Prefetched> {
        let mut fetched = Prefetched {
            values: Vec::new(),
            slots: Vec::new(),
        };
        for l in 0..tile.loads() / self.threads {
            let e = self.tid.clone() + Ix::constant(l * self.threads);
            for (x, at) in tile.load(kb, [b, g], first, total, &e)? {
                fetched.values.push(x);
                fetched.slots.push(at);
            }
        }
        Ok(fetched)
    }

    /// Stores `values`, read ahead by [`Team::read_ahead`] (as `fetched`,
    /// whose values a loop may since have carried), into `tile`'s array.
    fn write(&self, kb: &mut KernelBuilder, tile: &Tile, fetched: &Prefetched, values: &[ValueId]) {
        for (x, at) in values.iter().zip(&fetched.slots) {
            kb.store(*x, tile.memory, at);
        }
    }
}

/// A tile read ahead into registers: each value this invocation read and
/// where in the tile's workgroup array it goes.
pub(super) struct Prefetched {
    values: Vec<ValueId>,
    slots: Vec<Ix>,
}

/// An operand's tile in workgroup memory: `count` rows of `width` words,
/// `stride` apart (or its columns so, where `transposed`), read along the
/// rows (`by_row`) where the operand lies in memory that way;
/// `words_a_load` words (of a row, or of a column where `by_row`) in one
/// load where the operand is stored in vectors of four that way, a
/// quarter of the loads.
struct Tile {
    operand: ValueId,
    memory: ValueId,
    count: i64,
    width: i64,
    stride: i64,
    by_row: bool,
    words_a_load: i64,
    transposed: bool,
    /// The type the words are stored in.
    elem: ElemType,
}

impl Tile {
    /// The tile of `count` of `operand`'s rows of `width` words in
    /// workgroup array `memory`, rows `stride` apart, read as f32.
    fn new(
        kb: &KernelBuilder,
        operand: ValueId,
        memory: ValueId,
        [count, width]: [i64; 2],
        stride: i64,
    ) -> Tile {
        let by_row = rows_contiguous(kb, operand);
        let (along, axis) = if by_row { (count, 2) } else { (width, 3) };
        // Four rows a load only where the operand's rows come in fours, so
        // that the four of a load are all inside or all past the last.
        let rows_in_fours = !by_row || tensor_shape(kb, operand)[2] % 4 == 0;
        let vector = along % 4 == 0 && rows_in_fours && kb.vector_reachable(operand, axis);
        Tile {
            operand,
            memory,
            count,
            width,
            stride,
            by_row,
            words_a_load: if vector { 4 } else { 1 },
            transposed: false,
            elem: ACC,
        }
    }

    /// The loads that read the tile.
    fn loads(&self) -> i64 {
        self.count * self.width / self.words_a_load
    }

    /// Load `e` of the tile of rows `first..` of the operand (of head
    /// `[b, g]`; rows past the last of `total` read as zeros): its words
    /// and where in the workgroup array each goes.
    fn load(
        &self,
        kb: &mut KernelBuilder,
        [b, g]: [&Ix; 2],
        first: &Ix,
        total: i64,
        e: &Ix,
    ) -> R<Vec<(ValueId, Ix)>> {
        let (count, n) = (self.count, self.words_a_load);
        let (rows, columns) = if self.by_row {
            (count / n, self.width)
        } else {
            (count, self.width / n)
        };
        let (jj, c) = split(e, rows, columns, self.by_row);
        let (jj, c) = if self.by_row {
            (jj * Ix::constant(n), c)
        } else {
            (jj, c * Ix::constant(n))
        };
        let j = first.clone() + jj.clone();
        let ragged = total % count != 0;
        let at = [b, g, &j, &c];
        let along = (n == 4).then_some(if self.by_row { 2 } else { 3 });
        let words = read_or_zero(kb, self.operand, at, (total, ragged), self.elem, along)?;
        Ok(words
            .into_iter()
            .enumerate()
            .map(|(l, x)| {
                let l = Ix::constant(l as i64);
                let (r, c) = if self.by_row {
                    (jj.clone() + l, c.clone())
                } else {
                    (jj.clone(), c.clone() + l)
                };
                let at = if self.transposed {
                    c * Ix::constant(self.stride) + r
                } else {
                    r * Ix::constant(self.stride) + c
                };
                (x, at)
            })
            .collect())
    }
}

/// Element `e` of a tile of `rows` by `columns` as (row, column): along
/// the rows where the operand lies in memory that way, so that
/// neighbouring invocations read neighbouring words.
pub(super) fn split(e: &Ix, rows: i64, columns: i64, by_row: bool) -> (Ix, Ix) {
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
}

/// Element `[b, h, row, c]` of `operand` as `elem`, or where `along` is
/// an axis (2, the rows, or 3) the four from it on along that axis, in one
/// load of each buffer they are computed from where it is stored so
/// ([`KernelBuilder::value4_at`]; the index along the axis a multiple of
/// four, and along the rows `rows` too, so that the four are all inside or
/// all past the last). Where `row` may run past the operand's `rows`
/// (`ragged`), zeros there: that row is read wrapped into the operand, not
/// behind a branch, so that a round's loads issue together.
fn read_or_zero(
    kb: &mut KernelBuilder,
    operand: ValueId,
    [b, h, row, c]: [&Ix; 4],
    (rows, ragged): (i64, bool),
    elem: ElemType,
    along: Option<usize>,
) -> R<Vec<ValueId>> {
    let at = [b.clone(), h.clone(), wrap(row, rows, ragged), c.clone()];
    let mut words = match along {
        Some(axis) => kb.value4_at(operand, &at, axis)?.to_vec(),
        None => vec![kb.value_at(operand, &at)?],
    };
    for x in &mut words {
        *x = kb.ir.cast(*x, ircc_core::Type::Scalar(elem));
    }
    if ragged {
        let inside = kb.index_cmp(CmpPred::Lt, row, rows);
        let zero = kb.ir.constant(0.0, elem);
        for x in &mut words {
            *x = kb.ir.select(inside, *x, zero);
        }
    }
    Ok(words)
}

/// A query's total weight, whether any of its keys counted (`any`), and
/// the zero its results are where none did.
#[derive(Clone, Copy)]
struct Weight {
    total: ValueId,
    any: ValueId,
    zero: ValueId,
}

/// Stores element `idx` of attention op `op`'s result from the query's
/// sum of weighted values: divided by its total weight (zero where no key
/// counted), then through the group's epilogue.
fn store_result(
    kb: &mut KernelBuilder,
    op: OpId,
    outputs: &[(ValueId, ValueId)],
    idx: &[Ix],
    sum: ValueId,
    w: Weight,
) -> R<()> {
    let y = kb.m().op(op).results[0];
    let out = result_elem(kb, op);
    let r = kb.ir.binary(BinaryFn::Div, sum, w.total);
    let r = kb.ir.select(w.any, r, w.zero);
    let r = kb.narrow(r, out);
    kb.memo_put(y, idx, r);
    store_outputs(kb, outputs, idx)
}

/// `x` where it is below `n`, else wrapped into `[0, n)` (`ragged`): a
/// query or key past the last reads the mask inside it, and its result is
/// never used.
fn wrap(x: &Ix, n: i64, ragged: bool) -> Ix {
    if ragged {
        x.clone().modulo(Ix::constant(n))
    } else {
        x.clone()
    }
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
