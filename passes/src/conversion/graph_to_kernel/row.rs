//! The row template: a softmax, normalization or reduction along some
//! axes, `threads` invocations a row, one or more rows a workgroup, the
//! invocations' partials meeting in a tree through workgroup memory.

use ircc_core::{ElemType, Module, OpId, Type, ValueId};
use ircc_dialects::graph::{self, GraphOp, shape};
use ircc_dialects::kernel::builder::FuncBuilder;
use ircc_dialects::kernel::ops::{BinaryFn, CmpPred, FuncTemplate, IdKind, UnaryFn};
use ircc_dialects::texture::LANES;

use super::lowering::{
    Ix, KernelBuilder, delinearize, guarded, store_outputs, target, tensor_shape,
};
use super::templates::{below, write_texel};
use super::values::Reduction;

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

/// `f` of the `partial` (f32) of the `threads` invocations of one row,
/// through a tree in workgroup memory from `base`; each gets the result.
fn workgroup_reduce(
    kb: &mut KernelBuilder,
    partial: ValueId,
    f: Combine,
    t: &Ix,
    threads: i64,
    shared: ValueId,
    base: &Ix,
) -> R<ValueId> {
    kb.store(partial, shared, &(base.clone() + t.clone()));
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
            let mut x = kb.load(shared, &(base.clone() + t.clone()));
            for i in 1..fan {
                let at = base.clone() + t.clone() + Ix::constant(i * stride);
                let y = kb.load(shared, &at);
                x = f(&mut kb.ir, x, y);
            }
            kb.store(x, shared, &(base.clone() + t.clone()));
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
/// one or more rows per workgroup.
pub(super) fn lower(kb: &mut KernelBuilder, anchor: OpId, outputs: &[(ValueId, ValueId)]) -> R<()> {
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
    let visits = (len + run - 1) / run;
    let threads = (visits as u64).next_power_of_two().clamp(8, most as u64) as i64;
    let mut per_group = 1;
    while per_group * 2 * threads <= most && rows % (per_group * 2) == 0 {
        per_group *= 2;
    }
    let groups = rows / per_group;
    let gx = groups.min(target().max_workgroups_per_dimension);
    let gy = (groups + gx - 1) / gx;
    let t = kb.id(IdKind::Local, 0, threads);
    let lane_row = if per_group > 1 {
        kb.id(IdKind::Local, 1, per_group)
    } else {
        Ix::constant(0)
    };
    let wx = kb.id(IdKind::Workgroup, 0, gx);
    let group_ix = if gy > 1 {
        let wy = kb.id(IdKind::Workgroup, 1, gy);
        wx + wy * Ix::constant(gx)
    } else {
        wx
    };
    let row_cond = below(kb, &group_ix, groups, gx * gy == groups);
    let row_ix = group_ix * Ix::constant(per_group) + lane_row.clone();
    let base = lane_row * Ix::constant(threads);
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
    let shared = kb.ir.alloc(threads * per_group, ElemType::F32);
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
        workgroup_reduce(kb, acc, f, &t, threads, shared, &base)
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
    kb.finish(
        [threads, per_group, 1],
        [gx, gy, 1],
        FuncTemplate::RowReduction,
        None,
    );
    Ok(())
}
