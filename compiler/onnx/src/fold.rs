//! Operators that exist only as shape arithmetic: with static shapes their
//! inputs are constants, so import evaluates them and they never reach the
//! IR. Given a non-constant input they are reported as unsupported.

use ircc_core::limits::{MAX_DIM, MAX_ELEMENTS, MAX_FOLDED_ELEMENTS};
use ircc_core::{ElemType, Tensor, TensorData};
use ndarray::{ArrayD, IxDyn};

use crate::attrs::Attrs;
use crate::import::{Importer, Val, i64s};
use crate::proto::NodeProto;
use crate::tensor::to_tensor;
use crate::{ImportError, Result};

pub fn scalar(v: f64, elem: ElemType) -> Tensor {
    let a = ndarray::arr0(v).into_dyn();
    if elem.is_float() {
        Tensor::float(elem, a)
    } else {
        Tensor::int(elem, a.mapv(|x| x as i64))
    }
}

fn int_vector(v: Vec<i64>) -> Tensor {
    Tensor::int(ElemType::I64, ndarray::Array1::from(v).into_dyn())
}

/// ONNX Reshape's target: 0 copies the input extent (unless allowzero), -1
/// takes what is left.
pub fn reshape_target(input: &[i64], shape: &[i64], allowzero: bool) -> Result<Vec<i64>> {
    let mut out: Vec<i64> = shape
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            if d == 0 && !allowzero {
                input.get(i).copied().unwrap_or(0)
            } else {
                d
            }
        })
        .collect();
    let total: i64 = input.iter().product();
    let holes: Vec<usize> = out
        .iter()
        .enumerate()
        .filter(|(_, d)| **d == -1)
        .map(|(i, _)| i)
        .collect();
    match holes.as_slice() {
        [] => {}
        [h] => {
            let known: i64 = out.iter().filter(|&&d| d != -1).product();
            if known == 0 || total % known != 0 {
                return Err(ImportError::invalid(format!(
                    "cannot reshape {input:?} to {shape:?}"
                )));
            }
            out[*h] = total / known;
        }
        _ => {
            return Err(ImportError::invalid(format!(
                "reshape target {shape:?} has more than one -1"
            )));
        }
    }
    if out.iter().any(|&d| d < 0) || out.iter().product::<i64>() != total {
        return Err(ImportError::invalid(format!(
            "cannot reshape {input:?} to {shape:?}"
        )));
    }
    Ok(out)
}

/// The element count of a shape given as data, checked against the limits.
fn checked_elements(dims: &[i64]) -> Result<i64> {
    if let Some(d) = dims.iter().find(|&&d| !(0..=MAX_DIM).contains(&d)) {
        return Err(ImportError::invalid(format!(
            "shape {dims:?} has the extent {d}, outside 0..={MAX_DIM}"
        )));
    }
    dims.iter()
        .try_fold(1i64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS)
        .ok_or_else(|| {
            ImportError::invalid(format!(
                "shape {dims:?} has more than the supported {MAX_ELEMENTS} elements"
            ))
        })
}

pub(crate) fn constant(imp: &Importer, n: &NodeProto, i: usize) -> Result<Tensor> {
    let what = format!("{} input #{i}", n.op_type);
    imp.known_constant_for(&imp.required(n, i)?, &what).ok_or_else(|| {
        ImportError::unsupported(format!(
            "operator '{}' is supported only on constant inputs (shape arithmetic), and input #{i} is not constant",
            n.op_type
        ))
    })
}

