//! Operators along an axis that compare or combine each element with the
//! others of the axis, imported as masked reductions over the axis spread
//! against itself: CumSum and CumProd, and TopK. Their masks have the
//! axis' length squared, so they are refused on long axes.

use ircc_core::{Attribute, Attributes, ElemType, Tensor};
use ircc_dialects::graph::GraphOp;
use ndarray::{ArrayD, IxDyn};

use crate::attrs::Attrs;
use crate::composite::range_along;
use crate::import::{Importer, Val, i64s};
use crate::ops::{attrs, ints_attr, rank_axis};
use crate::proto::NodeProto;
use crate::{ImportError, Result};

impl Importer<'_> {
    /// CumSum and CumProd: along `axis`, each element the sum (product) of
    /// those up to it (or after it, `reverse`; itself left out,
    /// `exclusive`): the input spread over (contributing, receiving)
    /// positions, where a constant mask says which contribute, and reduced
    /// over the contributing one. Exact for integers, as a scan is.
    pub(crate) fn cumulative(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["exclusive", "reverse"])?;
        let x = self.required(n, 0)?;
        let axis = self
            .constant_input(n, 1, "axis")?
            .and_then(|t| i64s(&t).first().copied())
            .ok_or_else(|| ImportError::invalid("the axis must be a known scalar"))?;
        let ty = self.type_of(&x);
        let axis = rank_axis(axis, ty.rank())?;
        let len = ty.shape[axis];
        if len > 4096 {
            return Err(ImportError::unsupported(format!(
                "{} along an axis of {len} elements (its mask would have {len}^2)",
                n.op_type
            )));
        }
        let (exclusive, reverse) = (a.i("exclusive", 0) != 0, a.i("reverse", 0) != 0);
        let mut mask_shape = vec![1; ty.rank() + 1];
        mask_shape[axis] = len as usize;
        mask_shape[axis + 1] = len as usize;
        let mask = ArrayD::from_shape_fn(IxDyn(&mask_shape), |i| {
            let (from, to) = (i[axis], i[axis + 1]);
            match (reverse, exclusive) {
                (false, false) => from <= to,
                (false, true) => from < to,
                (true, false) => from >= to,
                (true, true) => from > to,
            }
        });
        let mut shape = ty.shape.clone();
        shape.insert(axis + 1, 1);
        let spread = self.reshape(x, shape)?;
        let (reduce, identity) = match n.op_type.as_str() {
            "CumProd" => (GraphOp::ReduceProd, 1.0),
            _ => (GraphOp::ReduceSum, 0.0),
        };
        let identity = self.scalar_like(&spread, identity);
        let terms = self
            .emit(
                GraphOp::Where,
                vec![Val::constant(Tensor::bool(mask)), spread, identity],
                Attributes::new(),
                1,
            )?
            .remove(0);
        let at = attrs(vec![
            ("axes", ints_attr(vec![axis as i64])),
            ("keepdims", Attribute::i64(0)),
        ]);
        self.emit(reduce, vec![terms], at, 1)
    }

    /// TopK: the `k` largest (or smallest) elements along `axis`, sorted,
    /// ties to the lower index, and their indices. Each element's rank is
    /// how many others come before it (greater, or equal at a lower
    /// index: a comparison of the axis with itself); the r-th result is
    /// the element of rank r. Exact for every type, with no sentinel.
    pub(crate) fn top_k(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["axis", "largest", "sorted", "k"])?;
        let x = self.required(n, 0)?;
        let k = match self.opset {
            ..10 => a.i("k", 0),
            _ => self
                .constant_input(n, 1, "k")?
                .and_then(|t| i64s(&t).first().copied())
                .ok_or_else(|| ImportError::invalid("TopK's k must be known"))?,
        };
        let ty = self.type_of(&x);
        let axis = rank_axis(a.i("axis", -1), ty.rank())?;
        let len = ty.shape[axis];
        if !(1..=len).contains(&k) {
            return Err(ImportError::unsupported(format!(
                "TopK's k = {k} (results of no elements, or more than the axis' {len})"
            )));
        }
        if len > 4096 || k > 64 {
            return Err(ImportError::unsupported(format!(
                "TopK of {k} along an axis of {len} elements (at most 64 of 4096)"
            )));
        }
        let spread = |me: &mut Self, at: usize| {
            let mut shape = ty.shape.clone();
            shape.insert(at, 1);
            me.reshape(x.clone(), shape)
        };
        // Axis `axis` counts the element ranked, `axis + 1` the others.
        let (this, other) = (spread(self, axis + 1)?, spread(self, axis)?);
        let order = if a.i("largest", 1) != 0 {
            GraphOp::Greater
        } else {
            GraphOp::Less
        };
        let ahead = self.bin(order, other.clone(), this.clone())?;
        let tied = self.bin(GraphOp::Equal, other, this)?;
        let mut shape = vec![1; ty.rank() + 1];
        shape[axis] = len as usize;
        shape[axis + 1] = len as usize;
        let lower = ArrayD::from_shape_fn(IxDyn(&shape), |i| i[axis + 1] < i[axis]);
        let tied_lower = self.bin(GraphOp::And, tied, Val::constant(Tensor::bool(lower)))?;
        let before = self.bin(GraphOp::Or, ahead, tied_lower)?;
        let before = self.cast(before, ElemType::I64)?;
        let sum = |axis: usize, keepdims: i64| {
            attrs(vec![
                ("axes", ints_attr(vec![axis as i64])),
                ("keepdims", Attribute::i64(keepdims)),
            ])
        };
        let rank = self
            .emit(GraphOp::ReduceSum, vec![before], sum(axis + 1, 0), 1)?
            .remove(0);
        let range = range_along(ElemType::I64, ty.rank(), axis, len);
        let zero = Val::constant(crate::fold::scalar(0.0, ElemType::I64));
        let (mut values, mut indices) = (Vec::new(), Vec::new());
        for r in 0..k {
            let r = Val::constant(crate::fold::scalar(r as f64, ElemType::I64));
            let hit = self.bin(GraphOp::Equal, rank.clone(), r)?;
            let at = self
                .emit(
                    GraphOp::Where,
                    vec![hit, range.clone(), zero.clone()],
                    Attributes::new(),
                    1,
                )?
                .remove(0);
            let index = self
                .emit(GraphOp::ReduceSum, vec![at], sum(axis, 1), 1)?
                .remove(0);
            let value = self
                .emit(
                    GraphOp::GatherElements,
                    vec![x.clone(), index.clone()],
                    attrs(vec![("axis", Attribute::i64(axis as i64))]),
                    1,
                )?
                .remove(0);
            values.push(value);
            indices.push(index);
        }
        Ok(vec![
            self.concat(values, axis as i64)?,
            self.concat(indices, axis as i64)?,
        ])
    }
}
