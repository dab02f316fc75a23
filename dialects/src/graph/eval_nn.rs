//! Interpretation of the compute ops: matmul, gemm, convolutions, pooling,
//! normalizations, softmax and reductions. Arithmetic is done in f64 and
//! rounded to the element type at the end.

use super::{GraphOp as G, kind};
use ircc_core::interp::Env;
use ircc_core::registry::OpView;
use ircc_core::{ElemType, Tensor, TensorData};
use ndarray::{Array2, ArrayD, ArrayView2, Axis, Ix2, IxDyn, s};

use super::eval_elementwise::Eval;
use super::eval_layout::{for_each_index, strides_of};
use super::shape;

fn floats<'a>(t: &'a Tensor, what: &str) -> Result<&'a ArrayD<f64>, String> {
    t.as_float()
        .ok_or_else(|| format!("{what} needs float tensors"))
}

fn usize_shape(v: &OpView) -> Result<Vec<usize>, String> {
    Ok(v.result_tensor(0)?
        .shape
        .iter()
        .map(|&d| d as usize)
        .collect())
}

fn as_2d(a: &ArrayD<f64>) -> Result<ArrayView2<'_, f64>, String> {
    a.view()
        .into_dimensionality::<Ix2>()
        .map_err(|e| e.to_string())
}

pub fn matmul(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let (a, b) = (&args[0], &args[1]);
    let elem = a.elem;
    let (fa, fb) = match (a.data(), b.data()) {
        (TensorData::Float(x), TensorData::Float(y)) => (x.clone(), y.clone()),
        (TensorData::Int(x), TensorData::Int(y)) => (x.mapv(|v| v as f64), y.mapv(|v| v as f64)),
        _ => return Err("matmul operands must both be float or both integer".to_string()),
    };
    let mut xa = fa;
    let mut xb = fb;
    if xa.ndim() == 1 {
        xa = xa.insert_axis(Axis(0));
    }
    if xb.ndim() == 1 {
        xb = xb.insert_axis(Axis(1));
    }
    let (ra, rb) = (xa.ndim(), xb.ndim());
    let (m, k, n) = (xa.shape()[ra - 2], xa.shape()[ra - 1], xb.shape()[rb - 1]);
    let batch_a: Vec<i64> = xa.shape()[..ra - 2].iter().map(|&d| d as i64).collect();
    let batch_b: Vec<i64> = xb.shape()[..rb - 2].iter().map(|&d| d as i64).collect();
    let batch: Vec<usize> = shape::broadcast(&batch_a, &batch_b)?
        .iter()
        .map(|&d| d as usize)
        .collect();
    let mut full_a = batch.clone();
    full_a.extend([m, k]);
    let mut full_b = batch.clone();
    full_b.extend([k, n]);
    let ba = xa
        .broadcast(IxDyn(&full_a))
        .ok_or("batch dimensions do not broadcast")?
        .to_owned();
    let bb = xb
        .broadcast(IxDyn(&full_b))
        .ok_or("batch dimensions do not broadcast")?
        .to_owned();
    let count: usize = batch.iter().product();
    let ba = ba
        .into_shape_with_order((count, m, k))
        .map_err(|e| e.to_string())?;
    let bb = bb
        .into_shape_with_order((count, k, n))
        .map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(count * m * n);
    for i in 0..count {
        let c = ba.slice(s![i, .., ..]).dot(&bb.slice(s![i, .., ..]));
        out.extend(c.iter().copied());
    }
    let result = ArrayD::from_shape_vec(IxDyn(&usize_shape(v)?), out).map_err(|e| e.to_string())?;
    Ok(vec![if elem.is_float() {
        Tensor::float(elem, result)
    } else {
        Tensor::int(elem, result.mapv(|x| x as i64))
    }])
}

pub fn gemm(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let a = as_2d(floats(&args[0], "gemm")?)?;
    let b = as_2d(floats(&args[1], "gemm")?)?;
    let a = if v.i64("trans_a")? != 0 {
        a.reversed_axes()
    } else {
        a
    };
    let b = if v.i64("trans_b")? != 0 {
        b.reversed_axes()
    } else {
        b
    };
    let mut y = a.dot(&b) * v.f64("alpha")?;
    if let Some(c) = args.get(2) {
        let c = floats(c, "gemm")?;
        let beta = v.f64("beta")?;
        let cb = c
            .broadcast(IxDyn(y.shape()))
            .ok_or("c does not broadcast")?;
        y.zip_mut_with(
            &cb.into_dimensionality::<Ix2>().map_err(|e| e.to_string())?,
            |y, &c| *y += beta * c,
        );
    }
    Ok(vec![Tensor::float(args[0].elem, y.into_dyn())])
}

