//! `graph.attention` at one result element: the invocation walks the keys
//! once with an online softmax (a running maximum, sum of weights and
//! weighted sum of values, rescaled as the maximum grows), so no score is
//! stored. Each invocation reads its query row and every key; a kernel
//! that shares the keys among a tile of queries is the next step.

use ircc_core::{ElemType, OpId, ValueId};
use ircc_dialects::graph::{self, attention};
use ircc_dialects::kernel::ops::{BinaryFn, CmpPred, UnaryFn};

use super::lowering::{Ix, KernelBuilder, kernel_elem};
use super::values::{ACC, tensor_shape};

type R<T> = Result<T, String>;

impl KernelBuilder<'_> {
    pub(super) fn attention_at(&mut self, op: OpId, idx: &[Ix]) -> R<ValueId> {
        let a = graph::ops::Attention::new(self.m(), op).ok_or("not a graph.attention")?;
        let (q, k, v, mask, result) = (a.q(), a.k(), a.v(), a.mask(), a.y());
        let (sq, sk) = (tensor_shape(self, q), tensor_shape(self, k));
        let (size, keys) = (sq[3], sk[2]);
        let group = sq[1] / sk[1].max(1);
        let scale = attention::scale(&a, size);
        let softcap = a.softcap();
        let frontier = attention::Frontier::of(&a);
        let ((ahead, behind), offset) = (frontier.bounds(), frontier.offset);
        let out = kernel_elem(
            self.m()
                .value_type(result)
                .as_tensor()
                .map_or(ElemType::F32, |t| t.elem),
            self.float,
        );
        let (b, h, i, e) = (
            idx[0].clone(),
            idx[1].clone(),
            idx[2].clone(),
            idx[3].clone(),
        );
        let g = if group == 1 {
            h.clone()
        } else {
            h.clone().floor_div(Ix::constant(group))
        };
        let lowest = self.ir.constant(f64::from(f32::MIN), ACC);
        let zero = self.ir.constant(0.0, ACC);
        let carried = self.for_loop(keys, vec![lowest, zero, zero], &mut |kb, j, c| {
            let (max, total, acc) = (c[0], c[1], c[2]);
            let dot = kb.sum(&[size], ACC, &mut |kb, d| {
                let x = kb.value_at(q, &[b.clone(), h.clone(), i.clone(), d[0].clone()])?;
                let y = kb.value_at(k, &[b.clone(), g.clone(), j.clone(), d[0].clone()])?;
                let (x, y) = (kb.widen(x), kb.widen(y));
                Ok(kb.ir.binary(BinaryFn::Mul, x, y))
            })?;
            let factor = kb.ir.constant(scale, ACC);
            let mut s = kb.ir.binary(BinaryFn::Mul, dot, factor);
            if softcap > 0.0 {
                let cap = kb.ir.constant(softcap, ACC);
                let t = kb.ir.binary(BinaryFn::Div, s, cap);
                let t = kb.ir.unary(UnaryFn::Tanh, t);
                s = kb.ir.binary(BinaryFn::Mul, t, cap);
            }
            let mut allowed = Vec::new();
            // d = j - (i + offset): d <= ahead, -d <= behind.
            let d = j.clone() - i.clone();
            if let Some(a) = ahead {
                allowed.push(kb.index_cmp(CmpPred::Lt, &d, offset + a + 1));
            }
            if let Some(b) = behind {
                allowed.push(kb.index_cmp(CmpPred::Gt, &d, offset - b - 1));
            }
            if let Some(mask) = mask {
                let shape = tensor_shape(kb, mask);
                let last = shape.last().copied().unwrap_or(1);
                if last != 1 && last < keys {
                    allowed.push(kb.index_cmp(CmpPred::Lt, &j, last));
                }
                // Broadcast from the right; a key past a short mask reads
                // an element in it and is masked above.
                let full = [b.clone(), h.clone(), i.clone(), j.clone()];
                let at: Vec<Ix> = shape
                    .iter()
                    .enumerate()
                    .map(|(a, &d)| match d {
                        1 => Ix::constant(0),
                        _ if a + 1 == shape.len() && last < keys => {
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
            let allowed = (!allowed.is_empty()).then(|| kb.ir.all(allowed));
            let mut next_max = kb.ir.binary(BinaryFn::Max, max, s);
            if let Some(flag) = allowed {
                next_max = kb.ir.select(flag, next_max, max);
            }
            let shift = kb.ir.binary(BinaryFn::Sub, max, next_max);
            let rescale = kb.ir.unary(UnaryFn::Exp, shift);
            let d = kb.ir.binary(BinaryFn::Sub, s, next_max);
            let mut weight = kb.ir.unary(UnaryFn::Exp, d);
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
