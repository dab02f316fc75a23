//! The row template: a softmax, normalization or reduction along some
//! axes, `threads` invocations a row, one or more rows a workgroup, the
//! invocations' partials meeting in a tree through workgroup memory. Its
//! column form (XLA's column reduction) lays a reduction's rows across
//! neighbouring invocations instead, for an input stored along a kept
//! axis: each invocation walks its slice of a row down the stored
//! tensor's outer axes while its neighbours read the words beside its own.

use ircc_core::{ElemType, Module, OpId, Type, ValueId};
use ircc_dialects::graph::{self, GraphOp, shape};
use ircc_dialects::index::{self, source_axis, through_views};
use ircc_dialects::kernel::ColumnSchedule;
use ircc_dialects::kernel::builder::FuncBuilder;
use ircc_dialects::kernel::ops::{BinaryFn, CmpPred, FuncTemplate, IdKind, UnaryFn};
use ircc_dialects::texture::LANES;

use super::group::Group;

use super::lowering::{
    Ix, KernelBuilder, delinearize, guarded, shape_of, store_outputs, target, tensor_shape,
};
use super::templates::{below, write_texel};
use super::values::{Reduction, is_pointwise};

type R<T> = Result<T, String>;

/// How a row pass folds a value into its accumulator.
type Combine<'a> = &'a dyn Fn(&mut FuncBuilder, ValueId, ValueId) -> ValueId;

/// What a row pass does at one element of the invocation's (its index in
/// the tensor, and its position in the row for the bounds), given and
/// giving the values it carries.
type ElementStep<'a> =
    &'a mut dyn FnMut(&mut KernelBuilder, &[Ix], &Ix, &[ValueId]) -> R<Vec<ValueId>>;

/// Partials one invocation combines at each level of a row's tree: a
/// level costs a barrier, which the workgroup waits on, while the reads of
/// workgroup memory it adds go out together (256 invocations take 2
/// levels, not the 8 of a halving tree).
const TREE_FAN_IN: i64 = 16;

/// Elements an invocation holds of its row, at most: a row that gives
/// each invocation no more is read from memory once, into registers,
/// which every pass over it and the write read again; a longer one is
/// read by each pass.
const ROW_REGISTER_STEPS: i64 = 8;

/// The axis along which the row kernel of `anchor` writes texels where
/// its result is placed in a texture: the one axis a softmax or a layer
/// norm reduces, whose elements it writes (a reduction writes one per
/// row; an instance norm reduces every spatial axis), where its rows are
/// whole texels (a ragged last texel would have its lanes computed at
/// other indices than the passes read, and the row read twice).
pub(super) fn texel_axis(m: &Module, anchor: OpId) -> Option<usize> {
    let (x, axis) = if let Some(s) = graph::ops::Softmax::new(m, anchor) {
        (s.x(), s.axis())
    } else {
        let n = graph::ops::LayerNorm::new(m, anchor)?;
        (n.x(), n.axis())
    };
    let shape = &m.value_type(x).as_tensor()?.shape;
    let axis = shape::axis(axis, shape.len()).ok()?;
    let one_axis = axis + 1 == shape.len() || GraphOp::of(m, anchor) == Some(GraphOp::Softmax);
    (one_axis && shape[axis] % LANES == 0).then_some(axis)
}

/// Rows a column reduction's workgroup takes, most first: a row of
/// invocations reads that many neighbouring words, eight at least (32
/// bytes of f32, a sector of NVIDIA's L1 lines).
const COLUMN_ROWS: [i64; 4] = [64, 32, 16, 8];

/// Values a walk from a reduction's input to the tensors it is computed
/// from visits at most.
const MOST_VISITED: usize = 64;

