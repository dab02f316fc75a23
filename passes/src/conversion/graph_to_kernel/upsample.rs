//! Ops whose output is larger than their input, computed per output
//! element by finding the inputs that reach it: transposed convolution
//! (the input positions whose window covers the output) and resize (the
//! nearest input, or the linear taps around the source coordinate).

use ircc_core::{ElemType, OpId, Type, ValueId};
use ircc_dialects::graph;
use ircc_dialects::graph::ops::{
    ResizeCoordinateTransformationMode as Coordinates, ResizeMode, ResizeNearestMode as Rounding,
};
use ircc_dialects::kernel::ops::{BinaryFn, CmpPred, UnaryFn};

use super::lowering::tensor_shape;
use super::lowering::{Ix, KernelBuilder};

type R<T> = Result<T, String>;

impl KernelBuilder<'_> {
    /// `y[n, co, o] = Σ x[n, ci, i] · w[ci, co mod M, k]` over the group's
    /// input channels `ci` and kernel offsets `k`, where `i·s + k·d - pad =
    /// o`: an offset contributes where `o + pad - k·d` is a non-negative
    /// multiple of the stride below the input's extent.
    pub(super) fn conv_transpose_at(&mut self, op: OpId, idx: &[Ix]) -> R<ValueId> {
        let conv = self.conv_parts(op)?;
        let (sx, sw, win) = (&conv.sx, &conv.sw, &conv.window);
        let (cg, mg) = (sx[1] / conv.group, sw[1]);
        let first_channel = idx[1].clone().floor_div(Ix::constant(mg)) * Ix::constant(cg);
        let out_channel = idx[1].clone().modulo(Ix::constant(mg));
        let mut extents = vec![cg];
        extents.extend(&sw[2..]);
        let at = idx.to_vec();
        self.conv_sum(&conv, idx, &extents, &mut |kb, ivs| {
            let mut flags = Vec::new();
            let mut positions = Vec::new();
            for d in 0..sx.len() - 2 {
                let reach = at[2 + d].clone() + Ix::constant(win.pads[d])
                    - ivs[1 + d].clone() * Ix::constant(win.dilations[d]);
                let stride = win.strides[d];
                let i = reach.clone().floor_div(Ix::constant(stride));
                flags.push(kb.index_cmp(CmpPred::Ge, &reach, 0));
                if stride > 1 {
                    let rest = reach.modulo(Ix::constant(stride));
                    flags.push(kb.index_cmp(CmpPred::Eq, &rest, 0));
                }
                flags.push(kb.index_cmp(CmpPred::Lt, &i, sx[2 + d]));
                positions.push(i);
            }
            let channel = first_channel.clone() + ivs[0].clone();
            let mut ix = vec![at[0].clone(), channel.clone()];
            ix.extend(positions);
            let mut iw = vec![channel, out_channel.clone()];
            iw.extend(ivs[1..].iter().cloned());
            Ok((ix, iw, Some(kb.ir.all(flags))))
        })
    }

    /// Resize by the interpreter's rules: each output coordinate maps to a
    /// source coordinate by `coordinate_transformation_mode`; `nearest`
    /// rounds it by `nearest_mode`, `linear` blends the two inputs around it
    /// on every resized axis. Axes the resize leaves alone read in place.
    pub(super) fn resize_at(&mut self, op: OpId, idx: &[Ix]) -> R<ValueId> {
        let x = self.operand(op, 0);
        let y = self.m().op(op).results[0];
        let (sx, sy) = (tensor_shape(self, x), tensor_shape(self, y));
        let resize = graph::ops::Resize::new(self.m(), op).ok_or("a graph.resize")?;
        let scales: Vec<f64> = match resize.scales() {
            Some(s) => s,
            None => sy
                .iter()
                .zip(&sx)
                .map(|(&o, &i)| o as f64 / i as f64)
                .collect(),
        };
        let ctm = resize.coordinate_transformation_mode();
        let nearest = resize.mode() == ResizeMode::Nearest;
        let rounding = resize.nearest_mode();
        let resized: Vec<usize> = (0..sx.len())
            .filter(|&d| sx[d] != sy[d] || scales[d] != 1.0)
            .collect();
        let mut coords = Vec::new();
        for &d in &resized {
            let c = self.source_coord(ctm, &idx[d], sx[d], sy[d], scales[d]);
            let last = self.ir.constant((sx[d] - 1) as f64, ElemType::F32);
            let zero = self.ir.constant(0.0, ElemType::F32);
            let c = if nearest {
                let r = match rounding {
                    Rounding::Floor => self.ir.unary(UnaryFn::Floor, c),
                    Rounding::Ceil => self.ir.unary(UnaryFn::Ceil, c),
                    Rounding::RoundPreferCeil => {
                        let half = self.ir.constant(0.5, ElemType::F32);
                        let up = self.ir.binary(BinaryFn::Add, c, half);
                        self.ir.unary(UnaryFn::Floor, up)
                    }
                    Rounding::RoundPreferFloor => {
                        let half = self.ir.constant(0.5, ElemType::F32);
                        let down = self.ir.binary(BinaryFn::Sub, c, half);
                        self.ir.unary(UnaryFn::Ceil, down)
                    }
                };
                let r = self.ir.binary(BinaryFn::Max, r, zero);
                self.ir.binary(BinaryFn::Min, r, last)
            } else {
                let c = self.ir.binary(BinaryFn::Max, c, zero);
                self.ir.binary(BinaryFn::Min, c, last)
            };
            coords.push(c);
        }
        let at = |kb: &mut Self, picks: &[ValueId]| -> Vec<Ix> {
            let mut src = idx.to_vec();
            for (&d, &p) in resized.iter().zip(picks) {
                let i = kb.ir.cast(p, Type::Scalar(ElemType::I32));
                let i = kb.ir.cast(i, Type::Index);
                src[d] = kb.var(i, sx[d]);
            }
            src
        };
        if nearest {
            let src = at(self, &coords);
            return self.value_at(x, &src);
        }
        // Linear: the corners of the cell around the coordinate, weighted
        // by the distance to the opposite corner on each axis.
        let mut taps = Vec::new();
        for (&c, &d) in coords.iter().zip(&resized) {
            let low = self.ir.unary(UnaryFn::Floor, c);
            let one = self.ir.constant(1.0, ElemType::F32);
            let last = self.ir.constant((sx[d] - 1) as f64, ElemType::F32);
            let next = self.ir.binary(BinaryFn::Add, low, one);
            let high = self.ir.binary(BinaryFn::Min, next, last);
            let t = self.ir.binary(BinaryFn::Sub, c, low);
            let s = self.ir.binary(BinaryFn::Sub, one, t);
            taps.push([(low, s), (high, t)]);
        }
        let mut acc = self.ir.constant(0.0, ElemType::F32);
        for corner in 0..(1usize << taps.len()) {
            let mut weight = self.ir.constant(1.0, ElemType::F32);
            let mut picks = Vec::new();
            for (k, tap) in taps.iter().enumerate() {
                let (p, w) = tap[corner >> k & 1];
                weight = self.ir.binary(BinaryFn::Mul, weight, w);
                picks.push(p);
            }
            let src = at(self, &picks);
            let v = self.value_at(x, &src)?;
            let v = self.ir.cast(v, Type::Scalar(ElemType::F32));
            let term = self.ir.binary(BinaryFn::Mul, weight, v);
            acc = self.ir.binary(BinaryFn::Add, acc, term);
        }
        Ok(self.ir.cast(acc, Type::Scalar(self.float)))
    }

    /// The source coordinate (f32) of output index `o` on one axis.
    fn source_coord(
        &mut self,
        mode: Coordinates,
        o: &Ix,
        n_in: i64,
        n_out: i64,
        scale: f64,
    ) -> ValueId {
        let o = self.apply(o);
        let o = self.ir.cast(o, Type::Scalar(ElemType::I32));
        let o = self.ir.cast(o, Type::Scalar(ElemType::F32));
        match mode {
            Coordinates::Asymmetric => {
                let s = self.ir.constant(scale, ElemType::F32);
                self.ir.binary(BinaryFn::Div, o, s)
            }
            Coordinates::AlignCorners if n_in as f64 * scale > 1.0 => {
                let f = self.ir.constant(
                    (n_in - 1) as f64 / (n_in as f64 * scale - 1.0),
                    ElemType::F32,
                );
                self.ir.binary(BinaryFn::Mul, o, f)
            }
            Coordinates::AlignCorners => self.ir.constant(0.0, ElemType::F32),
            Coordinates::PytorchHalfPixel if n_out <= 1 => self.ir.constant(0.0, ElemType::F32),
            Coordinates::HalfPixel | Coordinates::PytorchHalfPixel => {
                let half = self.ir.constant(0.5, ElemType::F32);
                let s = self.ir.constant(scale, ElemType::F32);
                let shifted = self.ir.binary(BinaryFn::Add, o, half);
                let scaled = self.ir.binary(BinaryFn::Div, shifted, s);
                self.ir.binary(BinaryFn::Sub, scaled, half)
            }
        }
    }
}