/// A convolution of floats, or of integers (ONNX's ConvInteger): f64
/// holds their products and sums exactly below 2^53.
pub fn conv(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = args[0].to_f64().as_standard_layout().into_owned();
    let w = args[1].to_f64().as_standard_layout().into_owned();
    let out_shape = usize_shape(v)?;
    let spatial = x.ndim() - 2;
    let win = shape::window(v, spatial)?;
    let g = v.i64("group")? as usize;
    let (n, c) = (x.shape()[0], x.shape()[1]);
    let m = w.shape()[0];
    let (cg, mg) = (c / g, m / g);
    let kshape: Vec<usize> = w.shape()[2..].to_vec();
    let oshape: Vec<usize> = out_shape[2..].to_vec();
    let ishape: Vec<usize> = x.shape()[2..].to_vec();
    let ksize: usize = kshape.iter().product();
    let osize: usize = oshape.iter().product();
    let isize: usize = ishape.iter().product();
    let istrides = strides_of(&ishape);
    let xs = x.as_slice().ok_or("conv input is not contiguous")?;
    let ws = w.as_slice().ok_or("conv weight is not contiguous")?;
    // For each (kernel position, output position): the input offset, or None in padding.
    let mut taps: Vec<Option<usize>> = Vec::with_capacity(ksize * osize);
    for_each_index(&kshape, |k| {
        for_each_index(&oshape, |o| {
            let mut off = 0usize;
            let mut inside = true;
            for d in 0..spatial {
                let i = (o[d] * win.strides[d] as usize + k[d] * win.dilations[d] as usize) as i64
                    - win.pads[d];
                if i < 0 || i >= ishape[d] as i64 {
                    inside = false;
                    break;
                }
                off += i as usize * istrides[d];
            }
            taps.push(inside.then_some(off));
        });
    });
    let mut out = vec![0.0; n * m * osize];
    let mut cols = Array2::<f64>::zeros((cg * ksize, osize));
    for b in 0..n {
        for grp in 0..g {
            for ci in 0..cg {
                let base = (b * c + grp * cg + ci) * isize;
                for kk in 0..ksize {
                    let mut row = cols.row_mut(ci * ksize + kk);
                    for (o, t) in taps[kk * osize..(kk + 1) * osize].iter().enumerate() {
                        row[o] = t.map_or(0.0, |off| xs[base + off]);
                    }
                }
            }
            let wg = ArrayView2::from_shape(
                (mg, cg * ksize),
                &ws[grp * mg * cg * ksize..(grp + 1) * mg * cg * ksize],
            )
            .map_err(|e| e.to_string())?;
            let y = wg.dot(&cols);
            let start = (b * m + grp * mg) * osize;
            for (dst, src) in out[start..start + mg * osize].iter_mut().zip(y.iter()) {
                *dst = *src;
            }
        }
    }
    if let Some(bias) = args.get(2) {
        let bias = bias.to_f64();
        for b in 0..n {
            for (oc, &bv) in bias.iter().enumerate() {
                let start = (b * m + oc) * osize;
                out[start..start + osize].iter_mut().for_each(|y| *y += bv);
            }
        }
    }
    let y = ArrayD::from_shape_vec(IxDyn(&out_shape), out).map_err(|e| e.to_string())?;
    let elem = args[0].elem;
    Ok(vec![if elem.is_float() {
        Tensor::float(elem, y)
    } else {
        Tensor::int(elem, y.mapv(|x| x as i64))
    }])
}

pub fn conv_transpose(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = floats(&args[0], "conv_transpose")?;
    let w = floats(&args[1], "conv_transpose")?;
    let out_shape = usize_shape(v)?;
    let spatial = x.ndim() - 2;
    let win = shape::window(v, spatial)?;
    let g = v.i64("group")? as usize;
    let (n, c) = (x.shape()[0], x.shape()[1]);
    let (cg, mg) = (c / g, w.shape()[1]);
    let kshape: Vec<usize> = w.shape()[2..].to_vec();
    let ishape: Vec<usize> = x.shape()[2..].to_vec();
    let mut y = ArrayD::<f64>::zeros(IxDyn(&out_shape));
    let mut oidx = vec![0usize; out_shape.len()];
    for b in 0..n {
        for ci in 0..c {
            let grp = ci / cg;
            for_each_index(&ishape, |i| {
                let mut xi = vec![b, ci];
                xi.extend_from_slice(i);
                let xv = x[IxDyn(&xi)];
                for_each_index(&kshape, |k| {
                    let mut inside = true;
                    for d in 0..spatial {
                        let o = (i[d] * win.strides[d] as usize + k[d] * win.dilations[d] as usize)
                            as i64
                            - win.pads[d];
                        if o < 0 || o >= out_shape[2 + d] as i64 {
                            inside = false;
                            break;
                        }
                        oidx[2 + d] = o as usize;
                    }
                    if !inside {
                        return;
                    }
                    oidx[0] = b;
                    for mo in 0..mg {
                        let mut wi = vec![ci, mo];
                        wi.extend_from_slice(k);
                        oidx[1] = grp * mg + mo;
                        y[IxDyn(&oidx)] += xv * w[IxDyn(&wi)];
                    }
                });
            });
        }
    }
    if let Some(bias) = args.get(2) {
        let bias = floats(bias, "conv_transpose")?;
        for (oc, &bv) in bias.iter().enumerate() {
            y.index_axis_mut(Axis(1), oc).mapv_inplace(|v| v + bv);
        }
    }
    Ok(vec![Tensor::float(args[0].elem, y)])
}

