//! ONNX's signal operators as compositions of graph ops: a DFT along one
//! axis is two products with constant cosine and sine matrices (exact up
//! to the rounding of their sums, and the product template the fastest
//! kernel ircc has), an STFT is a gather of its frames, a window and that
//! DFT; the windows and the mel filter bank are constants, computed from
//! their sizes, which must be known (constants, or inputs bound to their
//! values).

use std::f64::consts::PI;

use ircc_core::{Attribute, ElemType, Tensor};
use ircc_dialects::graph::GraphOp;
use ndarray::{ArrayD, IxDyn};

use crate::attrs::Attrs;
use crate::import::{Importer, Val, scalar_f64, scalar_i64};
use crate::ops::{attrs, ints_attr, rank_axis};
use crate::proto::NodeProto;
use crate::tensor::elem_type;
use crate::{ImportError, Result};

use ircc_core::limits::MAX_FOLDED_ELEMENTS;

/// The longest transform imported, whose two matrices (each at most
/// `n * n` elements) stay within a constant computed while importing.
const MAX_DFT_LENGTH: i64 = 1 << 11;

/// How one transform along an axis goes.
struct Transform {
    /// The transform's length: the signal is cut or zero-padded to it.
    length: i64,
    inverse: bool,
    onesided: bool,
}

