//! The template of `graph.non_max_suppression`: a workgroup per batch and
//! class. Greedy suppression walks the boxes in order of falling score,
//! so the workgroup first ranks them (each invocation its share, against
//! all: the order is total, ties going to the lower index) into an order
//! in workgroup memory; the scores are read once into workgroup memory
//! first, so every comparison sees the same bits (a fused producer
//! recomputed in two places of a kernel may round differently). Then all
//! invocations walk the order together: each checks the candidate against
//! its share of the kept boxes, a flag in workgroup memory gathers the
//! verdicts, and the invocation that owns the next slot keeps it. Slot k
//! belongs to invocation k % W alone, which also writes its row, so the
//! kept boxes need no barrier of their own.

use ircc_core::{ElemType, OpId, Type, ValueId};
use ircc_dialects::graph::nms::NmsShape;
use ircc_dialects::kernel::ops::{BinaryFn, CmpPred, FuncTemplate, IdKind, UnaryFn};

use super::lowering::{Ix, KernelBuilder, delinearize};
use super::lowering::{guarded, store_outputs, target};
use super::values::ACC;

type R<T> = Result<T, String>;

/// What the kernel needs of the op.
struct Nms {
    shape: NmsShape,
    center_point: bool,
    iou: f64,
    score_threshold: Option<f64>,
    boxes: ValueId,
    scores: ValueId,
    result: ValueId,
}