pub fn pool(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = floats(&args[0], "pooling")?;
    let out_shape = usize_shape(v)?;
    let spatial = x.ndim() - 2;
    let win = shape::window(v, spatial)?;
    let kernel: Vec<usize> = v
        .i64s("kernel_shape")?
        .unwrap_or_default()
        .iter()
        .map(|&k| k as usize)
        .collect();
    let is_max = kind(v)? == G::MaxPool;
    let include_pad = !is_max && v.i64("count_include_pad")? != 0;
    let ishape: Vec<usize> = x.shape()[2..].to_vec();
    let mut y = ArrayD::<f64>::zeros(IxDyn(&out_shape));
    let mut xi = vec![0usize; x.ndim()];
    for_each_index(&out_shape, |o| {
        let mut acc = if is_max { f64::NEG_INFINITY } else { 0.0 };
        let mut count = 0usize;
        xi[0] = o[0];
        xi[1] = o[1];
        for_each_index(&kernel, |k| {
            let mut inside = true;
            let mut in_padded = true;
            for d in 0..spatial {
                let i = (o[2 + d] * win.strides[d] as usize + k[d] * win.dilations[d] as usize)
                    as i64
                    - win.pads[d];
                if i < 0 || i >= ishape[d] as i64 {
                    inside = false;
                    in_padded &= i >= -win.pads[d] && i < ishape[d] as i64 + win.pads[spatial + d];
                } else {
                    xi[2 + d] = i as usize;
                }
            }
            if inside {
                let val = x[IxDyn(&xi)];
                acc = if is_max {
                    if val > acc || val.is_nan() { val } else { acc }
                } else {
                    acc + val
                };
                count += 1;
            } else if include_pad && in_padded {
                count += 1;
            }
        });
        y[IxDyn(o)] = if is_max {
            acc
        } else {
            acc / count.max(1) as f64
        };
    });
    Ok(vec![Tensor::float(args[0].elem, y)])
}

pub fn global_average_pool(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = floats(&args[0], "global_average_pool")?;
    let (n, c) = (x.shape()[0], x.shape()[1]);
    let flat = x
        .as_standard_layout()
        .into_owned()
        .into_shape_with_order((n, c, x.len() / (n * c).max(1)))
        .map_err(|e| e.to_string())?;
    let mean = flat.mean_axis(Axis(2)).ok_or("empty spatial extent")?;
    let y = mean
        .into_shape_with_order(IxDyn(&usize_shape(v)?))
        .map_err(|e| e.to_string())?;
    Ok(vec![Tensor::float(args[0].elem, y)])
}

/// Normalizes `x` viewed as `[outer, inner]` rows; returns the normalized values.
fn normalize_rows(
    x: &ArrayD<f64>,
    outer: usize,
    inner: usize,
    eps: f64,
) -> Result<Array2<f64>, String> {
    let mut a = x
        .as_standard_layout()
        .into_owned()
        .into_shape_with_order((outer, inner))
        .map_err(|e| e.to_string())?;
    for mut row in a.rows_mut() {
        let mean = row.sum() / inner as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / inner as f64;
        let inv = 1.0 / (var + eps).sqrt();
        row.mapv_inplace(|v| (v - mean) * inv);
    }
    Ok(a)
}

pub fn layer_norm(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = floats(&args[0], "layer_norm")?;
    let a = shape::axis(v.i64("axis")?, x.ndim())?;
    let inner: usize = x.shape()[a..].iter().product();
    let outer = x.len() / inner.max(1);
    let normed = normalize_rows(x, outer, inner, v.f64("epsilon")?)?;
    let mut y = normed
        .into_shape_with_order(IxDyn(x.shape()))
        .map_err(|e| e.to_string())?;
    let scale = floats(&args[1], "layer_norm")?;
    y = &y
        * &scale
            .broadcast(IxDyn(x.shape()))
            .ok_or("scale does not broadcast")?;
    if let Some(b) = args.get(2) {
        y = &y
            + &floats(b, "layer_norm")?
                .broadcast(IxDyn(x.shape()))
                .ok_or("bias does not broadcast")?;
    }
    Ok(vec![Tensor::float(args[0].elem, y)])
}

