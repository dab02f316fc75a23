//! Quantized operators as compositions of graph ops, computed as
//! onnxruntime computes them: integer offsets subtracted in i32, products
//! summed in i32 (`graph.matmul` and `graph.conv` of i32, exact), scales
//! applied in f32, rounding half to even, saturation to the stored type.
//!
//! A scale or zero point is per tensor (a scalar or one element), per axis
//! (one per index of `axis`), or per block (the input's shape with `axis`
//! divided by `block_size`, rounded up).

use ircc_core::minifloat::MiniFloat;
use ircc_core::{Attribute, Attributes, ElemType, Tensor, TensorType};
use ircc_dialects::graph::GraphOp;
use ndarray::Array1;

use crate::attrs::Attrs;
use crate::import::{Importer, Val};
use crate::ops::{CONV_ATTRS, attrs, ints_attr, rank_axis};
use crate::proto::NodeProto;
use crate::tensor::elem_type;
use crate::{ImportError, Result};

/// An ONNX data type attribute's element type.
fn data_type(t: i64) -> Result<ElemType> {
    let t = i32::try_from(t)
        .map_err(|_| ImportError::invalid(format!("data type {t} is out of range")))?;
    elem_type(t)
}

/// The integer types quantized tensors are stored in.
fn quantized_range(e: ElemType) -> Option<(f64, f64)> {
    use ElemType as E;
    matches!(
        e,
        E::I16 | E::U16 | E::I8 | E::U8 | E::I4 | E::U4 | E::I2 | E::U2
    )
    .then(|| {
        let (lo, hi) = e.int_range();
        (lo as f64, hi as f64)
    })
}

