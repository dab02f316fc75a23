//! `graph.non_max_suppression`: ONNX's NonMaxSuppression with a static
//! result. ONNX's result has as many rows as boxes are kept, which only
//! the values decide; here each batch and class has
//! `max_output_boxes_per_class` rows (at most its boxes), its kept boxes
//! first and rows of -1 after them. Dropping the rows of -1 gives ONNX's
//! result, in its order (TensorRT's EfficientNMS and TFLite's padded
//! NonMaxSuppression bound their results the same way).

use std::cmp::Ordering;

use ircc_core::interp::Env;
use ircc_core::limits::MAX_FOLDED_WORK;
use ircc_core::registry::OpView;
use ircc_core::{ElemType, Tensor, Type};
use ndarray::{Array2, ArrayD};

use super::eval_elementwise::Eval;
use super::shape::Infer;

/// The sizes a NonMaxSuppression works on: batches, classes, boxes, and
/// the rows each batch and class has.
pub struct NmsShape {
    pub batches: i64,
    pub classes: i64,
    pub boxes: i64,
    pub rows: i64,
}

impl NmsShape {
    pub fn of(v: &OpView) -> Result<NmsShape, String> {
        let (b, s) = (v.tensor(0)?, v.tensor(1)?);
        let [batches, boxes, 4] = b.shape[..] else {
            return Err(format!("boxes must be [batches, boxes, 4], not {b}"));
        };
        let [sb, classes, sn] = s.shape[..] else {
            return Err(format!("scores must be [batches, classes, boxes], not {s}"));
        };
        if (sb, sn) != (batches, boxes) {
            return Err(format!("scores {s} do not match boxes {b}"));
        }
        if !b.elem.is_float() || !s.elem.is_float() {
            return Err(format!("boxes and scores must be floats, not {b} and {s}"));
        }
        let max = v.i64("max_output_boxes_per_class")?;
        if max < 0 {
            return Err(format!("max_output_boxes_per_class {max} is negative"));
        }
        let iou = v.f64("iou_threshold")?;
        if !(0.0..=1.0).contains(&iou) {
            return Err(format!("iou_threshold {iou} is outside [0, 1]"));
        }
        let center = v.i64("center_point_box")?;
        if center != 0 && center != 1 {
            return Err(format!("center_point_box must be 0 or 1, not {center}"));
        }
        Ok(NmsShape {
            batches,
            classes,
            boxes,
            rows: max.min(boxes),
        })
    }
}

pub fn infer(v: &OpView) -> Infer {
    let s = NmsShape::of(v)?;
    Ok(vec![Type::tensor(
        vec![s.batches * s.classes * s.rows, 3],
        ElemType::I64,
    )])
}

/// A corner-form box: the least and greatest y and x, in f32, which
/// onnxruntime and the kernels compute overlaps in.
#[derive(Clone, Copy)]
struct Corners {
    y0: f32,
    x0: f32,
    y1: f32,
    x1: f32,
}

impl Corners {
    /// From ONNX's two encodings: two opposite corners [y1, x1, y2, x2] in
    /// either order, or the centre and size [x, y, width, height].
    fn new(b: &[f32], center_point: bool) -> Corners {
        if center_point {
            let (x, y, w, h) = (b[0], b[1], b[2], b[3]);
            Corners {
                y0: y - h * 0.5,
                x0: x - w * 0.5,
                y1: y + h * 0.5,
                x1: x + w * 0.5,
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

    fn area(&self) -> f32 {
        (self.y1 - self.y0) * (self.x1 - self.x0)
    }

    /// Whether `self` and `other` overlap by more than `threshold` of their
    /// union (boxes without area never do), as onnxruntime decides.
    fn suppresses(&self, other: &Corners, threshold: f32) -> bool {
        let h = self.y1.min(other.y1) - self.y0.max(other.y0);
        let w = self.x1.min(other.x1) - self.x0.max(other.x0);
        if h <= 0.0 || w <= 0.0 || self.area() <= 0.0 || other.area() <= 0.0 {
            return false;
        }
        let inter = h * w;
        let union = self.area() + other.area() - inter;
        union > 0.0 && inter / union > threshold
    }
}

/// Per batch and class, boxes in order of falling score (ties by index)
/// above `score_threshold`, each kept unless a kept one overlaps it by
/// more than `iou_threshold`, at most `max_output_boxes_per_class`.
pub fn interpret(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let s = NmsShape::of(v)?;
    let (batches, classes, spatial, rows) = (
        s.batches as usize,
        s.classes as usize,
        s.boxes as usize,
        s.rows as usize,
    );
    // Each box is compared with those kept before it: at most `rows`.
    let work = (batches * classes * spatial) as f64 * (rows.max(1) as f64 + spatial as f64);
    if work > MAX_FOLDED_WORK as f64 {
        return Err(format!(
            "{batches}x{classes} classes of {spatial} boxes are more work than the interpreter does"
        ));
    }
    let center_point = v.i64("center_point_box")? == 1;
    // ONNX's thresholds are f32 tensors; the comparisons are in f32.
    let iou = v.f64("iou_threshold")? as f32;
    let score_threshold = if v.has_attr("score_threshold") {
        Some(v.f64("score_threshold")? as f32)
    } else {
        None
    };
    let (boxes, scores) = (args[0].to_f64(), args[1].to_f64());
    let mut selected = Array2::<i64>::from_elem((batches * classes * rows, 3), -1);
    for b in 0..batches {
        let corners: Vec<Corners> = (0..spatial)
            .map(|i| {
                let v: Vec<f32> = (0..4).map(|k| boxes[[b, i, k]] as f32).collect();
                Corners::new(&v, center_point)
            })
            .collect();
        for c in 0..classes {
            // NaN ranks as -inf, below every score, so the order is total.
            let score = |i: usize| {
                let s = scores[[b, c, i]] as f32;
                if s.is_nan() { f32::NEG_INFINITY } else { s }
            };
            let mut order: Vec<usize> = (0..spatial)
                .filter(|&i| score_threshold.is_none_or(|t| score(i) > t))
                .collect();
            // Stable: equal scores keep the order of their indices.
            // (-0 and 0 tie, as the kernels compare them.)
            order.sort_by(|&i, &j| score(j).partial_cmp(&score(i)).unwrap_or(Ordering::Equal));
            let mut kept: Vec<usize> = Vec::new();
            for i in order {
                if kept.len() == rows {
                    break;
                }
                if kept
                    .iter()
                    .all(|&k| !corners[k].suppresses(&corners[i], iou))
                {
                    let row = (b * classes + c) * rows + kept.len();
                    for (k, x) in [b, c, i].into_iter().enumerate() {
                        selected[[row, k]] = x as i64;
                    }
                    kept.push(i);
                }
            }
        }
    }
    let selected: ArrayD<i64> = selected.into_dyn();
    Ok(vec![Tensor::int(ElemType::I64, selected)])
}
