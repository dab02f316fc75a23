//! Normalizations imported as compositions of graph ops:
//! GroupNormalization as a layer norm over each group, LRN as a sum of
//! shifted squares across channels, MeanVarianceNormalization as ONNX's
//! function body.

use ircc_core::{Attribute, Tensor};
use ircc_dialects::graph::GraphOp;
use ndarray::{ArrayD, IxDyn};

use crate::attrs::Attrs;
use crate::import::{Importer, Val};
use crate::ops::{attrs, f32_attr, ints_attr};
use crate::proto::NodeProto;
use crate::{ImportError, Result};

impl Importer<'_> {
    /// GroupNormalization: the channels of `x` ([N, C, ...]) split into
    /// `num_groups`, each normalized over its channels and spatial
    /// positions, then scaled and shifted per channel (opset 21; opset
    /// 18's scale and bias are per group, each group's given to its
    /// channels). A layer norm of `x` reshaped to [N, groups, rest].
    pub(crate) fn group_normalization(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["epsilon", "num_groups", "stash_type"])?;
        let x = self.required(n, 0)?;
        let (scale, bias) = (self.required(n, 1)?, self.required(n, 2)?);
        let ty = self.type_of(&x);
        let groups = a.i("num_groups", 0);
        if ty.rank() < 2 || groups <= 0 || ty.shape[1] % groups != 0 {
            return Err(ImportError::invalid(format!(
                "num_groups {groups} must divide the channels of {ty}"
            )));
        }
        let (batch, channels) = (ty.shape[0], ty.shape[1]);
        let per_group: i64 = ty.shape[1..].iter().product::<i64>() / groups;
        let grouped = self.reshape(x, vec![batch, groups, per_group])?;
        let ones = self.splat(&crate::fold::scalar(1.0, ty.elem), vec![per_group])?;
        let at = attrs(vec![
            ("axis", Attribute::i64(-1)),
            ("epsilon", f32_attr(a.f("epsilon", 1e-5) as f64)),
        ]);
        let normed = self
            .emit(GraphOp::LayerNorm, vec![grouped, ones], at, 1)?
            .remove(0);
        let y = self.reshape(normed, ty.shape.clone())?;
        // Scale and bias broadcast over the spatial axes: [C, 1, ...].
        let mut per_channel = vec![channels];
        per_channel.extend(std::iter::repeat_n(1, ty.rank() - 2));
        let mut affine = |v: Val| -> Result<Val> {
            let vt = self.type_of(&v);
            let v = match vt.shape.as_slice() {
                [c] if *c == channels => v,
                // Opset 18: one value per group, repeated for its channels.
                [g] if *g == groups => {
                    let index: Vec<i64> = (0..channels).map(|c| c / (channels / groups)).collect();
                    let index = Val::constant(Tensor::int(
                        ircc_core::ElemType::I64,
                        ArrayD::from_shape_vec(IxDyn(&[channels as usize]), index).expect("sized"),
                    ));
                    let at = attrs(vec![("axis", Attribute::i64(0))]);
                    self.emit(GraphOp::Gather, vec![v, index], at, 1)?.remove(0)
                }
                _ => {
                    return Err(ImportError::invalid(format!(
                        "scale and bias must hold a value per channel ({channels}) or per group ({groups}), not {vt}"
                    )));
                }
            };
            self.reshape(v, per_channel.clone())
        };
        let (scale, bias) = (affine(scale)?, affine(bias)?);
        let y = self.bin(GraphOp::Mul, y, scale)?;
        Ok(vec![self.bin(GraphOp::Add, y, bias)?])
    }

    /// LRN: `x / (bias + alpha / size · Σ x²)^beta`, the sum over the
    /// `size` channels around each one (those before it rounded down,
    /// after it up; none beyond the edges): the squares padded with zeros
    /// along the channels and `size` shifted slices of them added.
    pub(crate) fn lrn(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["alpha", "beta", "bias", "size"])?;
        let x = self.required(n, 0)?;
        let ty = self.type_of(&x);
        let size = a.i("size", 0);
        if ty.rank() < 3 || size <= 0 {
            return Err(ImportError::invalid(format!(
                "LRN takes [N, C, ...] and a positive size, not {ty} and {size}"
            )));
        }
        let (before, after) = ((size - 1) / 2, size / 2);
        let rank = ty.rank();
        let mut pads = vec![0; 2 * rank];
        pads[1] = before;
        pads[rank + 1] = after;
        let sq = self.bin(GraphOp::Mul, x.clone(), x.clone())?;
        let padded = self
            .emit(
                GraphOp::Pad,
                vec![sq],
                attrs(vec![("pads", ints_attr(pads))]),
                1,
            )?
            .remove(0);
        let channels = ty.shape[1];
        let mut sum: Option<Val> = None;
        for j in 0..size {
            let shifted = self.slice_axis(&padded, 1, j, j + channels)?;
            sum = Some(match sum {
                None => shifted,
                Some(s) => self.bin(GraphOp::Add, s, shifted)?,
            });
        }
        let sum = sum.expect("size is positive");
        let alpha = self.scalar_like(&x, a.f("alpha", 1e-4) as f64 / size as f64);
        let scaled = self.bin(GraphOp::Mul, sum, alpha)?;
        let bias = self.scalar_like(&x, a.f("bias", 1.0) as f64);
        let base = self.bin(GraphOp::Add, scaled, bias)?;
        let beta = self.scalar_like(&x, a.f("beta", 0.75) as f64);
        let denominator = self.bin(GraphOp::Pow, base, beta)?;
        Ok(vec![self.bin(GraphOp::Div, x, denominator)?])
    }

    /// MeanVarianceNormalization: `(x - E[x]) / (sqrt(E[x^2] - E[x]^2) +
    /// 1e-9)` over `axes` (default [0, 2, 3]), as ONNX's function body
    /// computes it.
    pub(crate) fn mean_variance_normalization(
        &mut self,
        n: &NodeProto,
        a: &Attrs,
    ) -> Result<Vec<Val>> {
        a.only(&["axes"])?;
        let x = self.required(n, 0)?;
        let ty = self.type_of(&x);
        if !ty.elem.is_float() {
            return Err(ImportError::invalid(format!(
                "MeanVarianceNormalization of {ty}: a float tensor is needed"
            )));
        }
        let axes = a.ints("axes").unwrap_or_else(|| vec![0, 2, 3]);
        let at = attrs(vec![
            ("axes", ints_attr(axes)),
            ("keepdims", Attribute::i64(1)),
        ]);
        let mean = self
            .emit(GraphOp::ReduceMean, vec![x.clone()], at.clone(), 1)?
            .remove(0);
        let square = self.bin(GraphOp::Mul, x.clone(), x.clone())?;
        let mean_square = self
            .emit(GraphOp::ReduceMean, vec![square], at, 1)?
            .remove(0);
        let squared_mean = self.bin(GraphOp::Mul, mean.clone(), mean.clone())?;
        let variance = self.bin(GraphOp::Sub, mean_square, squared_mean)?;
        let deviation = self.un(GraphOp::Sqrt, variance)?;
        let epsilon = self.scalar_like(&x, 1e-9);
        let deviation = self.bin(GraphOp::Add, deviation, epsilon)?;
        let centered = self.bin(GraphOp::Sub, x, mean)?;
        Ok(vec![self.bin(GraphOp::Div, centered, deviation)?])
    }
}
