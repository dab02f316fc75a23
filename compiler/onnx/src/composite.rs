//! Operators imported as compositions of graph ops: Trilu as a select
//! through a constant mask, LpNormalization through a reduction.

use ircc_core::{Attribute, Attributes, Tensor};
use ircc_dialects::graph::GraphOp;
use ndarray::{ArrayD, IxDyn};

use crate::attrs::Attrs;
use crate::import::{Importer, Val, i64s};
use crate::ops::{attrs, ints_attr};
use crate::proto::NodeProto;
use crate::{ImportError, Result};

impl Importer<'_> {
    /// Trilu: the elements on and above (upper) or below (lower) the
    /// k-th diagonal of the last two axes; the others are zero.
    pub(crate) fn trilu(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["upper"])?;
        let x = self.required(n, 0)?;
        let k = match self.constant_input(n, 1, "k")? {
            Some(t) => *i64s(&t)
                .first()
                .ok_or_else(|| ImportError::invalid("k must hold one value"))?,
            None => 0,
        };
        let ty = self.type_of(&x);
        if ty.rank() < 2 {
            return Err(ImportError::invalid("Trilu needs at least two axes"));
        }
        let (rows, cols) = (ty.shape[ty.rank() - 2], ty.shape[ty.rank() - 1]);
        let upper = a.i("upper", 1) != 0;
        let mask = ArrayD::from_shape_fn(IxDyn(&[rows as usize, cols as usize]), |i| {
            let d = i[1] as i64 - i[0] as i64;
            if upper { d >= k } else { d <= k }
        });
        let zero = self.scalar_like(&x, 0.0);
        let mask = Val::constant(Tensor::bool(mask));
        self.emit(GraphOp::Where, vec![mask, x, zero], Attributes::new(), 1)
    }

    /// LpNormalization: x over its L1 or L2 norm along `axis`.
    pub(crate) fn lp_normalization(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["axis", "p"])?;
        let x = self.required(n, 0)?;
        let at = attrs(vec![
            ("axes", ints_attr(vec![a.i("axis", -1)])),
            ("keepdims", Attribute::i64(1)),
        ]);
        let norm = match a.i("p", 2) {
            1 => {
                let m = self.un(GraphOp::Abs, x.clone())?;
                self.emit(GraphOp::ReduceSum, vec![m], at, 1)?.remove(0)
            }
            2 => {
                let sq = self.bin(GraphOp::Mul, x.clone(), x.clone())?;
                let s = self.emit(GraphOp::ReduceSum, vec![sq], at, 1)?.remove(0);
                self.un(GraphOp::Sqrt, s)?
            }
            p => {
                return Err(ImportError::invalid(format!(
                    "LpNormalization's p must be 1 or 2, not {p}"
                )));
            }
        };
        // A zero norm divides zeros: by one, so they stay zero.
        let zero = self.scalar_like(&norm, 0.0);
        let vanishes = self.bin(GraphOp::Equal, norm.clone(), zero)?;
        let unit = self.scalar_like(&norm, 1.0);
        let norm = self
            .emit(
                GraphOp::Where,
                vec![vanishes, unit, norm],
                Attributes::new(),
                1,
            )?
            .remove(0);
        Ok(vec![self.bin(GraphOp::Div, x, norm)?])
    }
}