/// The column schedule for `group`, where its anchor is a reduction whose
/// input is computed from stored tensors at least as much along the
/// axes it keeps as along those it reduces (counting their elements),
/// and its rows share workgroups evenly (the barriers need every
/// invocation); `None` where the row template's form suits it. Ties go to
/// the column form: on a texture profile, layout.select can then store
/// the other tensors' producers along the kept axes as well (ConvNeXt-T's
/// last mean, of a channel-last and a channel-first term, under adreno740:
/// no layout copy, one dispatch fewer).
pub(super) fn column(m: &Module, group: &Group, compute_units: i64) -> Option<ColumnSchedule> {
    let anchor = group.anchor;
    let kind = GraphOp::of(m, anchor)?;
    Reduction::of(kind)?;
    let x = m.op(anchor).operands[0];
    let sx = shape_of(m, x);
    let rank = sx.len();
    let axes: Vec<usize> = match m.op(anchor).attrs.get("axes") {
        // The spatial axes of NCHW: the last two, as layout.select reads
        // a global pool's reduction from the op's spec.
        _ if kind == GraphOp::GlobalAveragePool && rank == 4 => vec![2, 3],
        _ if kind == GraphOp::GlobalAveragePool => return None,
        None => (0..rank).collect(),
        Some(listed) => listed
            .as_i64_array()?
            .iter()
            .map(|&a| shape::axis(a, rank).ok())
            .collect::<Option<_>>()?,
    };
    // Neighbouring invocations take neighbouring indices of the last kept
    // axis longer than one.
    let last_kept = (0..rank).rev().find(|a| !axes.contains(a) && sx[*a] > 1)?;
    let (along_kept, along_reduced) = stored_along(m, group, x, &axes, last_kept);
    if along_kept == 0 || along_kept < along_reduced {
        return None;
    }
    let rows: i64 = (0..rank)
        .filter(|a| !axes.contains(a))
        .map(|a| sx[a])
        .product();
    let len: i64 = axes.iter().map(|&a| sx[a]).product();
    // The most rows a workgroup that still give every compute unit one,
    // else the fewest: a unit with several workgroups overlaps their
    // walks, each a chain of loads, and more slices shorten each walk.
    // On the H200, ConvNeXt-T's last mean (768 rows of 49, each element a
    // sum of 20 partial products) took 11.6 us as a row reduction, and as
    // a column one 15.4 in workgroups of 64 rows, 10.4 of 16 and 8.0 of
    // 8 (256 invocations each); Swin-T's (768 rows of 49) 5.8, and 7.7,
    // 6.1 and 5.9.
    let dividing: Vec<i64> = COLUMN_ROWS.into_iter().filter(|r| rows % r == 0).collect();
    let per_group = *dividing
        .iter()
        .find(|&&r| rows / r >= compute_units)
        .or(dividing.last())?;
    let slices = (len as u64)
        .next_power_of_two()
        .min((target().row_max_threads / per_group).max(1) as u64) as i64;
    Some(ColumnSchedule {
        rows: per_group,
        slices,
    })
}

/// The elements of the stored tensors `x` is computed from in `group`
/// (through its point-wise ops and views, and the views above the group)
/// whose innermost axis moves with `x`'s axis `kept`, and those whose
/// innermost axis moves with one of its axes in `reduced`.
fn stored_along(
    m: &Module,
    group: &Group,
    x: ValueId,
    reduced: &[usize],
    kept: usize,
) -> (i64, i64) {
    let rank = shape_of(m, x).len();
    // Each value with, for each axis of `x`, the axis of the value that
    // moves with it (none where broadcast).
    let mut work = vec![(x, (0..rank).map(Some).collect::<Vec<_>>())];
    let mut seen = Vec::new();
    let (mut along_kept, mut along_reduced) = (0, 0);
    while let Some((v, axes)) = work.pop() {
        if seen.len() >= MOST_VISITED || seen.contains(&v) {
            continue;
        }
        seen.push(v);
        if let Some(&(_, host)) = group.bindings.iter().find(|&&(arg, _)| arg == v) {
            let (stored, map) = through_views(m, host);
            let Some(innermost) = shape_of(m, stored).len().checked_sub(1) else {
                continue;
            };
            let moves = |a: &Option<usize>| {
                a.and_then(|a| map.as_ref().map_or(Some(a), |map| source_axis(map, a)))
                    == Some(innermost)
            };
            let elements: i64 = shape_of(m, stored).iter().product();
            if axes
                .iter()
                .enumerate()
                .any(|(a, s)| reduced.contains(&a) && moves(s))
            {
                along_reduced += elements;
            } else if moves(&axes[kept]) {
                along_kept += elements;
            }
            continue;
        }
        let Some(op) = m.defining_op(v) else {
            continue;
        };
        if let Some(view) = index::ops::View::new(m, op) {
            let map = view.map();
            let axes = axes
                .iter()
                .map(|a| a.and_then(|a| source_axis(map, a)))
                .collect();
            work.push((view.source(), axes));
        } else if GraphOp::of(m, op).is_some_and(is_pointwise) {
            let result = shape_of(m, v);
            for &operand in &m.op(op).operands {
                let dims = shape_of(m, operand);
                let axes = axes
                    .iter()
                    .map(|a| a.and_then(|a| shape::broadcast_source_axis(&result, &dims, a)))
                    .collect();
                work.push((operand, axes));
            }
        }
    }
    (along_kept, along_reduced)
}