pub fn import_only(imp: &mut Importer, n: &NodeProto, a: &Attrs) -> Result<Val> {
    let t = match n.op_type.as_str() {
        "Shape" => {
            a.only(&["start", "end"])?;
            let shape = imp.type_of(&imp.required(n, 0)?).shape;
            let r = shape.len() as i64;
            let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
            let (s, e) = (clamp(a.i("start", 0)), clamp(a.i("end", r)));
            int_vector(shape[s..e.max(s)].to_vec())
        }
        "Size" => {
            a.only(&[])?;
            let n = imp.type_of(&imp.required(n, 0)?).num_elements();
            Tensor::int(ElemType::I64, ndarray::arr0(n).into_dyn())
        }
        "ConstantOfShape" => {
            a.only(&["value"])?;
            let dims = i64s(&constant(imp, n, 0)?);
            let elements = checked_elements(&dims)?;
            let value = match n
                .attribute
                .iter()
                .find(|x| x.name == "value")
                .and_then(|x| x.t.as_ref())
            {
                Some(t) => to_tensor(t, std::path::Path::new("."))?,
                None => scalar(0.0, ElemType::F32),
            };
            if value.len() != 1 {
                return Err(ImportError::invalid(format!(
                    "attribute 'value' must hold one element, not {}",
                    value.len()
                )));
            }
            if elements > MAX_FOLDED_ELEMENTS {
                return imp.splat(&value, dims);
            }
            let shape: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
            let data = match value.data() {
                TensorData::Float(v) => TensorData::Float(ArrayD::from_elem(
                    IxDyn(&shape),
                    v.iter().next().copied().unwrap_or_default(),
                )),
                TensorData::Int(v) => TensorData::Int(ArrayD::from_elem(
                    IxDyn(&shape),
                    v.iter().next().copied().unwrap_or_default(),
                )),
                TensorData::Bool(v) => TensorData::Bool(ArrayD::from_elem(
                    IxDyn(&shape),
                    v.iter().next().copied().unwrap_or_default(),
                )),
            };
            Tensor::new(value.elem, data)
        }
        "Range" => {
            a.only(&[])?;
            let (start, limit, delta) = (
                constant(imp, n, 0)?,
                constant(imp, n, 1)?,
                constant(imp, n, 2)?,
            );
            let elem = start.elem;
            let f = |t: &Tensor| t.to_f64().iter().next().copied().unwrap_or(0.0);
            let (s, l, d) = (f(&start), f(&limit), f(&delta));
            if d == 0.0 {
                return Err(ImportError::invalid("Range with delta 0"));
            }
            let count = ((l - s) / d).ceil();
            if !count.is_finite() {
                return Err(ImportError::invalid(format!(
                    "Range from {s} to {l} by {d} has no finite length"
                )));
            }
            if count > MAX_FOLDED_ELEMENTS as f64 {
                return Err(ImportError::invalid(format!(
                    "Range from {s} to {l} by {d} would have {count} elements, more than the {MAX_FOLDED_ELEMENTS} a constant folded at import may have"
                )));
            }
            let count = count.max(0.0) as usize;
            let values: Vec<f64> = (0..count).map(|i| s + i as f64 * d).collect();
            let arr = ndarray::Array1::from(values).into_dyn();
            if elem.is_float() {
                Tensor::float(elem, arr)
            } else {
                Tensor::int(elem, arr.mapv(|x| x as i64))
            }
        }
        "ScatterND" => {
            a.only(&["reduction"])?;
            let reduction = Reduction::of(a)?;
            let (data, indices, updates) = (
                constant(imp, n, 0)?,
                constant(imp, n, 1)?,
                constant(imp, n, 2)?,
            );
            let (offsets, slice) = scatter_nd_offsets(data.shape(), &indices)?;
            scatter(&data, &updates, &offsets, slice, reduction)?
        }
        "ScatterElements" | "Scatter" => {
            a.only(&["axis", "reduction"])?;
            let reduction = Reduction::of(a)?;
            let (data, indices, updates) = (
                constant(imp, n, 0)?,
                constant(imp, n, 1)?,
                constant(imp, n, 2)?,
            );
            if !indices.elem.is_int() {
                return Err(ImportError::invalid(format!(
                    "indices must be integers, not {}",
                    indices.elem
                )));
            }
            let offsets = scatter_elements_offsets(data.shape(), &indices, a.i("axis", 0))?;
            if updates.shape() != indices.shape() {
                return Err(ImportError::invalid(format!(
                    "updates {:?} must have the indices' shape {:?}",
                    updates.shape(),
                    indices.shape()
                )));
            }
            scatter(&data, &updates, &offsets, 1, reduction)?
        }
        "Mod" => {
            a.only(&["fmod"])?;
            let (x, y) = (constant(imp, n, 0)?, constant(imp, n, 1)?);
            let fmod = a.i("fmod", 0) != 0;
            // Python's modulo takes the divisor's sign: fmod, then shift.
            let float_mod = |p: f64, q: f64| {
                let m = p % q;
                if !fmod && m != 0.0 && (m < 0.0) != (q < 0.0) {
                    m + q
                } else {
                    m
                }
            };
            elementwise(&x, &y, float_mod, |p, q| {
                if q == 0 {
                    0
                } else if fmod {
                    p % q
                } else {
                    p.rem_euclid(q) + if q < 0 && p.rem_euclid(q) != 0 { q } else { 0 }
                }
            })?
        }
        other => {
            return Err(ImportError::unsupported(format!(
                "operator '{other}' is not supported"
            )));
        }
    };
    Ok(Val::constant(t))
}

fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let a: Vec<i64> = a.iter().map(|&d| d as i64).collect();
    let b: Vec<i64> = b.iter().map(|&d| d as i64).collect();
    let s = ircc_dialects::graph::shape::broadcast(&a, &b).map_err(ImportError::invalid)?;
    Ok(s.iter().map(|&d| d as usize).collect())
}

fn elementwise(
    x: &Tensor,
    y: &Tensor,
    f: impl Fn(f64, f64) -> f64,
    g: impl Fn(i64, i64) -> i64,
) -> Result<Tensor> {
    let shape = broadcast_shape(x.shape(), y.shape())?;
    match (x.data(), y.data()) {
        (TensorData::Float(p), TensorData::Float(q)) => {
            let (p, q) = (
                p.broadcast(IxDyn(&shape)).expect("broadcast"),
                q.broadcast(IxDyn(&shape)).expect("broadcast"),
            );
            Ok(Tensor::float(
                x.elem,
                ndarray::Zip::from(&p).and(&q).map_collect(|&u, &v| f(u, v)),
            ))
        }
        (TensorData::Int(p), TensorData::Int(q)) => {
            let (p, q) = (
                p.broadcast(IxDyn(&shape)).expect("broadcast"),
                q.broadcast(IxDyn(&shape)).expect("broadcast"),
            );
            Ok(Tensor::int(
                x.elem,
                ndarray::Zip::from(&p).and(&q).map_collect(|&u, &v| g(u, v)),
            ))
        }
        _ => Err(ImportError::invalid(
            "operands must have the same numeric type",
        )),
    }
}

/// How a scatter combines an update with the element it lands on.
#[derive(Clone, Copy, PartialEq)]
enum Reduction {
    Replace,
    Add,
    Mul,
    Max,
    Min,
}

impl Reduction {
    fn of(a: &Attrs) -> Result<Reduction> {
        Ok(match a.s("reduction", "none").as_str() {
            "none" => Reduction::Replace,
            "add" => Reduction::Add,
            "mul" => Reduction::Mul,
            "max" => Reduction::Max,
            "min" => Reduction::Min,
            r => return Err(ImportError::invalid(format!("unknown reduction '{r}'"))),
        })
    }

    fn float(self, old: f64, new: f64) -> f64 {
        match self {
            Reduction::Replace => new,
            Reduction::Add => old + new,
            Reduction::Mul => old * new,
            Reduction::Max => old.max(new),
            Reduction::Min => old.min(new),
        }
    }

    /// Integers wrap, as they do in the stored type's arithmetic.
    fn int(self, old: i64, new: i64) -> i64 {
        match self {
            Reduction::Replace => new,
            Reduction::Add => old.wrapping_add(new),
            Reduction::Mul => old.wrapping_mul(new),
            Reduction::Max => old.max(new),
            Reduction::Min => old.min(new),
        }
    }
}

/// An index along an axis of `extent`, negative ones counted from the end.
fn wrap_index(i: i64, extent: usize, what: &str) -> Result<usize> {
    let j = if i < 0 { i + extent as i64 } else { i };
    if (0..extent as i64).contains(&j) {
        Ok(j as usize)
    } else {
        Err(ImportError::invalid(format!(
            "{what} index {i} is out of range for an axis of {extent}"
        )))
    }
}