impl Importer<'_> {
    /// DequantizeLinear: (x - zero_point) * scale.
    pub(crate) fn dequantize_linear(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["axis", "block_size", "output_dtype"])?;
        let x = self.required(n, 0)?;
        let xt = self.type_of(&x);
        if quantized_range(xt.elem).is_none()
            && xt.elem != ElemType::I32
            && MiniFloat::of(xt.elem).is_none()
        {
            return Err(ImportError::unsupported(format!(
                "DequantizeLinear of {} (integers of 2 to 16 bits, int32 and the 8- and 4-bit floats are supported)",
                xt.elem
            )));
        }
        // A quantized weight stays in its integer type: its dequantization
        // fuses into the kernel that reads it (QDQ models keep their int8
        // weights so) instead of folding into an f32 copy four times its size.
        let x = self.kept_as_weight(x)?;
        let scale = self.required(n, 1)?;
        let out = match a.i("output_dtype", 0) {
            0 => self.type_of(&scale).elem,
            t => data_type(t)?,
        };
        let per = Granularity::of(a)?;
        let scale = self.spread(scale, &xt, per)?;
        let zero = match self.input(n, 2)? {
            Some(z) => Some(self.spread(z, &xt, per)?),
            None => None,
        };
        let y = self.dequantize(x, zero, scale)?;
        Ok(vec![self.cast_to(y, out)?])
    }

    /// QuantizeLinear: saturate(round(x / scale) + zero_point), in the
    /// zero point's type (uint8 without one).
    pub(crate) fn quantize_linear(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&[
            "axis",
            "block_size",
            "saturate",
            "output_dtype",
            "precision",
        ])?;
        let x = self.required(n, 0)?;
        let xt = self.type_of(&x);
        let zero = self.input(n, 2)?;
        if a.i("precision", 0) != 0 {
            return Err(ImportError::unsupported(
                "QuantizeLinear's precision attribute (ircc divides in f32)",
            ));
        }
        let out = match (&zero, a.i("output_dtype", 0)) {
            (Some(z), 0) => self.type_of(z).elem,
            (Some(z), t) if data_type(t)? != self.type_of(z).elem => {
                return Err(ImportError::invalid(format!(
                    "output_dtype {} differs from y_zero_point's type {}",
                    data_type(t)?,
                    self.type_of(z).elem
                )));
            }
            (Some(z), _) => self.type_of(z).elem,
            (None, 0) => ElemType::U8,
            (None, t) => data_type(t)?,
        };
        let per = Granularity::of(a)?;
        let scale = self.required(n, 1)?;
        let scale = self.spread(scale, &xt, per)?;
        let zero = match zero {
            Some(z) => Some(self.spread(z, &xt, per)?),
            None => None,
        };
        let x = self.cast_to(x, ElemType::F32)?;
        let scale = self.cast_to(scale, ElemType::F32)?;
        let scaled = self.bin(GraphOp::Div, x, scale)?;
        let saturate = a.i("saturate", 1) != 0;
        Ok(vec![self.requantize(scaled, zero, out, saturate)?])
    }

    /// DynamicQuantizeLinear: x to uint8 with the scale and zero point that
    /// map the range of x (widened to hold 0) onto 0..=255.
    pub(crate) fn dynamic_quantize_linear(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&[])?;
        let x = self.required(n, 0)?;
        let rank = self.type_of(&x).rank() as i64;
        let all = attrs(vec![
            ("axes", ints_attr((0..rank).collect())),
            ("keepdims", Attribute::i64(0)),
        ]);
        let hi = self.emit(GraphOp::ReduceMax, vec![x.clone()], all.clone(), 1)?;
        let lo = self.emit(GraphOp::ReduceMin, vec![x.clone()], all, 1)?;
        let zero = self.scalar_like(&x, 0.0);
        let hi = self.bin(GraphOp::Max, hi[0].clone(), zero.clone())?;
        let lo = self.bin(GraphOp::Min, lo[0].clone(), zero)?;
        let span = self.bin(GraphOp::Sub, hi, lo.clone())?;
        let steps = self.scalar_like(&span, 255.0);
        let scale = self.bin(GraphOp::Div, span.clone(), steps)?;
        // All zeros: scale 1 (and zero point 0), as onnxruntime, not 0/0.
        let none = self.scalar_like(&span, 0.0);
        let flat = self.bin(GraphOp::Equal, span, none)?;
        let one = self.scalar_like(&scale, 1.0);
        let scale = self
            .emit(GraphOp::Where, vec![flat, one, scale], Attributes::new(), 1)?
            .remove(0);
        let below = self.un(GraphOp::Neg, lo)?;
        let offset = self.bin(GraphOp::Div, below, scale.clone())?;
        let offset = self.un(GraphOp::Round, offset)?;
        let offset = self.clip(offset, (0.0, 255.0))?;
        let scaled = self.bin(GraphOp::Div, x, scale.clone())?;
        let rounded = self.un(GraphOp::Round, scaled)?;
        let shifted = self.bin(GraphOp::Add, rounded, offset.clone())?;
        let y = self.clip(shifted, (0.0, 255.0))?;
        Ok(vec![
            self.cast(y, ElemType::U8)?,
            scale,
            self.cast(offset, ElemType::U8)?,
        ])
    }

    /// MatMulInteger: (a - a_zero_point) · (b - b_zero_point) in i32.
    pub(crate) fn matmul_integer(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&[])?;
        let (x, w) = (self.required(n, 0)?, self.required(n, 1)?);
        let (xz, wz) = (self.input(n, 2)?, self.input(n, 3)?);
        Ok(vec![self.integer_product(x, xz, w, wz)?])
    }

    /// ConvInteger: the convolution of (x - x_zero_point) with
    /// (w - w_zero_point) in i32.
    pub(crate) fn conv_integer(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(CONV_ATTRS)?;
        let (x, w) = (self.required(n, 0)?, self.required(n, 1)?);
        let (xz, wz) = (self.input(n, 2)?, self.input(n, 3)?);
        Ok(vec![self.integer_conv(n, a, x, xz, w, wz, None)?])
    }

    /// QLinearMatMul: the integer product requantized by
    /// a_scale · b_scale / y_scale to y_zero_point's type.
    pub(crate) fn qlinear_matmul(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&[])?;
        let [x, xs, xz, w, ws, wz, ys] = self.inputs(n)?;
        let yz = self.input(n, 7)?;
        let out = self.quantized_out(&yz)?;
        let xs = self.per_row(xs, &x, "a_scale")?;
        let acc = self.integer_product(x, Some(xz), w, Some(wz))?;
        // A scale per column of w broadcasts against the product's last axis.
        Ok(vec![self.rescale(acc, xs, ws, ys, yz, out)?])
    }

    /// QLinearConv: the integer convolution plus its i32 bias, requantized
    /// by x_scale · w_scale / y_scale (w_scale per output channel or not).
    pub(crate) fn qlinear_conv(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(CONV_ATTRS)?;
        let [x, xs, xz, w, ws, wz, ys] = self.inputs(n)?;
        let yz = self.input(n, 7)?;
        let bias = self.input(n, 8)?;
        let out = self.quantized_out(&yz)?;
        for (v, what) in [(&xs, "x_scale"), (&xz, "x_zero_point"), (&ys, "y_scale")] {
            self.single(v, what)?;
        }
        if let Some(z) = &yz {
            self.single(z, "y_zero_point")?;
        }
        let channels = self.type_of(&w).shape.first().copied().unwrap_or(0);
        let acc = self.integer_conv(n, a, x, Some(xz), w, Some(wz), bias)?;
        let rank = self.type_of(&acc).rank();
        let ws = self.along(ws, rank, 1, channels, "w_scale")?;
        Ok(vec![self.rescale(acc, xs, ws, ys, yz, out)?])
    }

    /// The first seven inputs, all required.
    fn inputs(&self, n: &NodeProto) -> Result<[Val; 7]> {
        let v: Vec<Val> = (0..7).map(|i| self.required(n, i)).collect::<Result<_>>()?;
        Ok(v.try_into()
            .unwrap_or_else(|_| unreachable!("seven inputs")))
    }

    fn quantized_out(&self, zero: &Option<Val>) -> Result<ElemType> {
        let e = zero.as_ref().map_or(ElemType::U8, |z| self.type_of(z).elem);
        quantized_range(e).map(|_| e).ok_or_else(|| {
            ImportError::unsupported(format!(
                "a quantized result of {e} (int8, uint8, int16 and uint16 are supported)"
            ))
        })
    }

    /// `acc` (i32) times x_scale · w_scale / y_scale, rounded, offset by
    /// y's zero point and saturated to `out`.
    fn rescale(
        &mut self,
        acc: Val,
        xs: Val,
        ws: Val,
        ys: Val,
        yz: Option<Val>,
        out: ElemType,
    ) -> Result<Val> {
        let f = self.cast(acc, ElemType::F32)?;
        let (xs, ws, ys) = (
            self.cast_to(xs, ElemType::F32)?,
            self.cast_to(ws, ElemType::F32)?,
            self.cast_to(ys, ElemType::F32)?,
        );
        let multiplier = self.bin(GraphOp::Mul, xs, ws)?;
        let multiplier = self.bin(GraphOp::Div, multiplier, ys)?;
        let scaled = self.bin(GraphOp::Mul, f, multiplier)?;
        self.requantize(scaled, yz, out, true)
    }

    /// round(x) + zero point, saturated and cast to `out`.
    /// `scaled` plus the zero point in `out`: rounded to an integer and
    /// clipped to its range, or cast to an 8- or 4-bit float (`saturate` as
    /// Cast's).
    fn requantize(
        &mut self,
        scaled: Val,
        zero: Option<Val>,
        out: ElemType,
        saturate: bool,
    ) -> Result<Val> {
        if MiniFloat::of(out).is_some() {
            let q = match zero {
                Some(z) => {
                    let z = self.cast(z, ElemType::F32)?;
                    self.bin(GraphOp::Add, scaled, z)?
                }
                None => scaled,
            };
            return self.cast_saturating(q, out, saturate);
        }
        let range = quantized_range(out).ok_or_else(|| {
            ImportError::unsupported(format!(
                "quantizing to {out} (integers of 2 to 16 bits and the 8- and 4-bit floats are supported)"
            ))
        })?;
        let mut q = self.un(GraphOp::Round, scaled)?;
        if let Some(z) = zero {
            let z = self.cast(z, ElemType::F32)?;
            q = self.bin(GraphOp::Add, q, z)?;
        }
        let q = self.clip(q, range)?;
        self.cast(q, out)
    }

    /// (x - zero) · scale, the offset taken in i32 as onnxruntime does.
    fn dequantize(&mut self, x: Val, zero: Option<Val>, scale: Val) -> Result<Val> {
        let x = if MiniFloat::of(self.type_of(&x).elem).is_some() {
            // A narrow float's offset is taken in f32.
            let x = self.cast(x, ElemType::F32)?;
            match zero {
                Some(z) => {
                    let z = self.cast(z, ElemType::F32)?;
                    self.bin(GraphOp::Sub, x, z)?
                }
                None => x,
            }
        } else {
            let x = self.centred(x, zero)?;
            self.cast(x, ElemType::F32)?
        };
        let scale = self.cast_to(scale, ElemType::F32)?;
        self.bin(GraphOp::Mul, x, scale)
    }

    /// x - zero in i32.
    fn centred(&mut self, x: Val, zero: Option<Val>) -> Result<Val> {
        let x = self.cast_to(x, ElemType::I32)?;
        match zero {
            Some(z) => {
                let z = self.cast_to(z, ElemType::I32)?;
                self.bin(GraphOp::Sub, x, z)
            }
            None => Ok(x),
        }
    }

    fn integer_product(&mut self, x: Val, xz: Option<Val>, w: Val, wz: Option<Val>) -> Result<Val> {
        let xz = match xz {
            Some(z) => Some(self.per_row(z, &x, "a_zero_point")?),
            None => None,
        };
        let x = self.centred(x, xz)?;
        let w = self.centred(w, wz)?;
        self.bin(GraphOp::Matmul, x, w)
    }

    fn single(&self, v: &Val, what: &str) -> Result<()> {
        let t = self.type_of(v);
        if t.num_elements() == 1 && t.rank() <= 1 {
            Ok(())
        } else {
            Err(ImportError::invalid(format!(
                "{what} must hold one value, not {t}"
            )))
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn integer_conv(
        &mut self,
        n: &NodeProto,
        a: &Attrs,
        x: Val,
        xz: Option<Val>,
        w: Val,
        wz: Option<Val>,
        bias: Option<Val>,
    ) -> Result<Val> {
        if let Some(z) = &xz {
            self.single(z, "x_zero_point")?;
        }
        let wt = self.type_of(&w);
        let channels = wt.shape.first().copied().unwrap_or(0);
        let wz = match wz {
            Some(z) => Some(self.along(z, wt.rank(), 0, channels, "w_zero_point")?),
            None => None,
        };
        let x = self.centred(x, xz)?;
        let w = self.centred(w, wz)?;
        let bias = match bias {
            Some(b) => Some(self.cast_to(b, ElemType::I32)?),
            None => None,
        };
        Ok(self.conv_with(n, a, x, w, bias)?.remove(0))
    }

    /// A value per row of a product's left operand `x` ([..., M, K]): a
    /// single value as it is, M values as a column [M, 1], or the shape
    /// [..., M, 1] as it is.
    fn per_row(&mut self, v: Val, x: &Val, what: &str) -> Result<Val> {
        let (vt, xt) = (self.type_of(&v), self.type_of(x));
        if vt.num_elements() == 1 && vt.rank() <= xt.rank() {
            return Ok(v);
        }
        let rows = xt.rank().checked_sub(2).map(|r| xt.shape[r]);
        match rows {
            Some(m) if vt.rank() == 1 && vt.shape[0] == m => self.reshape(v, vec![m, 1]),
            Some(_) if vt.rank() == xt.rank() && vt.shape.last() == Some(&1) => Ok(v),
            _ => Err(ImportError::invalid(format!(
                "{what} must hold one value or one per row of {xt}, not {vt}"
            ))),
        }
    }

    /// A vector of one value per output channel laid along `axis` of a
    /// tensor of `rank` axes (0 for a weight, 1 for a result); a single
    /// value as it is.
    fn along(
        &mut self,
        v: Val,
        rank: usize,
        axis: usize,
        channels: i64,
        what: &str,
    ) -> Result<Val> {
        let vt = self.type_of(&v);
        let count = vt.num_elements();
        if count == 1 && vt.rank() <= 1 {
            return Ok(v);
        }
        if vt.rank() != 1 || count != channels {
            return Err(ImportError::invalid(format!(
                "{what} must hold one value or one per output channel ({channels}), not {vt}"
            )));
        }
        let mut shape = vec![1; rank];
        shape[axis] = count;
        self.reshape(v, shape)
    }

    /// A scale or zero point spread to broadcast against x: a scalar as it
    /// is, a vector along `axis`, blocks repeated along `axis`.
    fn spread(&mut self, v: Val, xt: &TensorType, per: Granularity) -> Result<Val> {
        let vt = self.type_of(&v);
        match per {
            _ if vt.num_elements() == 1 && vt.rank() <= xt.rank() => Ok(v),
            Granularity::Axis(axis) => {
                let axis = rank_axis(axis, xt.rank())?;
                if vt.rank() != 1 || vt.shape[0] != xt.shape[axis] {
                    return Err(ImportError::invalid(format!(
                        "a per-axis scale or zero point (input #1 or #2) needs {} values (axis {axis}), not {vt}",
                        xt.shape[axis]
                    )));
                }
                let mut shape = vec![1; xt.rank()];
                shape[axis] = xt.shape[axis];
                self.reshape(v, shape)
            }
            Granularity::Block(axis, size) => {
                let axis = rank_axis(axis, xt.rank())?;
                let len = xt.shape[axis];
                let blocks = if len == 0 { 0 } else { (len - 1) / size + 1 };
                let mut want = xt.shape.clone();
                want[axis] = blocks;
                if vt.shape != want {
                    return Err(ImportError::invalid(format!(
                        "a blocked scale or zero point needs shape {want:?} (block size {size} along axis {axis}), not {vt}"
                    )));
                }
                let which = Array1::from_iter((0..xt.shape[axis]).map(|i| i / size)).into_dyn();
                let which = Val::constant(Tensor::int(ElemType::I64, which));
                let at = attrs(vec![("axis", Attribute::i64(axis as i64))]);
                Ok(self.emit(GraphOp::Gather, vec![v, which], at, 1)?.remove(0))
            }
        }
    }
}

/// How finely a scale or zero point varies over its input.
#[derive(Clone, Copy)]
enum Granularity {
    /// Along an axis (not yet checked against the rank: a per-tensor
    /// scale ignores it).
    Axis(i64),
    Block(i64, i64),
}

impl Granularity {
    fn of(a: &Attrs) -> Result<Self> {
        let axis = a.i("axis", 1);
        Ok(match a.i("block_size", 0) {
            0 => Granularity::Axis(axis),
            b if b > 0 => Granularity::Block(axis, b),
            b => {
                return Err(ImportError::invalid(format!(
                    "block_size must not be negative, not {b}"
                )));
            }
        })
    }
}
