//! Resize. Nearest and linear sampling on the usual coordinate maps become
//! `graph.resize`; every other form (cubic, antialiased, `exclude_outside`,
//! `half_pixel_symmetric`, `tf_crop_and_resize`, a kept aspect ratio) is
//! separable, so each resized axis becomes a product with a constant
//! [output, input] matrix of interpolation weights, computed here as
//! ONNX's reference computes them.

use ircc_core::limits::MAX_FOLDED_ELEMENTS;
use ircc_core::{Attribute, ElemType, Tensor};
use ircc_dialects::graph::GraphOp;
use ndarray::{Array2, ArrayD, IxDyn};

use crate::attrs::Attrs;
use crate::import::{Importer, Val, i64s};
use crate::ops::{attrs, ints_attr, rank_axis};
use crate::proto::NodeProto;
use crate::{ImportError, Result};

/// How one output coordinate maps to the input
/// (`coordinate_transformation_mode`).
#[derive(Clone, Copy, PartialEq)]
enum CoordinateMap {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfCropAndResize,
}

impl CoordinateMap {
    fn parse(s: &str) -> Result<CoordinateMap> {
        Ok(match s {
            "half_pixel" => CoordinateMap::HalfPixel,
            "half_pixel_symmetric" => CoordinateMap::HalfPixelSymmetric,
            "pytorch_half_pixel" => CoordinateMap::PytorchHalfPixel,
            "align_corners" => CoordinateMap::AlignCorners,
            "asymmetric" => CoordinateMap::Asymmetric,
            "tf_crop_and_resize" => CoordinateMap::TfCropAndResize,
            other => {
                return Err(ImportError::invalid(format!(
                    "unknown coordinate_transformation_mode '{other}'"
                )));
            }
        })
    }
}

/// The sampling kernel (`mode`, `antialias`, `cubic_coeff_a`,
/// `nearest_mode`).
#[derive(Clone, PartialEq)]
enum Kernel {
    Nearest(String),
    Linear { antialias: bool },
    Cubic { antialias: bool, a: f64 },
}

impl Kernel {
    /// The weights of the taps around a coordinate `ratio` past the tap
    /// on its left (in (0, 1]), for an axis scaled by `scale`.
    fn weights(&self, ratio: f64, scale: f64) -> Vec<f64> {
        // Antialiasing widens the kernel only when downsampling.
        let scale = scale.min(1.0);
        match self {
            Kernel::Nearest(mode) => {
                let right = match mode.as_str() {
                    _ if ratio == 1.0 => true,
                    "round_prefer_ceil" => ratio >= 0.5,
                    "floor" => false,
                    "ceil" => true,
                    _ => ratio > 0.5,
                };
                vec![f64::from(u8::from(!right)), f64::from(u8::from(right))]
            }
            Kernel::Linear { antialias: false } => vec![1.0 - ratio, ratio],
            Kernel::Linear { antialias: true } => {
                let start = (-1.0 / scale).floor() as i64 + 1;
                let taps: Vec<f64> = (start..2 - start)
                    .map(|i| (1.0 - ((i as f64 - ratio) * scale).abs()).clamp(0.0, 1.0))
                    .collect();
                normalized(taps)
            }
            Kernel::Cubic {
                antialias: false,
                a,
            } => {
                let a = *a;
                let far = |t: f64| ((a * t - 5.0 * a) * t + 8.0 * a) * t - 4.0 * a;
                let near = |t: f64| ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0;
                vec![
                    far(ratio + 1.0),
                    near(ratio),
                    near(1.0 - ratio),
                    far(2.0 - ratio),
                ]
            }
            Kernel::Cubic { antialias: true, a } => {
                let a = *a;
                let k = |x: f64| {
                    let x = x.abs();
                    if x <= 1.0 {
                        (a + 2.0) * x * x * x - (a + 3.0) * x * x + 1.0
                    } else if x < 2.0 {
                        a * x * x * x - 5.0 * a * x * x + 8.0 * a * x - 4.0 * a
                    } else {
                        0.0
                    }
                };
                let start = (-2.0 / scale).floor() as i64 + 1;
                normalized(
                    (start..2 - start)
                        .map(|i| k(scale * (i as f64 - ratio)))
                        .collect(),
                )
            }
        }
    }
}