/// ScatterND: where each index (the indices' last axis) puts its slice
/// of the data, and the slice's length.
fn scatter_nd_offsets(shape: &[usize], indices: &Tensor) -> Result<(Vec<usize>, usize)> {
    let idx = indices.to_i64();
    let k = *idx
        .shape()
        .last()
        .ok_or_else(|| ImportError::invalid("ScatterND indices must have rank 1 or more"))?;
    if k > shape.len() {
        return Err(ImportError::invalid(
            "ScatterND index is longer than the data's rank",
        ));
    }
    let slice: usize = shape[k..].iter().product();
    let strides = ircc_dialects::graph::strides_of(shape);
    let idx = idx.as_standard_layout().iter().copied().collect::<Vec<_>>();
    let positions = idx.len().checked_div(k).unwrap_or(0);
    let mut offsets = Vec::with_capacity(positions);
    for p in 0..positions {
        let mut off = 0usize;
        for d in 0..k {
            off += wrap_index(idx[p * k + d], shape[d], "ScatterND")? * strides[d];
        }
        offsets.push(off);
    }
    Ok((offsets, slice))
}

/// ScatterElements: where each element of the updates goes, its position
/// with the index along `axis` replaced.
fn scatter_elements_offsets(shape: &[usize], indices: &Tensor, axis: i64) -> Result<Vec<usize>> {
    use ndarray::Dimension;
    let axis = crate::ops::rank_axis(axis, shape.len())?;
    let idx = indices.to_i64();
    if idx.ndim() != shape.len() || idx.shape().iter().zip(shape).any(|(i, d)| i > d && *i > 0) {
        return Err(ImportError::invalid(format!(
            "indices {:?} do not fit the data {shape:?}",
            idx.shape()
        )));
    }
    let strides = ircc_dialects::graph::strides_of(shape);
    idx.indexed_iter()
        .map(|(pos, &i)| {
            let mut off = 0;
            for (d, &p) in pos.slice().iter().enumerate() {
                let p = if d == axis {
                    wrap_index(i, shape[d], "ScatterElements")?
                } else {
                    p
                };
                off += p * strides[d];
            }
            Ok(off)
        })
        .collect()
}

/// The data with each run of `slice` updates combined into it at its
/// offset, in order.
fn scatter(
    data: &Tensor,
    updates: &Tensor,
    offsets: &[usize],
    slice: usize,
    reduction: Reduction,
) -> Result<Tensor> {
    fn apply<T: Clone>(
        data: &ArrayD<T>,
        updates: &ArrayD<T>,
        offsets: &[usize],
        slice: usize,
        combine: impl Fn(T, T) -> T,
    ) -> Result<ArrayD<T>> {
        let mut out: Vec<T> = data.as_standard_layout().iter().cloned().collect();
        let upd: Vec<T> = updates.as_standard_layout().iter().cloned().collect();
        if upd.len() != offsets.len() * slice {
            return Err(ImportError::invalid(
                "the updates do not match the indices' shape",
            ));
        }
        for (p, &off) in offsets.iter().enumerate() {
            for k in 0..slice {
                let new = upd[p * slice + k].clone();
                out[off + k] = combine(out[off + k].clone(), new);
            }
        }
        ArrayD::from_shape_vec(data.raw_dim(), out).map_err(|e| ImportError::invalid(e.to_string()))
    }
    if data.elem != updates.elem {
        return Err(ImportError::invalid(format!(
            "the data is {} but the updates are {}",
            data.elem, updates.elem
        )));
    }
    let data_out = match (data.data(), updates.data()) {
        (TensorData::Float(d), TensorData::Float(u)) => {
            TensorData::Float(apply(d, u, offsets, slice, |o, n| reduction.float(o, n))?)
        }
        (TensorData::Int(d), TensorData::Int(u)) => {
            TensorData::Int(apply(d, u, offsets, slice, |o, n| reduction.int(o, n))?)
        }
        (TensorData::Bool(d), TensorData::Bool(u)) if reduction == Reduction::Replace => {
            TensorData::Bool(apply(d, u, offsets, slice, |_, n| n)?)
        }
        (TensorData::Bool(_), TensorData::Bool(_)) => {
            return Err(ImportError::invalid("a scatter of booleans cannot reduce"));
        }
        _ => unreachable!("one element type, one kind of data"),
    };
    Ok(Tensor::new(data.elem, data_out))
}