impl Importer<'_> {
    /// DFT: the (inverse) discrete Fourier transform along `axis` of a real
    /// (`[..., 1]`) or complex (`[..., 2]`) signal, a complex result
    /// (`[..., 2]`), half of it where `onesided`; an inverse `onesided`
    /// transform takes half a spectrum and gives a real signal (`[..., 1]`),
    /// as numpy's irfft.
    pub(crate) fn dft(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["axis", "inverse", "onesided"])?;
        let x = self.required(n, 0)?;
        let ty = self.type_of(&x);
        let rank = ty.rank();
        let axis = if self.opset >= 20 {
            match self.constant_input(n, 2, "axis")? {
                Some(t) => scalar_i64(&t, "axis")?,
                None => -2,
            }
        } else {
            a.i("axis", 1)
        };
        let axis = rank_axis(axis, rank)?;
        if !ty.elem.is_float()
            || rank < 2
            || !matches!(ty.shape[rank - 1], 1 | 2)
            || axis >= rank - 1
        {
            return Err(ImportError::invalid(format!(
                "DFT takes floats of shape [..., 1] or [..., 2] and an axis before the last, not {ty} and axis {axis}"
            )));
        }
        let (inverse, onesided) = (a.i("inverse", 0) != 0, a.i("onesided", 0) != 0);
        let length = match self.constant_input(n, 1, "dft_length")? {
            Some(t) => scalar_i64(&t, "dft_length")?,
            None if inverse && onesided => 2 * (ty.shape[axis] - 1),
            None => ty.shape[axis],
        };
        let t = Transform {
            length,
            inverse,
            onesided,
        };
        Ok(vec![self.transform_along(x, axis, &t)?])
    }

    /// STFT: the DFT of each frame of `frame_length` steps, `frame_step`
    /// apart, of a signal `[batch, steps, 1 or 2]`, each weighted by
    /// `window` (ones where none is given): `[batch, frames, bins, 2]`.
    /// A real signal may also come as `[batch, steps]`: PyTorch's exporter
    /// writes `torch.stft` so, and onnxruntime takes it.
    pub(crate) fn stft(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["onesided"])?;
        let mut signal = self.required(n, 0)?;
        let mut ty = self.type_of(&signal);
        if ty.elem.is_float() && ty.rank() == 2 {
            signal = self.reshape(signal, vec![ty.shape[0], ty.shape[1], 1])?;
            ty = self.type_of(&signal);
        }
        if !ty.elem.is_float() || ty.rank() != 3 || !matches!(ty.shape[2], 1 | 2) {
            return Err(ImportError::invalid(format!(
                "STFT takes a float signal [batch, steps, 1 or 2] or [batch, steps], not {ty}"
            )));
        }
        let step = match self.constant_input(n, 1, "frame_step")? {
            Some(t) => scalar_i64(&t, "frame_step")?,
            None => return Err(ImportError::invalid("missing frame_step")),
        };
        let window = self.input(n, 2)?;
        let length = match (self.constant_input(n, 3, "frame_length")?, &window) {
            (Some(t), _) => scalar_i64(&t, "frame_length")?,
            (None, Some(w)) => self.type_of(w).shape.first().copied().unwrap_or(0),
            (None, None) => ty.shape[1],
        };
        let steps = ty.shape[1];
        if step <= 0 || length <= 0 || length > steps {
            return Err(ImportError::invalid(format!(
                "STFT's frames of {length} steps, {step} apart, do not fit a signal of {steps}"
            )));
        }
        if let Some(w) = &window {
            let wt = self.type_of(w);
            if wt.shape != [length] {
                return Err(ImportError::invalid(format!(
                    "STFT's window is {wt}, where its frames have {length} steps"
                )));
            }
        }
        let frames = 1 + (steps - length) / step;
        if frames * length > MAX_FOLDED_ELEMENTS || length > MAX_DFT_LENGTH {
            return Err(ImportError::invalid(format!(
                "STFT of {frames} frames of {length} steps: its frame index and transform would pass what a constant computed while importing may hold (frames of up to {MAX_DFT_LENGTH} steps)"
            )));
        }
        // [batch, frames * length, c] gathered along the steps, then
        // [batch, frames, length, c].
        let index = ArrayD::from_shape_fn(IxDyn(&[(frames * length) as usize]), |i| {
            (i[0] as i64 / length) * step + i[0] as i64 % length
        });
        let at = attrs(vec![("axis", Attribute::i64(1))]);
        let index = Val::constant(Tensor::int(ElemType::I64, index));
        let gathered = self
            .emit(GraphOp::Gather, vec![signal, index], at, 1)?
            .remove(0);
        let channels = ty.shape[2];
        let mut framed = self.reshape(gathered, vec![ty.shape[0], frames, length, channels])?;
        if let Some(w) = window {
            let w = self.reshape(w, vec![1, 1, length, 1])?;
            framed = self.bin(GraphOp::Mul, framed, w)?;
        }
        let t = Transform {
            length,
            inverse: false,
            onesided: a.i("onesided", 1) != 0,
        };
        Ok(vec![self.transform_along(framed, 2, &t)?])
    }

    /// `x` (`[..., 1 or 2]`) transformed along `axis`: the axis moved just
    /// before the last, the rest flattened into rows, each row's real and
    /// imaginary parts multiplied by the transform's matrices, and the
    /// result put back in place.
    fn transform_along(&mut self, x: Val, axis: usize, t: &Transform) -> Result<Val> {
        let ty = self.type_of(&x);
        let rank = ty.rank();
        let channels = ty.shape[rank - 1];
        if t.length < 1 || t.length > MAX_DFT_LENGTH {
            return Err(ImportError::invalid(format!(
                "a DFT of length {} (1 to {MAX_DFT_LENGTH} are imported)",
                t.length
            )));
        }
        // The axis just before the last; the others, in order, before it.
        let mut perm: Vec<i64> = (0..rank as i64 - 1).filter(|&d| d != axis as i64).collect();
        perm.extend([axis as i64, rank as i64 - 1]);
        let moved = self.transpose(x, perm.clone())?;
        let outer: Vec<i64> = perm[..rank - 2]
            .iter()
            .map(|&d| ty.shape[d as usize])
            .collect();
        let rows: i64 = outer.iter().product();
        let size = ty.shape[axis];
        let flat = self.reshape(moved, vec![rows, size, channels])?;
        let part = |imp: &mut Self, c: i64| -> Result<Val> {
            let p = imp.slice_axis(&flat, 2, c, c + 1)?;
            imp.reshape(p, vec![rows, size])
        };
        let re = part(self, 0)?;
        let im = if channels == 2 {
            Some(part(self, 1)?)
        } else {
            None
        };
        // The signal (or spectrum) cut or zero-padded to what is summed.
        let taken = if t.inverse && t.onesided {
            t.length / 2 + 1
        } else {
            t.length
        };
        let fit = |imp: &mut Self, v: Val| -> Result<Val> {
            match size.cmp(&taken) {
                std::cmp::Ordering::Greater => imp.slice_axis(&v, 1, 0, taken),
                std::cmp::Ordering::Less => {
                    let at = attrs(vec![("pads", ints_attr(vec![0, 0, 0, taken - size]))]);
                    Ok(imp.emit(GraphOp::Pad, vec![v], at, 1)?.remove(0))
                }
                std::cmp::Ordering::Equal => Ok(v),
            }
        };
        let re = fit(self, re)?;
        let im = im.map(|v| fit(self, v)).transpose()?;
        let (cos, sin) = matrices(t, ty.elem);
        let (cos, sin) = (Val::constant(cos), Val::constant(sin));
        let product =
            |imp: &mut Self, v: &Val, m: &Val| imp.bin(GraphOp::Matmul, v.clone(), m.clone());
        // (re + i im) times (cos + i sin), sin carrying the sign: the
        // forward transform's e^-i, the inverse's e^+i.
        let mut out_re = product(self, &re, &cos)?;
        if let Some(im) = &im {
            let s = product(self, im, &sin)?;
            out_re = self.bin(GraphOp::Sub, out_re, s)?;
        }
        let bins = self.type_of(&out_re).shape[1];
        let parts = if t.inverse && t.onesided {
            vec![out_re]
        } else {
            let mut out_im = product(self, &re, &sin)?;
            if let Some(im) = &im {
                let c = product(self, im, &cos)?;
                out_im = self.bin(GraphOp::Add, out_im, c)?;
            }
            vec![out_re, out_im]
        };
        let parts: Vec<Val> = parts
            .into_iter()
            .map(|p| self.reshape(p, vec![rows, bins, 1]))
            .collect::<Result<_>>()?;
        let joined = self.concat(parts, 2)?;
        let width = self.type_of(&joined).shape[2];
        let mut shape = outer;
        shape.extend([bins, width]);
        let shaped = self.reshape(joined, shape)?;
        let mut back = vec![0i64; rank];
        for (i, &p) in perm.iter().enumerate() {
            back[p as usize] = i as i64;
        }
        self.transpose(shaped, back)
    }

    /// HannWindow, HammingWindow, BlackmanWindow: a constant of `size`
    /// elements of `output_datatype` (f32 by default), periodic unless
    /// `periodic` is 0.
    pub(crate) fn window(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["output_datatype", "periodic"])?;
        let size = match self.constant_input(n, 0, "size")? {
            Some(t) => scalar_i64(&t, "size")?,
            None => return Err(ImportError::invalid("missing size")),
        };
        if !(0..=MAX_FOLDED_ELEMENTS).contains(&size) {
            return Err(ImportError::invalid(format!(
                "a window of {size} elements (0 to {MAX_FOLDED_ELEMENTS}, a constant computed while importing)"
            )));
        }
        let elem = elem_type(a.i("output_datatype", 1) as i32)?;
        let span = if a.i("periodic", 1) != 0 {
            size
        } else {
            size - 1
        } as f64;
        let value = |i: f64| -> f64 {
            let x = 2.0 * PI * i / span;
            match n.op_type.as_str() {
                "HannWindow" => (PI * i / span).sin().powi(2),
                "HammingWindow" => 25.0 / 46.0 - (21.0 / 46.0) * x.cos(),
                _ => 0.42 - 0.5 * x.cos() + 0.08 * (2.0 * x).cos(),
            }
        };
        let w = ArrayD::from_shape_fn(IxDyn(&[size as usize]), |i| value(i[0] as f64));
        Ok(vec![Val::constant(number_tensor(elem, w))])
    }

    /// MelWeightMatrix: `[dft_length / 2 + 1, num_mel_bins]` triangles on
    /// the mel scale between the edge frequencies, a constant computed as
    /// ONNX's reference computes it.
    pub(crate) fn mel_weight_matrix(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["output_datatype"])?;
        let mut given = Vec::new();
        for (i, what) in [
            "num_mel_bins",
            "dft_length",
            "sample_rate",
            "lower_edge_hertz",
            "upper_edge_hertz",
        ]
        .iter()
        .enumerate()
        {
            let t = self
                .constant_input(n, i, what)?
                .ok_or_else(|| ImportError::invalid(format!("missing {what}")))?;
            // One value, checked as the integer inputs are.
            scalar_i64(&t, what)?;
            given.push(scalar_f64(&t).unwrap_or(0.0));
        }
        let [mels, dft_length, rate, low, high] = given[..] else {
            unreachable!("five inputs");
        };
        let (mels, dft_length) = (mels as i64, dft_length as i64);
        if !(1..=4096).contains(&mels)
            || !(1..=MAX_DFT_LENGTH).contains(&dft_length)
            || rate <= 0.0
            || !rate.is_finite()
        {
            return Err(ImportError::invalid(format!(
                "MelWeightMatrix of {mels} bins, a DFT of {dft_length} and a sample rate of {rate}"
            )));
        }
        let spectrum = (dft_length / 2 + 1) as usize;
        let mel = |hz: f64| 2595.0 * (hz / 700.0).ln_1p() / 10f64.ln();
        let step = (mel(high) - mel(low)) / (mels + 2) as f64;
        // Bins outside the spectrum set nothing: clamped just past it, so
        // that no loop runs far.
        let edges: Vec<i64> = (0..mels + 2)
            .map(|i| {
                let hz = 700.0 * ((i as f64 * step + mel(low)) / 2595.0 * 10f64.ln()).exp_m1();
                let bin = ((dft_length + 1) as f64 * hz / rate).floor();
                bin.clamp(-1.0, spectrum as f64) as i64
            })
            .collect();
        let mut out = ArrayD::<f64>::zeros(IxDyn(&[spectrum, mels as usize]));
        let mut set = |j: i64, i: usize, v: f64| {
            if let Some(x) = usize::try_from(j).ok().and_then(|j| out.get_mut([j, i])) {
                *x = v;
            }
        };
        for i in 0..mels as usize {
            let (left, center, right) = (edges[i], edges[i + 1], edges[i + 2]);
            if center == left {
                set(center, i, 1.0);
            } else {
                for j in left..=center {
                    set(j, i, (j - left) as f64 / (center - left) as f64);
                }
            }
            for j in center..right {
                set(j, i, (right - j) as f64 / (right - center) as f64);
            }
        }
        let elem = elem_type(a.i("output_datatype", 1) as i32)?;
        Ok(vec![Val::constant(number_tensor(elem, out))])
    }
}