pub(super) fn lower(kb: &mut KernelBuilder, anchor: OpId, outputs: &[(ValueId, ValueId)]) -> R<()> {
    let nms = {
        let view = kb.view(anchor)?;
        Nms {
            shape: NmsShape::of(&view)?,
            center_point: view.i64("center_point_box")? == 1,
            iou: view.f64("iou_threshold")?,
            score_threshold: view
                .has_attr("score_threshold")
                .then(|| view.f64("score_threshold"))
                .transpose()?,
            boxes: kb.operand(anchor, 0),
            scores: kb.operand(anchor, 1),
            result: kb.m().op(anchor).results[0],
        }
    };
    let lanes = target().nms_workgroup;
    let (classes, boxes, rows) = (
        nms.shape.batches * nms.shape.classes,
        nms.shape.boxes,
        nms.shape.rows,
    );
    let (box_rounds, row_rounds) = ((boxes + lanes - 1) / lanes, (rows + lanes - 1) / lanes);
    let bytes = 4 * (2 * boxes + row_rounds * lanes + 3);
    if bytes > target().max_workgroup_storage_bytes {
        return Err(format!(
            "its {boxes} boxes and {rows} kept per class need {bytes} bytes of workgroup memory, more than the {} there are",
            target().max_workgroup_storage_bytes
        ));
    }
    if classes > target().max_workgroups_per_dimension {
        return Err(format!(
            "{classes} batches and classes are more workgroups than a dispatch has"
        ));
    }
    let q = kb.id(IdKind::Workgroup, 0, classes);
    let lane = kb.id(IdKind::Local, 0, lanes);
    let bc = delinearize(&q, &[nms.shape.batches, nms.shape.classes]);
    let scores = kb.ir.alloc(boxes, ACC);
    let order = kb.ir.alloc(boxes, ElemType::I32);
    let kept = kb.ir.alloc(row_rounds * lanes, ElemType::I32);
    let flags = kb.ir.alloc(3, ElemType::I32);
    let (zero, one, minus_one) = (
        kb.ir.constant(0.0, ElemType::I32),
        kb.ir.constant(1.0, ElemType::I32),
        kb.ir.constant(-1.0, ElemType::I32),
    );
    let threshold = nms.score_threshold.map(|t| kb.ir.constant(t, ACC));

    // The scores, read once; the order, empty; the verdict flags, clear.
    share(kb, &lane, box_rounds, boxes, &mut |kb, i| {
        let s = kb.value_at(nms.scores, &[bc[0].clone(), bc[1].clone(), i.clone()])?;
        let s = kb.widen(s);
        // NaN ranks as -inf, below every score, as the interpreter ranks
        // it: the order must be total, or two boxes would take one rank.
        let same = kb.ir.cmp(CmpPred::Eq, s, s);
        let lowest = kb.ir.constant(f64::NEG_INFINITY, ACC);
        let s = kb.ir.select(same, s, lowest);
        kb.store(s, scores, i);
        kb.store(minus_one, order, i);
        Ok(())
    })?;
    let first = kb.index_cmp(CmpPred::Lt, &lane, 3);
    kb.if_then(first, &mut |kb| {
        kb.store(zero, flags, &lane);
        Ok(())
    })?;
    kb.ir.barrier();

    // Each box above the threshold at its rank among them.
    share(kb, &lane, box_rounds, boxes, &mut |kb, i| {
        let s = kb.load(scores, i);
        let index = as_i32(kb, i);
        let rank = kb.for_loop(boxes, vec![zero], &mut |kb, j, carried| {
            let t = kb.load(scores, &j);
            let other = as_i32(kb, &j);
            let higher = kb.ir.cmp(CmpPred::Gt, t, s);
            let tied = kb.ir.cmp(CmpPred::Eq, t, s);
            let lower_index = kb.ir.cmp(CmpPred::Lt, other, index);
            let tied_before = kb.ir.binary(BinaryFn::And, tied, lower_index);
            let mut before = vec![kb.ir.binary(BinaryFn::Or, higher, tied_before)];
            before.extend(threshold.map(|th| kb.ir.cmp(CmpPred::Gt, t, th)));
            let before = kb.ir.all(before);
            let add = kb.ir.select(before, one, zero);
            Ok(vec![kb.ir.binary(BinaryFn::Add, carried[0], add)])
        })?[0];
        let valid = match threshold {
            Some(th) => kb.ir.cmp(CmpPred::Gt, s, th),
            None => kb.ir.constant(1.0, ElemType::I1),
        };
        kb.if_then(valid, &mut |kb| {
            let at = index_var(kb, rank, boxes);
            kb.store(index, order, &at);
            Ok(())
        })?;
        Ok(())
    })?;
    kb.ir.barrier();

    // The walk, in step on every invocation; carried: how many are kept.
    let last_row = kb.ir.constant(rows as f64, ElemType::I32);
    let lane_i32 = as_i32(kb, &lane);
    let count = kb.for_loop(boxes, vec![zero], &mut |kb, t, carried| {
        let count = carried[0];
        let candidate = kb.load(order, &t);
        let present = kb.ir.cmp(CmpPred::Ge, candidate, zero);
        // Where there is none, box 0 stands in, so loads stay in bounds.
        let at = kb.ir.select(present, candidate, zero);
        let at = index_var(kb, at, boxes);
        let corners_of_candidate = corners(kb, &nms, &bc[0], &at)?;
        let no = kb.ir.constant(0.0, ElemType::I1);
        let hit = kb.for_loop(row_rounds, vec![no], &mut |kb, r, carried| {
            let k = lane.clone() + r * Ix::constant(lanes);
            let slot = as_i32(kb, &k);
            let used = kb.ir.cmp(CmpPred::Lt, slot, count);
            let other = kb.load(kept, &k);
            let other = kb.ir.select(used, other, zero);
            let other = index_var(kb, other, boxes);
            let other = corners(kb, &nms, &bc[0], &other)?;
            let overlaps = overlaps(kb, &other, &corners_of_candidate, nms.iou);
            let hit = kb.ir.binary(BinaryFn::And, used, overlaps);
            Ok(vec![kb.ir.binary(BinaryFn::Or, carried[0], hit)])
        })?[0];
        // Three flags in turn: a step sets one, reads it after the
        // barrier, and clears the one the step after next sets, which
        // every invocation read before this step's barrier.
        let flag = t.clone().modulo(Ix::constant(3));
        kb.if_then(hit, &mut |kb| {
            kb.store(one, flags, &flag);
            Ok(())
        })?;
        kb.ir.barrier();
        let verdict = kb.load(flags, &flag);
        let suppressed = kb.ir.cmp(CmpPred::Ne, verdict, zero);
        let leader = kb.index_cmp(CmpPred::Eq, &lane, 0);
        kb.if_then(leader, &mut |kb| {
            let later = (t.clone() + Ix::constant(2)).modulo(Ix::constant(3));
            kb.store(zero, flags, &later);
            Ok(())
        })?;
        let room = kb.ir.cmp(CmpPred::Lt, count, last_row);
        let free = kb.ir.unary(UnaryFn::Not, suppressed);
        let keep = kb.ir.all(vec![present, room, free]);
        let next = index_var(kb, count, rows + 1);
        let owner = kb.apply(&next.clone().modulo(Ix::constant(lanes)));
        let owner = kb.ir.cast(owner, Type::Scalar(ElemType::I32));
        let mine = kb.ir.cmp(CmpPred::Eq, owner, lane_i32);
        let store = kb.ir.binary(BinaryFn::And, keep, mine);
        kb.if_then(store, &mut |kb| {
            kb.store(candidate, kept, &next);
            Ok(())
        })?;
        let added = kb.ir.select(keep, one, zero);
        Ok(vec![kb.ir.binary(BinaryFn::Add, count, added)])
    })?[0];

    // Each invocation writes the rows of its slots: kept boxes, then -1.
    let [b, c] = [0, 1].map(|k| {
        let v = kb.apply(&bc[k]);
        kb.ir.cast(v, Type::Scalar(ElemType::I32))
    });
    let first_row = q * Ix::constant(rows);
    share(kb, &lane, row_rounds, rows, &mut |kb, k| {
        let slot = as_i32(kb, k);
        let used = kb.ir.cmp(CmpPred::Lt, slot, count);
        let index = kb.load(kept, k);
        let values = [b, c, index].map(|v| kb.ir.select(used, v, minus_one));
        write_row(kb, &nms, outputs, &(first_row.clone() + k.clone()), values)
    })?;
    kb.finish(
        [lanes, 1, 1],
        [classes, 1, 1],
        FuncTemplate::NonMaxSuppression,
        None,
    );
    Ok(())
}