/// Where a row's partials meet in workgroup memory: from word `base` of
/// `shared`, `spacing` words apart.
struct Partials {
    shared: ValueId,
    base: Ix,
    spacing: i64,
}

/// `f` of the `partial` (f32) of the `threads` invocations of one row,
/// through a tree in workgroup memory at `at`; each gets the result.
fn workgroup_reduce(
    kb: &mut KernelBuilder,
    partial: ValueId,
    f: Combine,
    t: &Ix,
    threads: i64,
    at: &Partials,
) -> R<ValueId> {
    let (shared, base) = (at.shared, &at.base);
    // The slot of partial `t + k`.
    let slot = |t: &Ix, k: i64| {
        let first = match at.spacing {
            1 => base.clone() + t.clone(),
            spacing => base.clone() + t.clone() * Ix::constant(spacing),
        };
        match k {
            0 => first,
            k => first + Ix::constant(k * at.spacing),
        }
    };
    kb.store(partial, shared, &slot(t, 0));
    kb.ir.barrier();
    let mut n = threads;
    while n > 1 {
        // The most partials up to the fan-in that share the level's out
        // evenly.
        let fan = (2..=n.min(TREE_FAN_IN))
            .rev()
            .find(|f| n % f == 0)
            .unwrap_or(n);
        let stride = n / fan;
        let active = kb.index_cmp(CmpPred::Lt, t, stride);
        kb.if_then(active, &mut |kb| {
            let mut x = kb.load(shared, &slot(t, 0));
            for i in 1..fan {
                let y = kb.load(shared, &slot(t, i * stride));
                x = f(&mut kb.ir, x, y);
            }
            kb.store(x, shared, &slot(t, 0));
            Ok(())
        })?;
        kb.ir.barrier();
        n = stride;
    }
    let r = kb.load(shared, base);
    kb.ir.barrier();
    Ok(r)
}