/// Applies `y = y * scale[c] + bias[c]` along axis 1.
fn per_channel(y: &mut ArrayD<f64>, scale: &ArrayD<f64>, bias: &ArrayD<f64>) {
    for (c, (&s, &b)) in scale.iter().zip(bias.iter()).enumerate() {
        y.index_axis_mut(Axis(1), c).mapv_inplace(|v| v * s + b);
    }
}

pub fn instance_norm(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = floats(&args[0], "instance_norm")?;
    let (n, c) = (x.shape()[0], x.shape()[1]);
    let inner = x.len() / (n * c).max(1);
    let normed = normalize_rows(x, n * c, inner, v.f64("epsilon")?)?;
    let mut y = normed
        .into_shape_with_order(IxDyn(x.shape()))
        .map_err(|e| e.to_string())?;
    per_channel(
        &mut y,
        floats(&args[1], "instance_norm")?,
        floats(&args[2], "instance_norm")?,
    );
    Ok(vec![Tensor::float(args[0].elem, y)])
}

pub fn batch_norm(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = floats(&args[0], "batch_norm")?;
    let eps = v.f64("epsilon")?;
    let [scale, bias, mean, var] = [1, 2, 3, 4].map(|i| floats(&args[i], "batch_norm"));
    let (scale, bias, mean, var) = (scale?, bias?, mean?, var?);
    let mut y = x.clone();
    if y.ndim() < 2 {
        return Err("batch_norm needs a tensor of rank 2 or more".to_string());
    }
    for c in 0..y.shape()[1] {
        let inv = scale[[c]] / (var[[c]] + eps).sqrt();
        let (m, b) = (mean[[c]], bias[[c]]);
        y.index_axis_mut(Axis(1), c)
            .mapv_inplace(|v| (v - m) * inv + b);
    }
    Ok(vec![Tensor::float(args[0].elem, y)])
}

pub fn softmax(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = floats(&args[0], "softmax")?;
    let a = Axis(shape::axis(v.i64("axis")?, x.ndim())?);
    let max = x
        .fold_axis(a, f64::NEG_INFINITY, |&m, &v| m.max(v))
        .insert_axis(a);
    let e = (x - &max).mapv(f64::exp);
    let sum = e.sum_axis(a).insert_axis(a);
    Ok(vec![Tensor::float(args[0].elem, &e / &sum)])
}

/// arg_max and arg_min.
pub fn arg_reduce(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = args[0].to_f64();
    let a = shape::axis(v.i64("axis")?, x.ndim())?;
    let last = v.i64("select_last_index")? != 0;
    let max = kind(v)? == G::ArgMax;
    let y = x.map_axis(Axis(a), |lane| {
        // A NaN is the best of all, the first (or last) of them taken, as
        // numpy's argmax and argmin take it.
        let mut best = 0;
        for (i, &e) in lane.iter().enumerate() {
            let b = lane[best];
            let better = if max { e > b } else { e < b };
            let tie = e == b || (e.is_nan() && b.is_nan());
            if better || (e.is_nan() && !b.is_nan()) || (last && tie) {
                best = i;
            }
        }
        best as i64
    });
    let y = y
        .into_shape_with_order(IxDyn(&usize_shape(v)?))
        .map_err(|e| e.to_string())?;
    Ok(vec![Tensor::int(ElemType::I64, y)])
}

pub fn reduce(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let t = &args[0];
    let x = t.to_f64();
    let axes = shape::reduce_axes(v, x.ndim())?;
    let name = kind(v)?;
    let mut y = x;
    let mut count = 1usize;
    for &a in axes.iter().rev() {
        count *= y.shape()[a];
        y = match name {
            G::ReduceSum | G::ReduceMean => y.sum_axis(Axis(a)),
            G::ReduceProd => y.fold_axis(Axis(a), 1.0, |&p, &v| p * v),
            G::ReduceMax => y.fold_axis(Axis(a), f64::NEG_INFINITY, |&m, &v| {
                if v > m || v.is_nan() { v } else { m }
            }),
            _ => y.fold_axis(Axis(a), f64::INFINITY, |&m, &v| {
                if v < m || v.is_nan() { v } else { m }
            }),
        };
    }
    if name == G::ReduceMean {
        y.mapv_inplace(|v| v / count as f64);
    }
    let y = y
        .into_shape_with_order(IxDyn(&usize_shape(v)?))
        .map_err(|e| e.to_string())?;
    Ok(vec![if t.elem.is_float() {
        Tensor::float(t.elem, y)
    } else {
        Tensor::int(t.elem, y.mapv(|v| v as i64))
    }])
}