/// Runs `body` for every index below `n` of this invocation's share:
/// `lane`, `lane + W`, ... over `rounds` rounds.
fn share(
    kb: &mut KernelBuilder,
    lane: &Ix,
    rounds: i64,
    n: i64,
    body: &mut dyn FnMut(&mut KernelBuilder, &Ix) -> R<()>,
) -> R<()> {
    let lanes = target().nms_workgroup;
    kb.for_loop(rounds, vec![], &mut |kb, r, _| {
        let i = lane.clone() + r * Ix::constant(lanes);
        let inside = (rounds * lanes != n).then(|| kb.index_cmp(CmpPred::Lt, &i, n));
        guarded(kb, inside, &mut |kb| body(kb, &i))?;
        Ok(vec![])
    })?;
    Ok(())
}

/// An index expression as an i32 value.
fn as_i32(kb: &mut KernelBuilder, i: &Ix) -> ValueId {
    let v = kb.apply(i);
    kb.ir.cast(v, Type::Scalar(ElemType::I32))
}

/// An i32 value in `[0, extent)` as an index variable.
fn index_var(kb: &mut KernelBuilder, v: ValueId, extent: i64) -> Ix {
    let v = kb.ir.cast(v, Type::Index);
    kb.var(v, extent)
}

/// A box as its least and greatest y and x, and its area, in f32.
struct Corners {
    y0: ValueId,
    x0: ValueId,
    y1: ValueId,
    x1: ValueId,
    area: ValueId,
}