/// The transform's matrices, rows the summed index (`taken` of them),
/// columns the result's: cos and the sine with the transform's sign, the
/// inverse scaled by 1 / length; the inverse one-sided (irfft) counts each
/// bin but the first and the middle twice, as its mirror image.
fn matrices(t: &Transform, elem: ElemType) -> (Tensor, Tensor) {
    let l = t.length;
    let (rows, cols) = match (t.inverse, t.onesided) {
        (true, true) => (l / 2 + 1, l),
        (false, true) => (l, l / 2 + 1),
        _ => (l, l),
    };
    let scale = if t.inverse { 1.0 / l as f64 } else { 1.0 };
    let sign = if t.inverse { 1.0 } else { -1.0 };
    let weight = |k: i64| -> f64 {
        if t.inverse && t.onesided && k != 0 && 2 * k != l {
            2.0
        } else {
            1.0
        }
    };
    let angle = |i: &IxDyn| {
        // The exact product of indices mod l keeps the angle small.
        let phase = (i[0] as i64 * i[1] as i64) % l;
        2.0 * PI * phase as f64 / l as f64
    };
    let shape = IxDyn(&[rows as usize, cols as usize]);
    let cos = ArrayD::from_shape_fn(shape.clone(), |i| {
        scale * weight(i[0] as i64) * angle(&i).cos()
    });
    let sin = ArrayD::from_shape_fn(shape, |i| {
        sign * scale * weight(i[0] as i64) * angle(&i).sin()
    });
    (Tensor::float(elem, cos), Tensor::float(elem, sin))
}

/// `values` as a tensor of `elem`, rounded where it is an integer type.
fn number_tensor(elem: ElemType, values: ArrayD<f64>) -> Tensor {
    if elem.is_float() {
        Tensor::float(elem, values)
    } else {
        Tensor::int(elem, values.mapv(|v| v.round() as i64))
    }
}
