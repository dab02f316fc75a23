//! Operators whose result's shape depends on their inputs' values:
//! NonMaxSuppression and Unique. With static shapes they run only on
//! known inputs (constants, or inputs bound with `--bind` or by `ircc
//! run`), so import evaluates them, as it does shape arithmetic.

use std::cmp::Ordering;

use ircc_core::limits::{MAX_FOLDED_ELEMENTS, MAX_FOLDED_WORK};
use ircc_core::{ElemType, Tensor, TensorData};
use ndarray::{Array2, ArrayD, Axis, IxDyn};

use crate::attrs::Attrs;
use crate::fold::constant;
use crate::import::{Importer, Val};
use crate::ops::rank_axis;
use crate::proto::NodeProto;
use crate::{ImportError, Result};

/// A corner-form box: the least and greatest y and x.
#[derive(Clone, Copy)]
struct Corners {
    y0: f64,
    x0: f64,
    y1: f64,
    x1: f64,
}

impl Corners {
    /// From ONNX's two encodings: two opposite corners [y1, x1, y2, x2] in
    /// either order, or the centre and size [x, y, width, height].
    fn new(b: &[f64], center_point: bool) -> Corners {
        if center_point {
            let (x, y, w, h) = (b[0], b[1], b[2], b[3]);
            Corners {
                y0: y - h / 2.0,
                x0: x - w / 2.0,
                y1: y + h / 2.0,
                x1: x + w / 2.0,
            }
        } else {
            Corners {
                y0: b[0].min(b[2]),
                x0: b[1].min(b[3]),
                y1: b[0].max(b[2]),
                x1: b[1].max(b[3]),
            }
        }
    }

    fn area(&self) -> f64 {
        (self.y1 - self.y0) * (self.x1 - self.x0)
    }

    /// Whether `self` and `other` overlap by more than `threshold` of their
    /// union (boxes without area never do), as onnxruntime decides.
    fn suppresses(&self, other: &Corners, threshold: f64) -> bool {
        let h = self.y1.min(other.y1) - self.y0.max(other.y0);
        let w = self.x1.min(other.x1) - self.x0.max(other.x0);
        if h <= 0.0 || w <= 0.0 {
            return false;
        }
        let inter = h * w;
        let union = self.area() + other.area() - inter;
        if self.area() <= 0.0 || other.area() <= 0.0 || union <= 0.0 {
            return false;
        }
        inter / union > threshold
    }
}

/// A float ordered for sorting and comparing values: -0 equals 0, NaN
/// equals NaN (as numpy's unique takes them) and comes last.
#[derive(Clone, Copy)]
struct Ordered(f64);