fn corners(kb: &mut KernelBuilder, nms: &Nms, b: &Ix, i: &Ix) -> R<Corners> {
    let mut v = [0; 4].map(|_| None);
    for (k, slot) in v.iter_mut().enumerate() {
        let x = kb.value_at(nms.boxes, &[b.clone(), i.clone(), Ix::constant(k as i64)])?;
        *slot = Some(kb.widen(x));
    }
    let [a, b, c, d] = v.map(|x| x.expect("four coordinates"));
    let (y0, x0, y1, x1) = if nms.center_point {
        // [x, y, width, height]
        let half = kb.ir.constant(0.5, ACC);
        let hw = kb.ir.binary(BinaryFn::Mul, c, half);
        let hh = kb.ir.binary(BinaryFn::Mul, d, half);
        (
            kb.ir.binary(BinaryFn::Sub, b, hh),
            kb.ir.binary(BinaryFn::Sub, a, hw),
            kb.ir.binary(BinaryFn::Add, b, hh),
            kb.ir.binary(BinaryFn::Add, a, hw),
        )
    } else {
        // Two opposite corners [y1, x1, y2, x2], in either order.
        (
            kb.ir.binary(BinaryFn::Min, a, c),
            kb.ir.binary(BinaryFn::Min, b, d),
            kb.ir.binary(BinaryFn::Max, a, c),
            kb.ir.binary(BinaryFn::Max, b, d),
        )
    };
    let h = kb.ir.binary(BinaryFn::Sub, y1, y0);
    let w = kb.ir.binary(BinaryFn::Sub, x1, x0);
    let area = kb.ir.binary(BinaryFn::Mul, h, w);
    Ok(Corners {
        y0,
        x0,
        y1,
        x1,
        area,
    })
}

/// Whether `a` and `b` overlap by more than `threshold` of their union,
/// as the interpreter decides (boxes without area never do).
fn overlaps(kb: &mut KernelBuilder, a: &Corners, b: &Corners, threshold: f64) -> ValueId {
    let ir = &mut kb.ir;
    let zero = ir.constant(0.0, ACC);
    let top = ir.binary(BinaryFn::Max, a.y0, b.y0);
    let bottom = ir.binary(BinaryFn::Min, a.y1, b.y1);
    let left = ir.binary(BinaryFn::Max, a.x0, b.x0);
    let right = ir.binary(BinaryFn::Min, a.x1, b.x1);
    let h = ir.binary(BinaryFn::Sub, bottom, top);
    let w = ir.binary(BinaryFn::Sub, right, left);
    let inter = ir.binary(BinaryFn::Mul, h, w);
    let sum = ir.binary(BinaryFn::Add, a.area, b.area);
    let union = ir.binary(BinaryFn::Sub, sum, inter);
    let t = ir.constant(threshold, ACC);
    let iou = ir.binary(BinaryFn::Div, inter, union);
    let flags = vec![
        ir.cmp(CmpPred::Gt, h, zero),
        ir.cmp(CmpPred::Gt, w, zero),
        ir.cmp(CmpPred::Gt, a.area, zero),
        ir.cmp(CmpPred::Gt, b.area, zero),
        ir.cmp(CmpPred::Gt, union, zero),
        ir.cmp(CmpPred::Gt, iou, t),
    ];
    ir.all(flags)
}

/// Writes `values` (i32) as row `row` of the result, and of the outputs
/// the group computes from it there.
fn write_row(
    kb: &mut KernelBuilder,
    nms: &Nms,
    outputs: &[(ValueId, ValueId)],
    row: &Ix,
    values: [ValueId; 3],
) -> R<()> {
    for (k, v) in values.into_iter().enumerate() {
        let idx = [row.clone(), Ix::constant(k as i64)];
        kb.memo_put(nms.result, &idx, v);
        store_outputs(kb, outputs, &idx)?;
    }
    Ok(())
}
