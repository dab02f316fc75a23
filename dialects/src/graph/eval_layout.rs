//! Interpretation of the data-movement ops. Each is written as "for every
//! output index, which input element (if any)?" and executed by
//! [`gather_by`], so one code path serves every element type — and the same
//! index functions are what the tensor-index dialect turns into views.

use super::{GraphOp as G, kind};
use ircc_core::interp::{Env, checked_param};
use ircc_core::registry::OpView;
use ircc_core::{Attribute, Tensor, TensorData};
use ndarray::{ArrayD, Axis, IxDyn};

use super::eval_elementwise::Eval;
use super::shape;

/// Iterates over every multi-index of `shape`, row-major.
pub fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut idx = vec![0; shape.len()];
    loop {
        f(&idx);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

pub fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

fn take<T: Clone>(
    a: &ArrayD<T>,
    idx: &[Option<usize>],
    shape: &[usize],
    fill: T,
) -> Result<ArrayD<T>, String> {
    let a = a.as_standard_layout();
    let data = a.as_slice().ok_or("tensor is not contiguous")?;
    let out = idx
        .iter()
        .map(|i| i.map_or_else(|| fill.clone(), |i| data[i].clone()))
        .collect();
    ArrayD::from_shape_vec(IxDyn(shape), out).map_err(|e| e.to_string())
}

/// Builds a tensor of `shape` whose element at each index is the input
/// element at the flat offset `f` returns, or `fill` where it returns None.
pub fn gather_by(
    t: &Tensor,
    shape: &[usize],
    fill: f64,
    mut f: impl FnMut(&[usize]) -> Option<usize>,
) -> Result<Tensor, String> {
    let mut idx = Vec::with_capacity(shape.iter().product());
    for_each_index(shape, |o| idx.push(f(o)));
    let data = match t.data() {
        TensorData::Float(a) => TensorData::Float(take(a, &idx, shape, fill)?),
        TensorData::Int(a) => TensorData::Int(take(a, &idx, shape, fill as i64)?),
        TensorData::Bool(a) => TensorData::Bool(take(a, &idx, shape, fill != 0.0)?),
    };
    // Elements of `t` are of its type already; a fill may not be.
    Ok(if idx.iter().all(Option::is_some) {
        Tensor::rearranged(t, data)
    } else {
        Tensor::new(t.elem, data)
    })
}

fn out_shape(v: &OpView, i: usize) -> Result<Vec<usize>, String> {
    Ok(v.result_tensor(i)?
        .shape
        .iter()
        .map(|&d| d as usize)
        .collect())
}

fn in_shape(t: &Tensor) -> Vec<usize> {
    t.shape().to_vec()
}

/// Reshape, flatten, squeeze, unsqueeze and identity: row-major order kept.
/// A reshape keeps the row-major order of the elements, which is how a
/// tensor holds them: only the shape changes.
pub fn reshape(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let shape = IxDyn(&out_shape(v, 0)?);
    let x = &args[0];
    let bad = |e: ndarray::ShapeError| e.to_string();
    let data = match x.data() {
        TensorData::Float(a) => {
            TensorData::Float(a.clone().into_shape_with_order(shape).map_err(bad)?)
        }
        TensorData::Int(a) => TensorData::Int(a.clone().into_shape_with_order(shape).map_err(bad)?),
        TensorData::Bool(a) => {
            TensorData::Bool(a.clone().into_shape_with_order(shape).map_err(bad)?)
        }
    };
    Ok(vec![Tensor::rearranged(x, data)])
}

pub fn transpose(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = &args[0];
    let perm = shape::perm(v, x.shape().len())?;
    let istrides = strides_of(&in_shape(x));
    Ok(vec![gather_by(x, &out_shape(v, 0)?, 0.0, |o| {
        Some(o.iter().zip(&perm).map(|(i, &p)| i * istrides[p]).sum())
    })?])
}

pub fn slice(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = &args[0];
    let dims: Vec<i64> = x.shape().iter().map(|&d| d as i64).collect();
    let spec = shape::slice_spec(v, &dims)?;
    let istrides = strides_of(&in_shape(x));
    Ok(vec![gather_by(x, &out_shape(v, 0)?, 0.0, |o| {
        Some(
            o.iter()
                .enumerate()
                .map(|(d, &i)| (spec.start[d] + i as i64 * spec.step[d]) as usize * istrides[d])
                .sum(),
        )
    })?])
}

fn wrap_index(i: i64, dim: usize) -> Result<usize, String> {
    let j = if i < 0 { i + dim as i64 } else { i };
    if j < 0 || j >= dim as i64 {
        return Err(format!(
            "index {i} is out of range for an axis of extent {dim}"
        ));
    }
    Ok(j as usize)
}

pub fn gather(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let (x, idx) = (&args[0], &args[1]);
    let xs = in_shape(x);
    let a = shape::axis(v.i64("axis")?, xs.len())?;
    let indices = idx.as_int().ok_or("indices must be integers")?;
    let flat_idx: Vec<usize> = indices
        .iter()
        .map(|&i| wrap_index(i, xs[a]))
        .collect::<Result<_, _>>()?;
    let istrides = strides_of(&xs);
    let q = idx.shape().len();
    let qstrides = strides_of(idx.shape());
    if kind(v)? == G::GatherElements {
        return Ok(vec![gather_by(x, &out_shape(v, 0)?, 0.0, |o| {
            let k = o.iter().zip(&qstrides).map(|(i, s)| i * s).sum::<usize>();
            Some(
                o.iter()
                    .enumerate()
                    .map(|(d, &i)| if d == a { flat_idx[k] } else { i } * istrides[d])
                    .sum(),
            )
        })?]);
    }
    Ok(vec![gather_by(x, &out_shape(v, 0)?, 0.0, |o| {
        let k: usize = o[a..a + q].iter().zip(&qstrides).map(|(i, s)| i * s).sum();
        let mut off = flat_idx[k] * istrides[a];
        off += o[..a]
            .iter()
            .zip(&istrides)
            .map(|(i, s)| i * s)
            .sum::<usize>();
        off += o[a + q..]
            .iter()
            .zip(&istrides[a + 1..])
            .map(|(i, s)| i * s)
            .sum::<usize>();
        Some(off)
    })?])
}

pub fn concat(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let a = Axis(shape::axis(v.i64("axis")?, args[0].shape().len())?);
    let elem = args[0].elem;
    let data = match args[0].data() {
        TensorData::Float(_) => {
            let views: Vec<_> = args
                .iter()
                .filter_map(|t| t.as_float().map(|x| x.view()))
                .collect();
            TensorData::Float(ndarray::concatenate(a, &views).map_err(|e| e.to_string())?)
        }
        TensorData::Int(_) => {
            let views: Vec<_> = args
                .iter()
                .filter_map(|t| t.as_int().map(|x| x.view()))
                .collect();
            TensorData::Int(ndarray::concatenate(a, &views).map_err(|e| e.to_string())?)
        }
        TensorData::Bool(_) => {
            let views: Vec<_> = args
                .iter()
                .filter_map(|t| t.as_bool().map(|x| x.view()))
                .collect();
            TensorData::Bool(ndarray::concatenate(a, &views).map_err(|e| e.to_string())?)
        }
    };
    if args.iter().any(|t| t.elem != elem) {
        return Err("concat operands must have the same element type".to_string());
    }
    Ok(vec![Tensor::new(elem, data)])
}

pub fn split(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = &args[0];
    let xt = x.ty();
    let (a, sizes) = shape::split_sizes(v, &xt, v.result_types().len())?;
    let istrides = strides_of(&in_shape(x));
    let mut offset = 0usize;
    let mut outs = Vec::new();
    for (r, &size) in sizes.iter().enumerate() {
        outs.push(gather_by(x, &out_shape(v, r)?, 0.0, |o| {
            Some(
                o.iter()
                    .enumerate()
                    .map(|(d, &i)| if d == a { i + offset } else { i } * istrides[d])
                    .sum(),
            )
        })?);
        offset += size as usize;
    }
    Ok(outs)
}

pub fn pad(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = &args[0];
    let xs = in_shape(x);
    let r = xs.len();
    let pads = v.i64s("pads")?.ok_or("missing pads")?;
    let mode = v.str("mode")?.to_string();
    let istrides = strides_of(&xs);
    let value = v.f64("value")?;
    Ok(vec![gather_by(x, &out_shape(v, 0)?, value, |o| {
        let mut off = 0;
        for d in 0..r {
            let n = xs[d] as i64;
            let mut i = o[d] as i64 - pads[d];
            if i < 0 || i >= n {
                match mode.as_str() {
                    "edge" => i = i.clamp(0, n - 1),
                    "reflect" if n > 1 => {
                        let period = 2 * (n - 1);
                        let m = i.rem_euclid(period);
                        i = if m < n { m } else { period - m };
                    }
                    "reflect" => i = 0,
                    _ => return None,
                }
            }
            off += i as usize * istrides[d];
        }
        Some(off)
    })?])
}

/// Expand and tile: each output index maps to an input index modulo the
/// input's extent (expand's extents are 1 or equal).
pub fn repeat(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = &args[0];
    let xs = in_shape(x);
    let shape = out_shape(v, 0)?;
    let lead = shape.len() - xs.len();
    let istrides = strides_of(&xs);
    Ok(vec![gather_by(x, &shape, 0.0, |o| {
        Some(
            o[lead..]
                .iter()
                .zip(&xs)
                .zip(&istrides)
                .map(|((&i, &n), &s)| (i % n) * s)
                .sum(),
        )
    })?])
}

pub fn depth_to_space(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = &args[0];
    let xs = in_shape(x);
    let b = v.i64("blocksize")? as usize;
    let crd = v.str("mode")? == "CRD";
    let st = strides_of(&xs);
    let c_out = xs[1] / (b * b);
    Ok(vec![gather_by(x, &out_shape(v, 0)?, 0.0, |o| {
        let (n, c, h, w) = (o[0], o[1], o[2], o[3]);
        let (bh, bw) = (h % b, w % b);
        let ci = if crd {
            c * b * b + bh * b + bw
        } else {
            (bh * b + bw) * c_out + c
        };
        Some(n * st[0] + ci * st[1] + (h / b) * st[2] + (w / b) * st[3])
    })?])
}

pub fn space_to_depth(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = &args[0];
    let xs = in_shape(x);
    let b = v.i64("blocksize")? as usize;
    let st = strides_of(&xs);
    let c_in = xs[1];
    Ok(vec![gather_by(x, &out_shape(v, 0)?, 0.0, |o| {
        let (n, c, h, w) = (o[0], o[1], o[2], o[3]);
        let (blk, ci) = (c / c_in, c % c_in);
        let (bh, bw) = (blk / b, blk % b);
        Some(n * st[0] + ci * st[1] + (h * b + bh) * st[2] + (w * b + bw) * st[3])
    })?])
}

/// Input coordinate of output coordinate `o` on one axis of a resize.
fn source_coord(mode: &str, o: usize, in_len: usize, out_len: usize, scale: f64) -> f64 {
    let o = o as f64;
    match mode {
        "asymmetric" => o / scale,
        // ONNX uses the unrounded output length `in * scale` here.
        "align_corners" if in_len as f64 * scale > 1.0 => {
            o * (in_len as f64 - 1.0) / (in_len as f64 * scale - 1.0)
        }
        "align_corners" => 0.0,
        "pytorch_half_pixel" if out_len <= 1 => 0.0,
        _ => (o + 0.5) / scale - 0.5,
    }
}

pub fn resize(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = &args[0];
    let xs = in_shape(x);
    let shape = out_shape(v, 0)?;
    let scales: Vec<f64> = match v.f64s("scales")? {
        Some(s) => s,
        None => shape
            .iter()
            .zip(&xs)
            .map(|(&o, &i)| o as f64 / i as f64)
            .collect(),
    };
    let ctm = v.str("coordinate_transformation_mode")?;
    let st = strides_of(&xs);
    if v.str("mode")? == "nearest" {
        let nm = v.str("nearest_mode")?;
        return Ok(vec![gather_by(x, &shape, 0.0, |o| {
            let mut off = 0;
            for d in 0..xs.len() {
                let c = source_coord(ctm, o[d], xs[d], shape[d], scales[d]);
                let i = match nm {
                    "floor" => c.floor(),
                    "ceil" => c.ceil(),
                    "round_prefer_ceil" => (c + 0.5).floor(),
                    _ => {
                        if c.fract() == 0.5 {
                            c.floor()
                        } else {
                            c.round()
                        }
                    }
                };
                off += (i.max(0.0) as usize).min(xs[d] - 1) * st[d];
            }
            Some(off)
        })?]);
    }
    if !x.elem.is_float() {
        return Err("linear resize needs a float tensor".to_string());
    }
    let data = x
        .as_float()
        .ok_or("linear resize needs a float tensor")?
        .as_standard_layout()
        .into_owned();
    let flat = data.as_slice().ok_or("tensor is not contiguous")?;
    let mut out = Vec::with_capacity(shape.iter().product());
    let r = xs.len();
    for_each_index(&shape, |o| {
        // Two taps per axis: (low index, high index, weight of high).
        let taps: Vec<(usize, usize, f64)> = (0..r)
            .map(|d| {
                let c = source_coord(ctm, o[d], xs[d], shape[d], scales[d])
                    .clamp(0.0, xs[d] as f64 - 1.0);
                let lo = c.floor() as usize;
                (lo, (lo + 1).min(xs[d] - 1), c - lo as f64)
            })
            .collect();
        let mut acc = 0.0;
        for corner in 0..(1usize << r) {
            let mut w = 1.0;
            let mut off = 0;
            for (d, &(lo, hi, t)) in taps.iter().enumerate() {
                let high = corner >> d & 1 == 1;
                w *= if high { t } else { 1.0 - t };
                off += if high { hi } else { lo } * st[d];
            }
            if w != 0.0 {
                acc += w * flat[off];
            }
        }
        out.push(acc);
    });
    let y = ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| e.to_string())?;
    Ok(vec![Tensor::float(x.elem, y)])
}

pub fn constant(v: &OpView, _args: &[Tensor], _env: &mut dyn Env) -> Eval {
    match v.attr("value") {
        Some(Attribute::Dense(d)) => Ok(vec![Tensor::from_dense(d)]),
        _ => Err("attribute 'value' must be a dense constant".to_string()),
    }
}

pub fn param(v: &OpView, _args: &[Tensor], env: &mut dyn Env) -> Eval {
    Ok(vec![checked_param(
        env,
        v.str("name")?,
        v.result_tensor(0)?,
    )?])
}