fn normalized(w: Vec<f64>) -> Vec<f64> {
    let sum: f64 = w.iter().sum();
    w.into_iter().map(|v| v / sum).collect()
}

/// One axis of a resize: its input and output extents, the scale its
/// coordinates map by, and its region of interest.
struct Axis {
    input: i64,
    output: i64,
    scale: f64,
    roi: (f64, f64),
}

impl Axis {
    fn is_identity(&self) -> bool {
        (self.scale - 1.0).abs() < 1e-9 && self.output == self.input && self.roi == (0.0, 1.0)
    }

    /// Output index `o`'s coordinate in the input, or None where
    /// `tf_crop_and_resize` falls outside it (extrapolated).
    fn source(&self, o: i64, map: CoordinateMap) -> Option<f64> {
        let (o, len) = (o as f64, self.input as f64);
        let out = self.scale * len;
        let x = match map {
            CoordinateMap::AlignCorners if out == 1.0 => 0.0,
            CoordinateMap::AlignCorners => o * (len - 1.0) / (out - 1.0),
            CoordinateMap::Asymmetric => o / self.scale,
            CoordinateMap::PytorchHalfPixel if out == 1.0 => -0.5,
            CoordinateMap::PytorchHalfPixel | CoordinateMap::HalfPixel => {
                (o + 0.5) / self.scale - 0.5
            }
            CoordinateMap::HalfPixelSymmetric => {
                let offset = len / 2.0 * (1.0 - self.output as f64 / out);
                offset + (o + 0.5) / self.scale - 0.5
            }
            CoordinateMap::TfCropAndResize => {
                let (start, end) = self.roi;
                let x = if out == 1.0 {
                    (end - start) * (len - 1.0) / 2.0
                } else {
                    o * (end - start) * (len - 1.0) / (out - 1.0)
                } + start * (len - 1.0);
                if x < 0.0 || x > len - 1.0 {
                    return None;
                }
                x
            }
        };
        Some(x)
    }

    /// The [output, input] matrix of weights, and which output indices are
    /// extrapolated.
    fn matrix(
        &self,
        kernel: &Kernel,
        map: CoordinateMap,
        exclude_outside: bool,
    ) -> (Array2<f64>, Vec<bool>) {
        let (rows, cols) = (self.output as usize, self.input as usize);
        let mut m = Array2::zeros((rows, cols));
        let mut outside = vec![false; rows];
        for o in 0..rows {
            let Some(x) = self.source(o as i64, map) else {
                outside[o] = true;
                continue;
            };
            // The tap left of x (x itself one to the left when integral).
            let left = x.ceil() as i64 - 1;
            let mut w = kernel.weights(x - left as f64, self.scale);
            let n = w.len() as i64;
            let first = left - n / 2 + 1;
            if exclude_outside {
                for (k, v) in w.iter_mut().enumerate() {
                    if !(0..self.input).contains(&(first + k as i64)) {
                        *v = 0.0;
                    }
                }
                let sum: f64 = w.iter().sum();
                if sum != 0.0 {
                    w.iter_mut().for_each(|v| *v /= sum);
                }
            }
            // Taps past the edges read the edge (ONNX pads by repeating it).
            for (k, v) in w.into_iter().enumerate() {
                let tap = (first + k as i64).clamp(0, self.input - 1) as usize;
                m[[o, tap]] += v;
            }
        }
        (m, outside)
    }
}