impl PartialEq for Ordered {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ordered {}

impl PartialOrd for Ordered {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ordered {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .partial_cmp(&other.0)
            .unwrap_or_else(|| self.0.is_nan().cmp(&other.0.is_nan()))
    }
}

impl Importer<'_> {
    /// NonMaxSuppression: per batch and class, boxes in order of falling
    /// score (ties by index) above `score_threshold`, each kept unless a
    /// kept one overlaps it by more than `iou_threshold`, at most
    /// `max_output_boxes_per_class`; [selected, 3] of (batch, class, box).
    pub(crate) fn non_max_suppression(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["center_point_box"])?;
        let center_point = a.flag("center_point_box", false)?;
        let (boxes, scores) = (constant(self, n, 0)?, constant(self, n, 1)?);
        let optional = |imp: &Self, i: usize| -> Result<Option<f64>> {
            match imp.input(n, i)? {
                None => Ok(None),
                Some(_) => {
                    let t = constant(imp, n, i)?;
                    match t.to_f64().iter().collect::<Vec<_>>()[..] {
                        [v] => Ok(Some(*v)),
                        _ => Err(ImportError::invalid(format!(
                            "input #{i} must hold one value, not {}",
                            t.len()
                        ))),
                    }
                }
            }
        };
        let max_out = optional(self, 2)?.unwrap_or(0.0).max(0.0);
        let iou = optional(self, 3)?.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&iou) {
            return Err(ImportError::invalid(format!(
                "iou_threshold {iou} is outside [0, 1]"
            )));
        }
        let score_threshold = optional(self, 4)?;
        let (bs, ss) = (boxes.shape(), scores.shape());
        let [batches, spatial, 4] = bs[..] else {
            return Err(ImportError::invalid(format!(
                "boxes must be [batches, boxes, 4], not {bs:?}"
            )));
        };
        let [sb, classes, sn] = ss[..] else {
            return Err(ImportError::invalid(format!(
                "scores must be [batches, classes, boxes], not {ss:?}"
            )));
        };
        if (sb, sn) != (batches, spatial) {
            return Err(ImportError::invalid(format!(
                "scores {ss:?} do not match boxes {bs:?}"
            )));
        }
        // Each box is compared with those kept before it: at most
        // min(max, boxes) of them.
        let work = (batches * classes * spatial) as f64 * max_out.min(spatial as f64);
        if work > MAX_FOLDED_WORK as f64 {
            return Err(ImportError::unsupported(format!(
                "NonMaxSuppression of {batches}x{classes} classes of {spatial} boxes is more work than import evaluates"
            )));
        }
        let (boxes, scores) = (boxes.to_f64(), scores.to_f64());
        let mut selected: Vec<[i64; 3]> = Vec::new();
        for b in 0..batches {
            let corners: Vec<Corners> = (0..spatial)
                .map(|i| {
                    let v: Vec<f64> = (0..4).map(|k| boxes[[b, i, k]]).collect();
                    Corners::new(&v, center_point)
                })
                .collect();
            for c in 0..classes {
                let score = |i: usize| scores[[b, c, i]];
                let mut order: Vec<usize> = (0..spatial)
                    .filter(|&i| score_threshold.is_none_or(|t| score(i) > t))
                    .collect();
                order.sort_by_key(|&i| std::cmp::Reverse(Ordered(score(i))));
                let mut kept: Vec<usize> = Vec::new();
                for i in order {
                    if kept.len() as f64 >= max_out {
                        break;
                    }
                    if kept
                        .iter()
                        .all(|&k| !corners[k].suppresses(&corners[i], iou))
                    {
                        kept.push(i);
                        selected.push([b as i64, c as i64, i as i64]);
                    }
                }
            }
        }
        let rows = selected.len();
        let flat: Vec<i64> = selected.into_iter().flatten().collect();
        let out = Array2::from_shape_vec((rows, 3), flat).expect("three per row");
        Ok(vec![Val::constant(Tensor::int(
            ElemType::I64,
            out.into_dyn(),
        ))])
    }

    /// Unique: the distinct elements (or slices along `axis`), sorted or in
    /// order of first appearance, with the index of each one's first
    /// appearance, the index in the result of every element of the input,
    /// and how often each appears.
    pub(crate) fn unique(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["axis", "sorted"])?;
        let x = constant(self, n, 0)?;
        if x.len() > MAX_FOLDED_ELEMENTS as usize {
            return Err(ImportError::unsupported(format!(
                "Unique of {} elements is more than the {MAX_FOLDED_ELEMENTS} evaluated at import",
                x.len()
            )));
        }
        let sorted = a.i("sorted", 1) != 0;
        let (x, axis) = match a.has("axis") {
            true => {
                let axis = rank_axis(a.i("axis", 0), x.shape().len())?;
                (x, axis)
            }
            false => {
                let len = x.len();
                (reshaped(&x, &[len])?, 0)
            }
        };
        let (flat, width) = match &x.data {
            TensorData::Float(v) => slice_keys(v, axis, |&f| Ordered(f)),
            TensorData::Int(v) if v.iter().any(|i| i.unsigned_abs() > 1 << 53) => {
                // They would compare rounded, as floats.
                return Err(ImportError::unsupported(
                    "Unique of integers beyond 2^53 is not supported",
                ));
            }
            TensorData::Int(v) => slice_keys(v, axis, |&i| Ordered(i as f64)),
            TensorData::Bool(v) => slice_keys(v, axis, |&b| Ordered(f64::from(u8::from(b)))),
        };
        let slices = x.shape()[axis];
        let key = |i: usize| &flat[i * width..(i + 1) * width];
        // Equal slices side by side, each run in order of appearance.
        let mut order: Vec<usize> = (0..slices).collect();
        order.sort_by(|&p, &q| key(p).cmp(key(q)));
        let mut groups: Vec<&[usize]> = order.chunk_by(|&p, &q| key(p) == key(q)).collect();
        if !sorted {
            groups.sort_by_key(|g| g[0]);
        }
        let mut inverse = vec![0i64; slices];
        for (j, g) in groups.iter().enumerate() {
            for &i in *g {
                inverse[i] = j as i64;
            }
        }
        let counts: Vec<i64> = groups.iter().map(|g| g.len() as i64).collect();
        let firsts: Vec<usize> = groups.iter().map(|g| g[0]).collect();
        let y = Tensor {
            elem: x.elem,
            data: match &x.data {
                TensorData::Float(v) => TensorData::Float(v.select(Axis(axis), &firsts)),
                TensorData::Int(v) => TensorData::Int(v.select(Axis(axis), &firsts)),
                TensorData::Bool(v) => TensorData::Bool(v.select(Axis(axis), &firsts)),
            },
        };
        let vector = |v: Vec<i64>| {
            Val::constant(Tensor::int(
                ElemType::I64,
                ndarray::Array1::from(v).into_dyn(),
            ))
        };
        let firsts = firsts.iter().map(|&f| f as i64).collect();
        Ok(vec![
            Val::constant(y),
            vector(firsts),
            vector(inverse),
            vector(counts),
        ])
    }
}

/// The slices of `v` along `axis`, one after another, each in row-major
/// order of the other axes (the order Unique compares them in), and how
/// many elements each slice has.
fn slice_keys<T>(v: &ArrayD<T>, axis: usize, key: impl Fn(&T) -> Ordered) -> (Vec<Ordered>, usize) {
    let mut perm: Vec<usize> = (0..v.ndim()).filter(|&a| a != axis).collect();
    perm.insert(0, axis);
    let keys: Vec<Ordered> = v.view().permuted_axes(perm).iter().map(key).collect();
    let width = keys.len().checked_div(v.shape()[axis]).unwrap_or(0);
    (keys, width)
}

fn reshaped(x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let dim = IxDyn(shape);
    let err = |e: ndarray::ShapeError| ImportError::invalid(e.to_string());
    let data = match &x.data {
        TensorData::Float(v) => TensorData::Float(
            ArrayD::from_shape_vec(dim, v.iter().copied().collect()).map_err(err)?,
        ),
        TensorData::Int(v) => {
            TensorData::Int(ArrayD::from_shape_vec(dim, v.iter().copied().collect()).map_err(err)?)
        }
        TensorData::Bool(v) => {
            TensorData::Bool(ArrayD::from_shape_vec(dim, v.iter().copied().collect()).map_err(err)?)
        }
    };
    Ok(Tensor { elem: x.elem, data })
}