/// A softmax, normalization or reduction: `threads` invocations per row,
/// one or more rows per workgroup; a reduction's rows across neighbouring
/// invocations where `column` says so.
pub(super) fn lower(
    kb: &mut KernelBuilder,
    anchor: OpId,
    outputs: &[(ValueId, ValueId)],
    column: Option<ColumnSchedule>,
) -> R<()> {
    let kind = GraphOp::of(kb.m(), anchor).ok_or("a graph op anchors a row")?;
    let x = kb.m().op(anchor).operands[0];
    let y = kb.m().op(anchor).results[0];
    let sx = tensor_shape(kb, x);
    let view = kb
        .ctx
        .registry
        .view(kb.m(), anchor)
        .ok_or("unregistered anchor")?;
    let (axes, keep): (Vec<usize>, bool) = match kind {
        GraphOp::Softmax => (vec![shape::axis(view.i64("axis")?, sx.len())?], true),
        GraphOp::GlobalAveragePool => ((2..sx.len()).collect(), true),
        GraphOp::LayerNorm | GraphOp::InstanceNorm => {
            (kb.norm_axes(anchor, kind == GraphOp::LayerNorm)?, true)
        }
        _ => (
            shape::reduce_axes(&view, sx.len())?,
            view.i64("keepdims")? != 0,
        ),
    };
    // Outputs placed in a texture whose lanes run along the row (its one
    // reduced axis) are written a texel at a time, so that no copy kernel
    // rewrites the row's buffer as texels: an invocation takes four
    // neighbours of its row where it would take every `threads`-th
    // element, and every pass visits them in that order, so that the
    // write finds the elements the first pass read.
    let lane_axis = match outputs.iter().find_map(|(_, h)| kb.textures.get(h)) {
        Some(l) if axes == [l.lanes()] && sx[l.lanes()] % LANES == 0 => Some(l.lanes()),
        Some(_) => {
            return Err(
                "a row kernel writes texels only with their lanes along the one axis it reduces, of whole texels"
                    .to_string(),
            );
        }
        None => None,
    };
    let kept: Vec<usize> = (0..sx.len()).filter(|d| !axes.contains(d)).collect();
    let kept_shape: Vec<i64> = kept.iter().map(|&d| sx[d]).collect();
    let red_shape: Vec<i64> = axes.iter().map(|&d| sx[d]).collect();
    let rows: i64 = kept_shape.iter().product();
    let len: i64 = red_shape.iter().product();
    if rows > target().max_workgroups_per_dimension * target().max_workgroups_per_dimension {
        return Err(format!("{rows} rows exceed the grid"));
    }
    // A row gets the next power of two of its length (in texels, where it
    // writes them) in invocations, and
    // short rows share a workgroup: a group of 256 takes 16 rows of 16
    // (ConvNeXt's first stage) instead of leaving 240 invocations idle.
    // Rows per group divide the row count, so the guard stays uniform.
    let most = target().row_max_threads;
    // Elements an invocation takes at each step: one, or a texel's four.
    let run = if lane_axis.is_some() { LANES } else { 1 };
    let (threads, per_group) = match column {
        Some(c) => {
            if matches!(
                kind,
                GraphOp::Softmax | GraphOp::LayerNorm | GraphOp::InstanceNorm
            ) {
                return Err("its column schedule takes reductions only".to_string());
            }
            if rows % c.rows != 0 {
                return Err(format!(
                    "its column schedule's workgroups of {} rows do not share its {rows} rows evenly (its barriers need every invocation of a workgroup)",
                    c.rows
                ));
            }
            if c.rows.checked_mul(c.slices).is_none_or(|n| n > most) {
                return Err(format!(
                    "its column schedule's workgroups of {} x {} invocations exceed the target's {most}",
                    c.rows, c.slices
                ));
            }
            (c.slices, c.rows)
        }
        None => {
            let visits = (len + run - 1) / run;
            let threads = (visits as u64).next_power_of_two().clamp(8, most as u64) as i64;
            let mut per_group = 1;
            while per_group * 2 * threads <= most && rows % (per_group * 2) == 0 {
                per_group *= 2;
            }
            (threads, per_group)
        }
    };
    let groups = rows / per_group;
    let gx = groups.min(target().max_workgroups_per_dimension);
    let gy = (groups + gx - 1) / gx;
    // The invocations of a row are the workgroup's first axis, its rows
    // the second; in the column form the other way about, so that
    // neighbouring invocations take neighbouring rows.
    let (slice_axis, row_axis) = if column.is_some() { (1, 0) } else { (0, 1) };
    let local = |kb: &mut KernelBuilder, axis: i64, extent: i64| {
        if extent > 1 {
            kb.id(IdKind::Local, axis, extent)
        } else {
            Ix::constant(0)
        }
    };
    let t = local(kb, slice_axis, threads);
    let lane_row = local(kb, row_axis, per_group);
    let wx = kb.id(IdKind::Workgroup, 0, gx);
    let group_ix = if gy > 1 {
        let wy = kb.id(IdKind::Workgroup, 1, gy);
        wx + wy * Ix::constant(gx)
    } else {
        wx
    };
    let row_cond = below(kb, &group_ix, groups, gx * gy == groups);
    let row_ix = group_ix * Ix::constant(per_group) + lane_row.clone();
    // A row's partials lie together in workgroup memory; in the column
    // form each slice's lie together instead, so that neighbouring
    // invocations (neighbouring rows) store to neighbouring banks.
    let (base, spacing) = if column.is_some() {
        (lane_row, per_group)
    } else {
        (lane_row * Ix::constant(threads), 1)
    };
    let shared = kb.ir.alloc(threads * per_group, ElemType::F32);
    let partials = Partials {
        shared,
        base,
        spacing,
    };
    let kept_idx = delinearize(&row_ix, &kept_shape);
    let reduced = axes.clone();
    let rank = sx.len();
    let full = move |r: &Ix| -> Vec<Ix> {
        let red_idx = delinearize(r, &red_shape);
        let (mut ki, mut ri) = (kept_idx.iter(), red_idx.iter());
        (0..sx.len())
            .map(|d| {
                if axes.contains(&d) {
                    ri.next().cloned()
                } else {
                    ki.next().cloned()
                }
                .unwrap_or(Ix::constant(0))
            })
            .collect()
    };
    let steps = (len + threads * run - 1) / (threads * run);
    let exact = len % (threads * run) == 0;
    // The invocation's `j`th step of the row: every `threads`-th element,
    // or texel, from its own.
    let step = |j: Ix| j * Ix::constant(threads) + t.clone();
    // Element `lane` of texel `q` of the row, indexed as write_texel
    // indexes it (so that the memo finds it), and its position in the row.
    let in_texel = |q: &Ix, lane: i64, axis: usize| -> (Vec<Ix>, Ix) {
        let mut idx = full(q);
        idx[axis] = idx[axis].clone() * Ix::constant(LANES) + Ix::constant(lane);
        (idx, q.clone() * Ix::constant(LANES) + Ix::constant(lane))
    };
    // Each pass visits the invocation's elements of the row in a loop,
    // or where the row is held in registers unrolled, at indices every
    // pass writes alike: later passes find the elements the first read
    // (and their fused producers computed) in the memo.
    let in_registers = steps * run <= ROW_REGISTER_STEPS;
    let each_element =
        |kb: &mut KernelBuilder, carried: Vec<ValueId>, body: ElementStep| -> R<Vec<ValueId>> {
            let mut visit = |kb: &mut KernelBuilder, j: Ix, c: &[ValueId]| {
                let r = step(j);
                let Some(axis) = lane_axis else {
                    return body(kb, &full(&r), &r, c);
                };
                (0..LANES).try_fold(c.to_vec(), |c, lane| {
                    let (idx, at) = in_texel(&r, lane, axis);
                    body(kb, &idx, &at, &c)
                })
            };
            if !in_registers {
                return kb.for_loop(steps, carried, &mut |kb, j, c| visit(kb, j, c));
            }
            (0..steps).try_fold(carried, |c, j| visit(kb, Ix::constant(j), &c))
        };
    // One pass over the row: `combine(acc, x)` of every element, then
    // across the workgroup.
    let pass = |kb: &mut KernelBuilder,
                init: f64,
                f: Combine,
                term: &mut dyn FnMut(&mut KernelBuilder, ValueId) -> ValueId|
     -> R<ValueId> {
        let init_v = kb.ir.constant(init, ElemType::F32);
        let acc = each_element(kb, vec![init_v], &mut |kb, idx, r, acc| {
            let v = kb.value_at(x, idx)?;
            let v = kb.ir.cast(v, Type::Scalar(ElemType::F32));
            let v = term(kb, v);
            let merged = f(&mut kb.ir, acc[0], v);
            Ok(vec![match below(kb, r, len, exact) {
                Some(inside) => kb.ir.select(inside, merged, acc[0]),
                None => merged,
            }])
        })?[0];
        workgroup_reduce(kb, acc, f, &t, threads, &partials)
    };
    let float = kb.float;
    let write_rows = |kb: &mut KernelBuilder,
                      value: &mut dyn FnMut(&mut KernelBuilder, &[Ix]) -> R<ValueId>|
     -> R<()> {
        let Some(axis) = lane_axis else {
            each_element(kb, Vec::new(), &mut |kb, idx, r, _| {
                let cond = below(kb, r, len, exact);
                guarded(kb, cond, &mut |kb| {
                    let v = value(kb, idx)?;
                    kb.memo_put(y, idx, v);
                    store_outputs(kb, outputs, idx)
                })?;
                Ok(Vec::new())
            })?;
            return Ok(());
        };
        let texels = (len + LANES - 1) / LANES;
        let mut visit = |kb: &mut KernelBuilder, j: Ix| -> R<Vec<ValueId>> {
            let q = step(j);
            let cond = below(kb, &q, texels, texels % threads == 0);
            guarded(kb, cond, &mut |kb| {
                write_texel(kb, outputs, &full(&q), axis, len, &mut |kb, idx| {
                    let v = value(kb, idx)?;
                    kb.memo_put(y, idx, v);
                    Ok(())
                })
            })?;
            Ok(Vec::new())
        };
        if !in_registers {
            kb.for_loop(steps, Vec::new(), &mut |kb, j, _| visit(kb, j))?;
            return Ok(());
        }
        (0..steps).try_for_each(|j| visit(kb, Ix::constant(j)).map(drop))
    };
    let add = |ir: &mut FuncBuilder, a, b| ir.binary(BinaryFn::Add, a, b);
    let mut body = |kb: &mut KernelBuilder| -> R<()> {
        match kind {
            GraphOp::Softmax => {
                // The maximum number: a NaN in the row makes every
                // exp(x - max), and so the whole row, NaN either way.
                let max_number = |ir: &mut FuncBuilder, a, b| ir.binary(BinaryFn::Max, a, b);
                let max = pass(kb, f64::NEG_INFINITY, &max_number, &mut |_, v| v)?;
                let sum = pass(kb, 0.0, &add, &mut |kb, v| {
                    let d = kb.ir.binary(BinaryFn::Sub, v, max);
                    kb.ir.unary(UnaryFn::Exp, d)
                })?;
                write_rows(kb, &mut |kb, idx| {
                    let v = kb.value_at(x, idx)?;
                    let v = kb.ir.cast(v, Type::Scalar(ElemType::F32));
                    let d = kb.ir.binary(BinaryFn::Sub, v, max);
                    let e = kb.ir.unary(UnaryFn::Exp, d);
                    let q = kb.ir.binary(BinaryFn::Div, e, sum);
                    Ok(kb.ir.cast(q, Type::Scalar(float)))
                })
            }
            GraphOp::LayerNorm | GraphOp::InstanceNorm => {
                let n = len as f64;
                let total = pass(kb, 0.0, &add, &mut |_, v| v)?;
                let count = kb.ir.constant(n, ElemType::F32);
                let mean = kb.ir.binary(BinaryFn::Div, total, count);
                let squares = pass(kb, 0.0, &add, &mut |kb, v| {
                    let d = kb.ir.binary(BinaryFn::Sub, v, mean);
                    kb.ir.binary(BinaryFn::Mul, d, d)
                })?;
                let var = kb.ir.binary(BinaryFn::Div, squares, count);
                let eps = kb
                    .ctx
                    .registry
                    .view(kb.m(), anchor)
                    .ok_or("unregistered anchor")?
                    .f64("epsilon")?;
                let e = kb.ir.constant(eps, ElemType::F32);
                let var = kb.ir.binary(BinaryFn::Add, var, e);
                let inv = kb.ir.unary(UnaryFn::Rsqrt, var);
                let layer = kind == GraphOp::LayerNorm;
                write_rows(kb, &mut |kb, idx| {
                    kb.normalized(anchor, layer, idx, mean, inv)
                })
            }
            reduce => {
                let reduction = Reduction::of(reduce).ok_or("a row reduction")?;
                let combine = |ir: &mut FuncBuilder, a, b| reduction.combine(ir, a, b);
                let mut r = pass(kb, reduction.init(), &combine, &mut |_, v| v)?;
                if reduction == Reduction::Mean {
                    let n = kb.ir.constant(len as f64, ElemType::F32);
                    r = kb.ir.binary(BinaryFn::Div, r, n);
                }
                let r = kb.ir.cast(r, Type::Scalar(float));
                let first = kb.index_cmp(CmpPred::Lt, &t, 1);
                let out_idx: Vec<Ix> = {
                    let zero = Ix::constant(0);
                    let all = full(&zero);
                    (0..rank)
                        .filter(|d| keep || !reduced.contains(d))
                        .map(|d| all[d].clone())
                        .collect()
                };
                kb.if_then(first, &mut |kb| {
                    kb.memo_put(y, &out_idx, r);
                    store_outputs(kb, outputs, &out_idx)
                })
            }
        }
    };
    guarded(kb, row_cond, &mut body)?;
    let workgroup = if column.is_some() {
        [per_group, threads, 1]
    } else {
        [threads, per_group, 1]
    };
    kb.finish(workgroup, [gx, gy, 1], FuncTemplate::RowReduction, None);
    Ok(())
}