impl Importer<'_> {
    pub(crate) fn resize(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&[
            "mode",
            "coordinate_transformation_mode",
            "nearest_mode",
            "cubic_coeff_a",
            "exclude_outside",
            "extrapolation_value",
            "antialias",
            "keep_aspect_ratio_policy",
            "axes",
        ])?;
        let x = self.required(n, 0)?;
        let ty = self.type_of(&x);
        let rank = ty.rank();
        let antialias = a.i("antialias", 0) != 0;
        let kernel = match a.s("mode", "nearest").as_str() {
            "nearest" => Kernel::Nearest(a.s("nearest_mode", "round_prefer_floor")),
            "linear" => Kernel::Linear { antialias },
            "cubic" => Kernel::Cubic {
                antialias,
                a: a.f("cubic_coeff_a", -0.75) as f64,
            },
            m => return Err(ImportError::invalid(format!("unknown Resize mode '{m}'"))),
        };
        if let Kernel::Nearest(m) = &kernel
            && !matches!(
                m.as_str(),
                "round_prefer_floor" | "round_prefer_ceil" | "floor" | "ceil"
            )
        {
            return Err(ImportError::invalid(format!("unknown nearest_mode '{m}'")));
        }
        let ctm = a.s("coordinate_transformation_mode", "half_pixel");
        let map = CoordinateMap::parse(&ctm)?;
        let axes: Vec<usize> = match a.ints("axes") {
            Some(axes) => axes
                .iter()
                .map(|&ax| rank_axis(ax, rank))
                .collect::<Result<_>>()?,
            None => (0..rank).collect(),
        };
        let (roi_at, scales_at, sizes_at) = if self.opset >= 11 {
            (1, 2, Some(3))
        } else {
            (usize::MAX, 1, None)
        };
        let scales = self
            .constant_input(n, scales_at, "scales")?
            .filter(|t| !t.is_empty())
            .map(|t| t.to_f64().iter().copied().collect::<Vec<_>>());
        let sizes = match sizes_at {
            Some(i) => self
                .constant_input(n, i, "sizes")?
                .filter(|t| !t.is_empty())
                .map(|t| i64s(&t)),
            None => None,
        };
        if scales.is_some() && sizes.is_some() {
            return Err(ImportError::invalid(
                "Resize takes scales or sizes, not both",
            ));
        }
        if let Some(ax) = axes
            .iter()
            .enumerate()
            .find_map(|(i, ax)| axes[..i].contains(ax).then_some(ax))
        {
            return Err(ImportError::invalid(format!(
                "Resize lists axis {ax} twice"
            )));
        }
        if ty.shape.contains(&0) {
            return Err(ImportError::invalid(format!(
                "Resize of {ty} has an empty axis to sample from"
            )));
        }
        let given = sizes
            .as_ref()
            .map_or(scales.as_ref().map(Vec::len), |s| Some(s.len()));
        if given.is_some_and(|len| len != axes.len()) {
            return Err(ImportError::invalid(format!(
                "Resize gives {} scales or sizes for {} axes",
                given.unwrap_or(0),
                axes.len()
            )));
        }
        let policy = a.s("keep_aspect_ratio_policy", "stretch");
        let mut dims: Vec<Axis> = ty
            .shape
            .iter()
            .map(|&d| Axis {
                input: d,
                output: d,
                scale: 1.0,
                roi: (0.0, 1.0),
            })
            .collect();
        match (&sizes, &scales) {
            (Some(sizes), _) => {
                if sizes.iter().any(|&s| s < 0) {
                    return Err(ImportError::invalid("Resize sizes must not be negative"));
                }
                let ratio = |k: usize| sizes[k] as f64 / ty.shape[axes[k]] as f64;
                let kept = match policy.as_str() {
                    "stretch" => None,
                    "not_larger" => Some((0..axes.len()).map(ratio).fold(f64::INFINITY, f64::min)),
                    "not_smaller" => Some((0..axes.len()).map(ratio).fold(0.0, f64::max)),
                    p => {
                        return Err(ImportError::invalid(format!(
                            "unknown keep_aspect_ratio_policy '{p}'"
                        )));
                    }
                };
                for (k, &ax) in axes.iter().enumerate() {
                    let d = &mut dims[ax];
                    match kept {
                        None => (d.output, d.scale) = (sizes[k], ratio(k)),
                        Some(s) => {
                            d.scale = s;
                            d.output = (s * d.input as f64 + 0.5) as i64;
                        }
                    }
                }
            }
            (None, Some(scales)) => {
                for (k, &ax) in axes.iter().enumerate() {
                    let s = scales[k];
                    if !(s > 0.0 && s.is_finite()) {
                        return Err(ImportError::invalid(format!(
                            "Resize scale {s} is not a positive number"
                        )));
                    }
                    let d = &mut dims[ax];
                    d.scale = s;
                    d.output = (s * d.input as f64) as i64;
                }
            }
            (None, None) => return Err(ImportError::invalid("Resize needs scales or sizes")),
        }
        if map == CoordinateMap::TfCropAndResize {
            let roi = self
                .constant_input(n, roi_at, "roi")?
                .map(|t| t.to_f64().iter().copied().collect::<Vec<_>>())
                .ok_or_else(|| ImportError::invalid("tf_crop_and_resize needs a roi"))?;
            if roi.len() != 2 * axes.len() {
                return Err(ImportError::invalid(format!(
                    "roi holds {} values; {} axes take {}",
                    roi.len(),
                    axes.len(),
                    2 * axes.len()
                )));
            }
            for (k, &ax) in axes.iter().enumerate() {
                dims[ax].roi = (roi[k], roi[axes.len() + k]);
            }
        }
        let plain = matches!(
            map,
            CoordinateMap::HalfPixel
                | CoordinateMap::PytorchHalfPixel
                | CoordinateMap::AlignCorners
                | CoordinateMap::Asymmetric
        ) && matches!(
            kernel,
            Kernel::Nearest(_) | Kernel::Linear { antialias: false }
        ) && a.i("exclude_outside", 0) == 0
            && policy == "stretch";
        if plain {
            let mut at = attrs(vec![
                ("mode", Attribute::String(a.s("mode", "nearest"))),
                ("coordinate_transformation_mode", Attribute::String(ctm)),
                (
                    "nearest_mode",
                    Attribute::String(a.s("nearest_mode", "round_prefer_floor")),
                ),
            ]);
            if sizes.is_some() {
                let all = dims.iter().map(|d| d.output).collect();
                at.insert("sizes".into(), ints_attr(all));
            } else {
                let all = dims.iter().map(|d| d.scale).collect();
                at.insert(
                    "scales".into(),
                    Attribute::DenseFloatArray(ElemType::F32, all),
                );
            }
            return self.emit(GraphOp::Resize, vec![x], at, 1);
        }
        if !ty.elem.is_float() {
            return Err(ImportError::unsupported(format!(
                "Resize of {} other than nearest or linear",
                ty.elem
            )));
        }
        let extrapolation = a.f("extrapolation_value", 0.0) as f64;
        let exclude_outside = a.i("exclude_outside", 0) != 0;
        let mut y = x;
        let mut extrapolated: Option<Val> = None;
        for ax in axes {
            let d = &dims[ax];
            if d.is_identity() {
                continue;
            }
            if d.output.saturating_mul(d.input) > MAX_FOLDED_ELEMENTS {
                return Err(ImportError::unsupported(format!(
                    "resizing an axis of {} to {} takes more weights than a constant may hold",
                    d.input, d.output
                )));
            }
            let (m, outside) = d.matrix(&kernel, map, exclude_outside);
            y = self.along_axis(y, ax, m)?;
            if outside.contains(&true) {
                let mut shape = vec![1; rank];
                shape[ax] = outside.len();
                let mask = ArrayD::from_shape_vec(IxDyn(&shape), outside).expect("one per row");
                let mask = Val::constant(Tensor::bool(mask));
                extrapolated = Some(match extrapolated {
                    Some(m) => self.bin(GraphOp::Or, m, mask)?,
                    None => mask,
                });
            }
        }
        if let Some(mask) = extrapolated {
            let value = self.scalar_like(&y, extrapolation);
            y = self.select(mask, value, y)?;
        }
        Ok(vec![y])
    }

    /// `x` with axis `ax` contracted with `m` [output, input]: a matmul over
    /// the axis, the axes before it as a batch and those after as columns.
    fn along_axis(&mut self, x: Val, ax: usize, m: Array2<f64>) -> Result<Val> {
        let ty = self.type_of(&x);
        let before: i64 = ty.shape[..ax].iter().product();
        let after: i64 = ty.shape[ax + 1..].iter().product();
        let (rows, cols) = (m.nrows() as i64, m.ncols() as i64);
        let y = if after == 1 {
            let x = self.reshape(x, vec![before, cols])?;
            let mt = m.t().as_standard_layout().into_owned();
            let mt = Val::constant(Tensor::float(ty.elem, mt.into_dyn()));
            self.bin(GraphOp::Matmul, x, mt)?
        } else {
            let x = self.reshape(x, vec![before, cols, after])?;
            let m = Val::constant(Tensor::float(ty.elem, m.into_dyn()));
            self.bin(GraphOp::Matmul, m, x)?
        };
        let mut shape = ty.shape.clone();
        shape[ax] = rows;
        self.reshape(y, shape)
    }
}
