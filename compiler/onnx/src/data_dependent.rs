//! Operators whose result's shape depends on their inputs' values:
//! NonMaxSuppression and Unique. On known inputs (constants, or inputs
//! bound with `--bind` or by `ircc run`) import evaluates them, as it
//! does shape arithmetic, and their result has ONNX's shape. Otherwise
//! NonMaxSuppression becomes `graph.non_max_suppression`, whose result
//! is bounded (see its interpreter); Unique needs its input known.

use std::cmp::Ordering;

use ircc_core::limits::MAX_FOLDED_ELEMENTS;
use ircc_core::{Attribute, ElemType, Tensor, TensorData, Type};
use ircc_dialects::graph::GraphOp;
use ndarray::{Array2, ArrayD, Axis, IxDyn};

use crate::attrs::Attrs;
use crate::fold::constant;
use crate::import::{Importer, Val};
use crate::ops::{attrs, rank_axis};
use crate::proto::NodeProto;
use crate::{ImportError, Result};

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
    /// NonMaxSuppression as `graph.non_max_suppression`. On known boxes
    /// and scores it is evaluated, and its rows of -1 dropped: ONNX's
    /// result exactly. Otherwise the result keeps its bound, a row per
    /// box each batch and class may keep, and a remark says so.
    pub(crate) fn non_max_suppression(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["center_point_box"])?;
        let center_point = a.flag("center_point_box", false)?;
        let scalar = |imp: &Self, i: usize, what: &str| -> Result<Option<f64>> {
            let Some(t) = imp.constant_input(n, i, what)? else {
                return Ok(None);
            };
            let want = if i == 2 { ElemType::I64 } else { ElemType::F32 };
            if t.elem != want {
                return Err(ImportError::invalid(format!(
                    "{what} must be {want}, not {}",
                    t.elem
                )));
            }
            match t.to_f64().iter().collect::<Vec<_>>()[..] {
                [v] => Ok(Some(*v)),
                _ => Err(ImportError::invalid(format!(
                    "{what} must hold one value, not {}",
                    t.len()
                ))),
            }
        };
        // More rows than boxes are never kept: the bound is the boxes.
        let boxes_count = self.type_of(&self.required(n, 0)?).shape.get(1).copied();
        let max_out = scalar(self, 2, "max_output_boxes_per_class")?
            .unwrap_or(0.0)
            .min(boxes_count.unwrap_or(i64::MAX) as f64);
        let iou = scalar(self, 3, "iou_threshold")?.unwrap_or(0.0);
        let score_threshold = scalar(self, 4, "score_threshold")?;
        let mut at = attrs(vec![
            ("center_point_box", Attribute::i64(i64::from(center_point))),
            (
                "max_output_boxes_per_class",
                Attribute::i64(max_out.clamp(0.0, i64::MAX as f64) as i64),
            ),
            ("iou_threshold", float(iou)),
        ]);
        if let Some(t) = score_threshold {
            at.insert("score_threshold".into(), float(t));
        }
        // Evaluated only where both are known, so that no input is bound
        // that the result still depends on.
        let (boxes, scores) = (self.required(n, 0)?, self.required(n, 1)?);
        // No row to keep: ONNX's empty result, which no kernel could bind.
        if max_out < 1.0 {
            let empty = Array2::<i64>::zeros((0, 3));
            return Ok(vec![Val::constant(Tensor::int(
                ElemType::I64,
                empty.into_dyn(),
            ))]);
        }
        let operands = if self.is_known(&boxes) && self.is_known(&scores) {
            [(boxes, "boxes"), (scores, "scores")]
                .into_iter()
                .map(|(v, what)| {
                    let what = format!("NonMaxSuppression's {what}");
                    self.known_constant_for(&v, &what).map_or(v, Val::constant)
                })
                .collect()
        } else {
            vec![boxes, scores]
        };
        let selected = self
            .emit(GraphOp::NonMaxSuppression, operands, at, 1)?
            .remove(0);
        match selected {
            Val::Const(t) => {
                let all = t.value();
                let all = all
                    .as_int()
                    .ok_or_else(|| ImportError::invalid("indices"))?;
                let kept: Vec<i64> = all
                    .rows()
                    .into_iter()
                    .filter(|r| r[0] >= 0)
                    .flatten()
                    .copied()
                    .collect();
                let rows = kept.len() / 3;
                let out = Array2::from_shape_vec((rows, 3), kept).expect("three per row");
                Ok(vec![Val::constant(Tensor::int(
                    ElemType::I64,
                    out.into_dyn(),
                ))])
            }
            Val::Dyn(v) => {
                let rows = self.type_of(&Val::Dyn(v)).shape[0];
                let name = n.output.first().map_or("", String::as_str);
                self.remark(format!(
                    "NonMaxSuppression's result '{name}' has {rows} rows: how many boxes it keeps depends on values, so each batch and class has a row per box it may keep, its kept boxes first, then rows of -1 (drop those for ONNX's result)"
                ));
                Ok(vec![Val::Dyn(v)])
            }
        }
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
        let (flat, width) = match x.data() {
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
        let y = Tensor::new(
            x.elem,
            match x.data() {
                TensorData::Float(v) => TensorData::Float(v.select(Axis(axis), &firsts)),
                TensorData::Int(v) => TensorData::Int(v.select(Axis(axis), &firsts)),
                TensorData::Bool(v) => TensorData::Bool(v.select(Axis(axis), &firsts)),
            },
        );
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
    let data = match x.data() {
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
    Ok(Tensor::new(x.elem, data))
}

/// A float attribute as ONNX gives it (f32), held at f64.
fn float(v: f64) -> Attribute {
    Attribute::Float(v, Type::Scalar(ElemType::F64))
}
