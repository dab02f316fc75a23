//! GridSample as gathers. Each output point's source coordinate along
//! each spatial axis comes from the grid element-wise; each tap of the
//! interpolation kernel (one for nearest, two for linear, four for cubic,
//! per axis) becomes an index into the input flattened per channel, read
//! with `graph.gather_elements` and weighted. The arithmetic follows
//! ONNX's reference: denormalized coordinates, out-of-range coordinates
//! clamped (border) or reflected (reflection), taps outside read as zero
//! (zeros). AffineGrid, which makes the grids spatial transformers sample,
//! is a product of a constant grid with the transforms.

use ircc_core::{Attribute, ElemType, Tensor};
use ircc_dialects::graph::GraphOp;

use crate::attrs::Attrs;
use crate::import::{Importer, Val, i64s};
use crate::ops::{attrs, ints_attr};
use crate::proto::NodeProto;
use crate::{ImportError, Result};

/// Keys' cubic convolution parameter, which GridSample fixes.
const CUBIC_A: f64 = -0.75;

#[derive(Clone, Copy, PartialEq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

/// One tap along one axis: its (float) index, and its weight where the
/// kernel has more than one tap.
struct Tap {
    index: Val,
    weight: Option<Val>,
}

impl Importer<'_> {
    /// AffineGrid: for transforms `theta` [N, 2, 3] (or [N, 3, 4]) and
    /// `size` [N, C, H, W] (or [N, C, D, H, W]), each output point's
    /// normalized coordinates (x, y[, z], 1) times its batch's transform:
    /// [N, H, W, 2] (or [N, D, H, W, 3]). The coordinates, -1 to 1 across
    /// each axis (at the corner pixels' centres, or at their outer edges
    /// without `align_corners`), are a constant; `size` must be known.
    pub(crate) fn affine_grid(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["align_corners"])?;
        let theta = self.required(n, 0)?;
        let tt = self.type_of(&theta);
        let size = i64s(
            &self
                .constant_input(n, 1, "size")?
                .ok_or_else(|| ImportError::invalid("missing size"))?,
        );
        let spatial = size.len().saturating_sub(2);
        let fits = matches!(spatial, 2 | 3)
            && tt.elem.is_float()
            && tt.shape == [size[0], spatial as i64, spatial as i64 + 1]
            && size[2..]
                .iter()
                .all(|&d| (1..=ircc_core::limits::MAX_DIM).contains(&d));
        if !fits {
            return Err(ImportError::invalid(format!(
                "AffineGrid takes theta [N, 2, 3] with size [N, C, H, W], or [N, 3, 4] with [N, C, D, H, W], not {tt} with {size:?}"
            )));
        }
        let dims = &size[2..];
        let points = dims.iter().fold(1i64, |n, &d| n.saturating_mul(d));
        // The coordinates are a constant computed here.
        let limit = ircc_core::limits::MAX_FOLDED_ELEMENTS;
        if points > limit / 4 {
            return Err(ImportError::invalid(format!(
                "AffineGrid of {dims:?} points: its coordinates would take more than the {limit} elements a constant computed while importing may"
            )));
        }
        let corners = a.i("align_corners", 0) != 0;
        let coordinate = |i: i64, extent: i64| -> f64 {
            match (corners, extent) {
                (true, 1) => -1.0,
                (true, _) => -1.0 + 2.0 * i as f64 / (extent - 1) as f64,
                (false, _) => -1.0 + (2 * i + 1) as f64 / extent as f64,
            }
        };
        // Row p: the point's coordinates, innermost axis (x) first, then 1.
        let homogeneous = spatial + 1;
        let base = ndarray::ArrayD::from_shape_fn(
            ndarray::IxDyn(&[1, points as usize, homogeneous]),
            |i| {
                let k = i[2];
                if k == spatial {
                    return 1.0;
                }
                // Axis `spatial - 1 - k` of the point's index, row-major.
                let axis = spatial - 1 - k;
                let inner: i64 = dims[axis + 1..].iter().product();
                let at = (i[1] as i64 / inner) % dims[axis];
                coordinate(at, dims[axis])
            },
        );
        let base = Val::constant(Tensor::float(tt.elem, base));
        let transposed = self.transpose(theta, vec![0, 2, 1])?;
        let grid = self.bin(GraphOp::Matmul, base, transposed)?;
        let mut shape = vec![size[0]];
        shape.extend(dims);
        shape.push(spatial as i64);
        Ok(vec![self.reshape(grid, shape)?])
    }

    /// GridSample (opset 16; `linear`/`cubic` are opset 20's names for
    /// `bilinear`/`bicubic`, and opset 20 takes any number of spatial axes).
    pub(crate) fn grid_sample(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["align_corners", "mode", "padding_mode"])?;
        let x = self.required(n, 0)?;
        let grid = self.required(n, 1)?;
        let (xt, gt) = (self.type_of(&x), self.type_of(&grid));
        let k = xt.rank().saturating_sub(2);
        if k == 0 || gt.rank() != k + 2 || gt.shape[0] != xt.shape[0] || gt.shape[k + 1] != k as i64
        {
            return Err(ImportError::invalid(format!(
                "GridSample of {xt} needs a grid [N, ..., {k}] of {k} spatial axes, not {gt}"
            )));
        }
        if xt.shape[2..].contains(&0) {
            return Err(ImportError::invalid(format!(
                "GridSample of {xt} has an empty spatial axis to sample from"
            )));
        }
        if !xt.elem.is_float() || !gt.elem.is_float() {
            return Err(ImportError::unsupported(
                "GridSample of other than floating-point tensors",
            ));
        }
        let mode = match a.s("mode", "linear").as_str() {
            "nearest" => Mode::Nearest,
            "linear" | "bilinear" => Mode::Linear,
            "cubic" | "bicubic" => Mode::Cubic,
            m => {
                return Err(ImportError::invalid(format!(
                    "unknown GridSample mode '{m}'"
                )));
            }
        };
        let padding = match a.s("padding_mode", "zeros").as_str() {
            "zeros" => Padding::Zeros,
            "border" => Padding::Border,
            "reflection" => Padding::Reflection,
            p => return Err(ImportError::invalid(format!("unknown padding_mode '{p}'"))),
        };
        let align = a.i("align_corners", 0) != 0;
        let grid = if gt.elem == xt.elem {
            grid
        } else {
            self.cast(grid, xt.elem)?
        };
        let batch = xt.shape[0];
        let channels = xt.shape[1];
        let dims = &xt.shape[2..];
        let out_dims = &gt.shape[1..=k];
        let points: i64 = out_dims.iter().product();
        let size: i64 = dims.iter().product();
        // Every axis' taps: the grid's last axis lists them x first.
        let mut taps = Vec::new();
        for (i, &len) in dims.iter().enumerate() {
            let c = k - 1 - i;
            let g = self.slice_axis(&grid, -1, c as i64, c as i64 + 1)?;
            let g = self.reshape(g, vec![batch, points])?;
            let (lo, hi) = if align {
                (0.0, (len - 1) as f64)
            } else {
                (-0.5, len as f64 - 0.5)
            };
            let coord = self.source_coordinate(g, len, align, mode, padding, (lo, hi))?;
            taps.push(self.taps(coord, mode)?);
        }
        let flat = self.reshape(x, vec![batch, channels, size])?;
        let strides: Vec<i64> = (0..k).map(|i| dims[i + 1..].iter().product()).collect();
        let mut sum: Option<Val> = None;
        let combos: usize = taps.iter().map(Vec::len).product();
        for combo in 0..combos {
            let mut rest = combo;
            let (mut linear, mut weight, mut valid) = (None::<Val>, None::<Val>, None::<Val>);
            for (i, axis_taps) in taps.iter().enumerate() {
                let tap = &axis_taps[rest % axis_taps.len()];
                rest /= axis_taps.len();
                let (index, inside) = self.tap_index(&tap.index, dims[i], padding, align)?;
                let scaled = if strides[i] == 1 {
                    index
                } else {
                    let s = self.scalar_like(&index, strides[i] as f64);
                    self.bin(GraphOp::Mul, index, s)?
                };
                linear = Some(self.fold_with(GraphOp::Add, linear, scaled)?);
                if let Some(w) = &tap.weight {
                    weight = Some(self.fold_with(GraphOp::Mul, weight, w.clone())?);
                }
                if let Some(inside) = inside {
                    valid = Some(self.fold_with(GraphOp::And, valid, inside)?);
                }
            }
            let linear = linear.expect("at least one spatial axis");
            let linear = self.reshape(linear, vec![batch, 1, points])?;
            let at = attrs(vec![("shape", ints_attr(vec![batch, channels, points]))]);
            let linear = self.emit(GraphOp::Expand, vec![linear], at, 1)?.remove(0);
            let at = attrs(vec![("axis", Attribute::i64(2))]);
            let mut term = self
                .emit(GraphOp::GatherElements, vec![flat.clone(), linear], at, 1)?
                .remove(0);
            if let Some(w) = weight {
                let w = self.reshape(w, vec![batch, 1, points])?;
                term = self.bin(GraphOp::Mul, term, w)?;
            }
            if let Some(valid) = valid {
                let valid = self.reshape(valid, vec![batch, 1, points])?;
                let zero = self.scalar_like(&term, 0.0);
                term = self.select(valid, term, zero)?;
            }
            sum = Some(self.fold_with(GraphOp::Add, sum, term)?);
        }
        let mut shape = vec![batch, channels];
        shape.extend_from_slice(out_dims);
        let y = self.reshape(sum.expect("at least one tap"), shape)?;
        Ok(vec![y])
    }

    /// `acc op v`, or `v` for the first.
    fn fold_with(&mut self, op: GraphOp, acc: Option<Val>, v: Val) -> Result<Val> {
        match acc {
            Some(acc) => self.bin(op, acc, v),
            None => Ok(v),
        }
    }

    /// A normalized grid coordinate (-1 to 1) as a coordinate along an
    /// axis of `len`, rounded for nearest, and brought inside [lo, hi] by
    /// clamping (border) or reflection where it falls outside.
    fn source_coordinate(
        &mut self,
        g: Val,
        len: i64,
        align: bool,
        mode: Mode,
        padding: Padding,
        (lo, hi): (f64, f64),
    ) -> Result<Val> {
        let one = self.scalar_like(&g, 1.0);
        let shifted = self.bin(GraphOp::Add, g, one)?;
        let x = if align {
            let s = self.scalar_like(&shifted, (len - 1) as f64 / 2.0);
            self.bin(GraphOp::Mul, shifted, s)?
        } else {
            // ((g + 1) len - 1) / 2
            let s = self.scalar_like(&shifted, len as f64 / 2.0);
            let scaled = self.bin(GraphOp::Mul, shifted, s)?;
            let half = self.scalar_like(&scaled, 0.5);
            self.bin(GraphOp::Sub, scaled, half)?
        };
        let x = if mode == Mode::Nearest {
            self.un(GraphOp::Round, x)?
        } else {
            x
        };
        match padding {
            Padding::Zeros => Ok(x),
            Padding::Border => {
                let below = self.bin(GraphOp::Less, x.clone(), self.scalar_like(&x, lo))?;
                let above = self.bin(GraphOp::Greater, x.clone(), self.scalar_like(&x, hi))?;
                let outside = self.bin(GraphOp::Or, below, above)?;
                let clamped = self.clip(x.clone(), (0.0, (len - 1) as f64))?;
                self.select(outside, clamped, x)
            }
            Padding::Reflection => self.reflect(x, lo, hi),
        }
    }

    /// The taps of the kernel around coordinate `x`.
    fn taps(&mut self, x: Val, mode: Mode) -> Result<Vec<Tap>> {
        if mode == Mode::Nearest {
            return Ok(vec![Tap {
                index: x,
                weight: None,
            }]);
        }
        let left = self.un(GraphOp::Floor, x.clone())?;
        let r = self.bin(GraphOp::Sub, x, left.clone())?;
        let at = |imp: &mut Self, offset: f64| -> Result<Val> {
            if offset == 0.0 {
                return Ok(left.clone());
            }
            let o = imp.scalar_like(&left, offset);
            imp.bin(GraphOp::Add, left.clone(), o)
        };
        // Polynomials in r as Horner steps: ((c0 t + c1) t + c2) t + c3.
        let poly = |imp: &mut Self, t: Val, c: [f64; 4]| -> Result<Val> {
            let mut acc = imp.scalar_like(&t, c[0]);
            for &ci in &c[1..] {
                let m = imp.bin(GraphOp::Mul, acc, t.clone())?;
                acc = imp.bin(GraphOp::Add, m, imp.scalar_like(&t, ci))?;
            }
            Ok(acc)
        };
        let one_minus = |imp: &mut Self, v: Val, c: f64| -> Result<Val> {
            let one = imp.scalar_like(&v, c);
            imp.bin(GraphOp::Sub, one, v)
        };
        match mode {
            Mode::Linear => {
                let w0 = one_minus(self, r.clone(), 1.0)?;
                Ok(vec![
                    Tap {
                        index: at(self, 0.0)?,
                        weight: Some(w0),
                    },
                    Tap {
                        index: at(self, 1.0)?,
                        weight: Some(r),
                    },
                ])
            }
            _ => {
                let a = CUBIC_A;
                // Taps at distance 1..2 and 0..1 from the coordinate.
                let far = [a, -5.0 * a, 8.0 * a, -4.0 * a];
                let near = [a + 2.0, -(a + 3.0), 0.0, 1.0];
                let r1 = self.bin(GraphOp::Add, r.clone(), self.scalar_like(&r, 1.0))?;
                let l1 = one_minus(self, r.clone(), 1.0)?;
                let l2 = one_minus(self, r.clone(), 2.0)?;
                let weights = [
                    poly(self, r1, far)?,
                    poly(self, r, near)?,
                    poly(self, l1, near)?,
                    poly(self, l2, far)?,
                ];
                let mut taps = Vec::new();
                for (o, w) in (-1..=2).zip(weights) {
                    taps.push(Tap {
                        index: at(self, o as f64)?,
                        weight: Some(w),
                    });
                }
                Ok(taps)
            }
        }
    }

    /// A tap's integer index into an axis of `len`, and for zeros padding
    /// whether it lies inside (outside reads zero).
    fn tap_index(
        &mut self,
        t: &Val,
        len: i64,
        padding: Padding,
        align: bool,
    ) -> Result<(Val, Option<Val>)> {
        let last = (len - 1) as f64;
        let (t, inside) = match padding {
            Padding::Zeros => {
                let ge = self.bin(GraphOp::Less, t.clone(), self.scalar_like(t, 0.0))?;
                let ge = self.un(GraphOp::Not, ge)?;
                let lt = self.bin(GraphOp::Greater, t.clone(), self.scalar_like(t, last))?;
                let lt = self.un(GraphOp::Not, lt)?;
                (t.clone(), Some(self.bin(GraphOp::And, ge, lt)?))
            }
            Padding::Border => (t.clone(), None),
            Padding::Reflection => {
                let (lo, hi) = if align {
                    (0.0, last)
                } else {
                    (-0.5, len as f64 - 0.5)
                };
                (self.reflect(t.clone(), lo, hi)?, None)
            }
        };
        let t = self.clip(t, (0.0, last))?;
        Ok((self.cast(t, ElemType::I32)?, inside))
    }

    /// `x` reflected at `lo` and `hi` until it lies between them.
    fn reflect(&mut self, x: Val, lo: f64, hi: f64) -> Result<Val> {
        let range = hi - lo;
        if range <= 0.0 {
            return self.clip(x, (lo, hi));
        }
        let c = |imp: &Self, v: f64| imp.scalar_like(&x, v);
        let below = self.bin(GraphOp::Less, x.clone(), c(self, lo))?;
        let above = self.bin(GraphOp::Greater, x.clone(), c(self, hi))?;
        // How far past the nearer edge, in whole ranges and the rest.
        let from_lo = self.bin(GraphOp::Sub, c(self, lo), x.clone())?;
        let from_hi = self.bin(GraphOp::Sub, x.clone(), c(self, hi))?;
        let past = self.select(below.clone(), from_lo, from_hi)?;
        let ranges = self.bin(GraphOp::Div, past.clone(), c(self, range))?;
        let ranges = self.un(GraphOp::Floor, ranges)?;
        let whole = self.bin(GraphOp::Mul, ranges.clone(), c(self, range))?;
        let rest = self.bin(GraphOp::Sub, past, whole)?;
        let halves = self.bin(GraphOp::Mul, ranges.clone(), c(self, 0.5))?;
        let halves = self.un(GraphOp::Floor, halves)?;
        let twice = self.bin(GraphOp::Mul, halves, c(self, 2.0))?;
        let odd = self.bin(GraphOp::Sub, ranges, twice)?;
        let even = self.bin(GraphOp::Equal, odd, c(self, 0.0))?;
        let up = self.bin(GraphOp::Add, c(self, lo), rest.clone())?;
        let down = self.bin(GraphOp::Sub, c(self, hi), rest)?;
        let below_value = self.select(even.clone(), up.clone(), down.clone())?;
        let above_value = self.select(even, down, up)?;
        let inside_or_above = self.select(above, above_value, x)?;
        self.select(below, below_value, inside_or_above)
    }
}
