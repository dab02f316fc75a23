//! Shape inference of the graph dialect: result types from operand types
//! and attributes, following ONNX's rules.

use super::{GraphOp as G, kind};
use ircc_core::registry::OpView;
use ircc_core::{ElemType, TensorType, Type};

pub type Infer = Result<Vec<Type>, String>;

fn one(shape: Vec<i64>, elem: ElemType) -> Infer {
    Ok(vec![Type::tensor(shape, elem)])
}

/// Normalizes a possibly negative axis for a tensor of rank `rank`.
pub fn axis(a: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    if a < -r || a >= r.max(1) {
        return Err(format!("axis {a} is out of range for rank {rank}"));
    }
    Ok(if a < 0 { (a + r) as usize } else { a as usize })
}

/// Numpy broadcasting of two shapes.
pub fn broadcast(a: &[i64], b: &[i64]) -> Result<Vec<i64>, String> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(format!(
                    "shapes {a:?} and {b:?} cannot be broadcast together"
                ));
            }
        };
    }
    Ok(out)
}

/// The axis of `operand`, broadcast to `result`, that moves with the
/// result's axis `a`: numpy broadcasting aligns the trailing axes; none
/// where the operand is broadcast along it (or lacks it).
pub fn broadcast_source_axis(result: &[i64], operand: &[i64], a: usize) -> Option<usize> {
    let o = a.checked_sub(result.len().saturating_sub(operand.len()))?;
    (operand.get(o)? == result.get(a)?).then_some(o)
}

fn same_elem(v: &OpView, ts: &[&TensorType]) -> Result<ElemType, String> {
    let e = ts[0].elem;
    if let Some(t) = ts.iter().find(|t| t.elem != e) {
        return Err(format!(
            "operands have different element types ({e} and {})",
            t.elem
        ));
    }
    let _ = v;
    Ok(e)
}

pub fn elementwise_unary(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    let float_only = !matches!(
        kind(v)?,
        G::Neg | G::Abs | G::Relu | G::Identity | G::Clip | G::Sign
    );
    if float_only && !x.elem.is_float() {
        return Err(format!("needs a float tensor, not {x}"));
    }
    one(x.shape.clone(), x.elem)
}

pub fn not(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    if x.elem.is_float() {
        return Err(format!("needs an i1 or integer tensor, not {x}"));
    }
    one(x.shape.clone(), x.elem)
}

/// and, or, xor (i1 or integers) and the shifts (integers).
pub fn bitwise(v: &OpView) -> Infer {
    let (a, b) = (v.tensor(0)?, v.tensor(1)?);
    let elem = same_elem(v, &[a, b])?;
    let shift = matches!(kind(v)?, G::ShiftLeft | G::ShiftRight);
    if elem.is_float() || (shift && elem == ElemType::I1) {
        let needs = if shift { "integer" } else { "i1 or integer" };
        return Err(format!("needs {needs} tensors, not {elem}"));
    }
    one(broadcast(&a.shape, &b.shape)?, elem)
}

pub fn elementwise_binary(v: &OpView) -> Infer {
    let (a, b) = (v.tensor(0)?, v.tensor(1)?);
    let elem = same_elem(v, &[a, b])?;
    if elem == ElemType::I1 {
        return Err("arithmetic on i1 tensors is not defined".to_string());
    }
    one(broadcast(&a.shape, &b.shape)?, elem)
}

pub fn compare(v: &OpView) -> Infer {
    let (a, b) = (v.tensor(0)?, v.tensor(1)?);
    same_elem(v, &[a, b])?;
    one(broadcast(&a.shape, &b.shape)?, ElemType::I1)
}

pub fn where_(v: &OpView) -> Infer {
    let (c, x, y) = (v.tensor(0)?, v.tensor(1)?, v.tensor(2)?);
    if c.elem != ElemType::I1 {
        return Err(format!("condition must be i1, not {}", c.elem));
    }
    let elem = same_elem(v, &[x, y])?;
    one(broadcast(&broadcast(&c.shape, &x.shape)?, &y.shape)?, elem)
}

pub fn cast(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    match v.attr("to") {
        Some(ircc_core::Attribute::Type(Type::Scalar(e))) => one(x.shape.clone(), *e),
        _ => Err("attribute 'to' must be an element type such as f32".to_string()),
    }
}

pub fn matmul(v: &OpView) -> Infer {
    let (a, b) = (v.tensor(0)?, v.tensor(1)?);
    let elem = same_elem(v, &[a, b])?;
    if a.rank() == 0 || b.rank() == 0 {
        return Err("operands of matmul must have rank 1 or more".to_string());
    }
    let mut sa = a.shape.clone();
    let mut sb = b.shape.clone();
    if sa.len() == 1 {
        sa.insert(0, 1);
    }
    if sb.len() == 1 {
        sb.push(1);
    }
    let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
    let (k2, n) = (sb[sb.len() - 2], sb[sb.len() - 1]);
    if k != k2 {
        return Err(format!("contracting dimensions differ: {a} and {b}"));
    }
    let mut shape = broadcast(&sa[..sa.len() - 2], &sb[..sb.len() - 2])?;
    if a.rank() > 1 {
        shape.push(m);
    }
    if b.rank() > 1 {
        shape.push(n);
    }
    one(shape, elem)
}

pub fn gemm(v: &OpView) -> Infer {
    let (a, b) = (v.tensor(0)?, v.tensor(1)?);
    let elem = same_elem(v, &[a, b])?;
    if a.rank() != 2 || b.rank() != 2 {
        return Err("gemm operands a and b must be 2-D".to_string());
    }
    let (m, k) = if v.i64("trans_a")? != 0 {
        (a.shape[1], a.shape[0])
    } else {
        (a.shape[0], a.shape[1])
    };
    let (k2, n) = if v.i64("trans_b")? != 0 {
        (b.shape[1], b.shape[0])
    } else {
        (b.shape[0], b.shape[1])
    };
    if k != k2 {
        return Err(format!("contracting dimensions differ: {k} and {k2}"));
    }
    if v.num_operands() == 3 {
        let c = v.tensor(2)?;
        let out = broadcast(&c.shape, &[m, n])?;
        if out != [m, n] {
            return Err(format!(
                "c of shape {:?} does not broadcast to [{m}, {n}]",
                c.shape
            ));
        }
    }
    one(vec![m, n], elem)
}

/// Stride, pad and dilation lists of a convolution or pool with `spatial` axes.
pub struct Window {
    pub strides: Vec<i64>,
    pub pads: Vec<i64>,
    pub dilations: Vec<i64>,
}

pub fn window(v: &OpView, spatial: usize) -> Result<Window, String> {
    let get = |name: &str, n: usize, fill: i64| -> Result<Vec<i64>, String> {
        match v.i64s(name)? {
            None => Ok(vec![fill; n]),
            Some(x) if x.len() == n => Ok(x),
            Some(x) => Err(format!(
                "'{name}' has {} values but {n} are needed",
                x.len()
            )),
        }
    };
    let w = Window {
        strides: get("strides", spatial, 1)?,
        pads: get("pads", 2 * spatial, 0)?,
        dilations: get("dilations", spatial, 1)?,
    };
    if w.strides.iter().chain(&w.dilations).any(|&s| s < 1) {
        return Err("strides and dilations must be positive".to_string());
    }
    if w.pads.iter().any(|&p| p < 0) {
        return Err("pads must not be negative".to_string());
    }
    Ok(w)
}

pub fn conv(v: &OpView) -> Infer {
    let (x, w) = (v.tensor(0)?, v.tensor(1)?);
    let elem = same_elem(v, &[x, w])?;
    if x.rank() < 3 || w.rank() != x.rank() {
        return Err(format!(
            "conv needs x and w of the same rank, at least 3 ({x}, {w})"
        ));
    }
    let spatial = x.rank() - 2;
    let g = v.i64("group")?;
    if g < 1 || x.shape[1] % g != 0 || w.shape[0] % g != 0 {
        return Err(format!(
            "group {g} does not divide the channels ({} in, {} out)",
            x.shape[1], w.shape[0]
        ));
    }
    if w.shape[1] * g != x.shape[1] {
        return Err(format!(
            "w has {} input channels per group but x has {} channels in {g} groups",
            w.shape[1], x.shape[1]
        ));
    }
    if v.num_operands() == 3 {
        let b = v.tensor(2)?;
        if b.shape != [w.shape[0]] {
            return Err(format!(
                "bias must have shape [{}], not {:?}",
                w.shape[0], b.shape
            ));
        }
    }
    let win = window(v, spatial)?;
    let mut shape = vec![x.shape[0], w.shape[0]];
    for i in 0..spatial {
        let k = (w.shape[2 + i] - 1) * win.dilations[i] + 1;
        let padded = x.shape[2 + i] + win.pads[i] + win.pads[spatial + i];
        if padded < k {
            return Err(format!(
                "kernel of extent {k} is larger than the padded input ({padded}) on spatial axis {i}"
            ));
        }
        shape.push((padded - k) / win.strides[i] + 1);
    }
    one(shape, elem)
}

pub fn conv_transpose(v: &OpView) -> Infer {
    let (x, w) = (v.tensor(0)?, v.tensor(1)?);
    let elem = same_elem(v, &[x, w])?;
    if x.rank() < 3 || w.rank() != x.rank() {
        return Err(format!(
            "conv_transpose needs x and w of the same rank, at least 3 ({x}, {w})"
        ));
    }
    let spatial = x.rank() - 2;
    let g = v.i64("group")?;
    if g < 1 || w.shape[0] != x.shape[1] {
        return Err(format!(
            "w has {} input channels but x has {}",
            w.shape[0], x.shape[1]
        ));
    }
    let win = window(v, spatial)?;
    let out_pad = v
        .i64s("output_padding")?
        .unwrap_or_else(|| vec![0; spatial]);
    if out_pad.len() != spatial {
        return Err("output_padding needs one value per spatial axis".to_string());
    }
    let mut shape = vec![x.shape[0], w.shape[1] * g];
    for (i, extra) in out_pad.iter().enumerate() {
        let k = (w.shape[2 + i] - 1) * win.dilations[i] + 1;
        let n =
            (x.shape[2 + i] - 1) * win.strides[i] + k + extra - win.pads[i] - win.pads[spatial + i];
        if n < 1 {
            return Err(format!(
                "output extent {n} on spatial axis {i} is not positive"
            ));
        }
        shape.push(n);
    }
    one(shape, elem)
}

pub fn pool(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    if x.rank() < 3 {
        return Err(format!("pooling needs a tensor of rank 3 or more, not {x}"));
    }
    let spatial = x.rank() - 2;
    let kernel = v.i64s("kernel_shape")?.ok_or("missing kernel_shape")?;
    if kernel.len() != spatial {
        return Err(format!(
            "kernel_shape has {} values but x has {spatial} spatial axes",
            kernel.len()
        ));
    }
    if let Some(k) = kernel.iter().find(|&&k| k < 1) {
        return Err(format!(
            "kernel_shape holds {k}: a window is at least 1 wide"
        ));
    }
    let win = window(v, spatial)?;
    let ceil = v.i64("ceil_mode")? != 0;
    let mut shape = x.shape[..2].to_vec();
    for (i, extent) in kernel.iter().enumerate() {
        let k = (extent - 1) * win.dilations[i] + 1;
        let padded = x.shape[2 + i] + win.pads[i] + win.pads[spatial + i];
        if padded < k {
            return Err(format!(
                "window of extent {k} is larger than the padded input ({padded})"
            ));
        }
        let span = padded - k;
        let mut n = if ceil {
            (span + win.strides[i] - 1) / win.strides[i] + 1
        } else {
            span / win.strides[i] + 1
        };
        // A window that starts in the end padding is dropped (ONNX, PyTorch).
        if ceil && (n - 1) * win.strides[i] >= x.shape[2 + i] + win.pads[i] {
            n -= 1;
        }
        shape.push(n);
    }
    one(shape, x.elem)
}

pub fn global_average_pool(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    if x.rank() < 3 {
        return Err(format!("needs a tensor of rank 3 or more, not {x}"));
    }
    let mut shape = x.shape[..2].to_vec();
    shape.extend(std::iter::repeat_n(1, x.rank() - 2));
    one(shape, x.elem)
}

pub fn norm(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    if !x.elem.is_float() {
        return Err(format!("needs a float tensor, not {x}"));
    }
    let channels = || if x.rank() > 1 { x.shape[1] } else { 1 };
    match kind(v)? {
        G::LayerNorm => {
            let a = axis(v.i64("axis")?, x.rank())?;
            let norm_shape = &x.shape[a..];
            for i in 1..v.num_operands() {
                let p = v.tensor(i)?;
                if broadcast(&p.shape, norm_shape)? != norm_shape {
                    return Err(format!(
                        "{p} does not broadcast to the normalized shape {norm_shape:?}"
                    ));
                }
            }
        }
        _ => {
            for i in 1..v.num_operands() {
                let p = v.tensor(i)?;
                if p.shape != [channels()] {
                    return Err(format!(
                        "operand #{i} must have shape [{}], not {:?}",
                        channels(),
                        p.shape
                    ));
                }
            }
        }
    }
    one(x.shape.clone(), x.elem)
}

pub fn softmax(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    axis(v.i64("axis")?, x.rank())?;
    if !x.elem.is_float() {
        return Err(format!("needs a float tensor, not {x}"));
    }
    one(x.shape.clone(), x.elem)
}

/// The sorted, normalized axes of a reduction (all axes when absent).
pub fn reduce_axes(v: &OpView, rank: usize) -> Result<Vec<usize>, String> {
    let mut axes = match v.i64s("axes")? {
        None => (0..rank).collect(),
        Some(a) => a
            .iter()
            .map(|&x| axis(x, rank))
            .collect::<Result<Vec<_>, _>>()?,
    };
    axes.sort_unstable();
    if axes.windows(2).any(|w| w[0] == w[1]) {
        return Err("an axis is reduced twice".to_string());
    }
    Ok(axes)
}

/// arg_max and arg_min: the searched axis dropped or kept as 1; i64.
pub fn arg_reduce(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    let a = axis(v.i64("axis")?, x.rank())?;
    if x.elem == ElemType::I1 {
        return Err(format!("needs a numeric tensor, not {x}"));
    }
    if x.shape[a] == 0 {
        return Err("the searched axis is empty".to_string());
    }
    let mut shape = x.shape.clone();
    if v.i64("keepdims")? != 0 {
        shape[a] = 1;
    } else {
        shape.remove(a);
    }
    one(shape, ElemType::I64)
}

pub fn reduce(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    let axes = reduce_axes(v, x.rank())?;
    let keep = v.i64("keepdims")? != 0;
    let shape = x
        .shape
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| match (axes.contains(&i), keep) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    one(shape, x.elem)
}

pub fn reshape(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    let shape = v.i64s("shape")?.ok_or("missing shape")?;
    if shape.iter().any(|&d| d < 0) {
        return Err(format!("shape {shape:?} must be static and non-negative"));
    }
    if TensorType::new(shape.clone(), x.elem).num_elements() != x.num_elements() {
        return Err(format!(
            "cannot reshape {x} ({} elements) to {shape:?}",
            x.num_elements()
        ));
    }
    one(shape, x.elem)
}

pub fn perm(v: &OpView, rank: usize) -> Result<Vec<usize>, String> {
    let p: Vec<usize> = match v.i64s("perm")? {
        None => (0..rank).rev().collect(),
        Some(p) => p
            .iter()
            .map(|&a| usize::try_from(a).map_err(|_| format!("bad perm {p:?}")))
            .collect::<Result<_, _>>()?,
    };
    let mut seen = p.clone();
    seen.sort_unstable();
    if seen != (0..rank).collect::<Vec<_>>() {
        return Err(format!("perm {p:?} is not a permutation of {rank} axes"));
    }
    Ok(p)
}

pub fn transpose(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    let p = perm(v, x.rank())?;
    one(p.iter().map(|&i| x.shape[i]).collect(), x.elem)
}

pub fn squeeze(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    let axes: Vec<usize> = match v.i64s("axes")? {
        None => (0..x.rank()).filter(|&i| x.shape[i] == 1).collect(),
        Some(a) => a
            .iter()
            .map(|&i| axis(i, x.rank()))
            .collect::<Result<_, _>>()?,
    };
    if let Some(&a) = axes.iter().find(|&&a| x.shape[a] != 1) {
        return Err(format!("cannot squeeze axis {a} of extent {}", x.shape[a]));
    }
    one(
        (0..x.rank())
            .filter(|i| !axes.contains(i))
            .map(|i| x.shape[i])
            .collect(),
        x.elem,
    )
}

pub fn unsqueeze_shape(shape: &[i64], axes: &[i64]) -> Result<Vec<i64>, String> {
    let rank = shape.len() + axes.len();
    let mut axes: Vec<usize> = axes
        .iter()
        .map(|&a| axis(a, rank))
        .collect::<Result<_, _>>()?;
    axes.sort_unstable();
    if axes.windows(2).any(|w| w[0] == w[1]) {
        return Err("an axis is inserted twice".to_string());
    }
    let mut it = shape.iter();
    Ok((0..rank)
        .map(|i| {
            if axes.contains(&i) {
                1
            } else {
                *it.next().unwrap_or(&1)
            }
        })
        .collect())
}

pub fn unsqueeze(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    let axes = v.i64s("axes")?.ok_or("missing axes")?;
    one(unsqueeze_shape(&x.shape, &axes)?, x.elem)
}

pub fn flatten(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    let r = x.rank() as i64;
    let a = v.i64("axis")?;
    if a < -r || a > r {
        return Err(format!("axis {a} is out of range for rank {r}"));
    }
    let a = if a < 0 { a + r } else { a } as usize;
    let count = |dims: &[i64]| TensorType::new(dims.to_vec(), x.elem).num_elements();
    one(vec![count(&x.shape[..a]), count(&x.shape[a..])], x.elem)
}

/// A normalized slice: for each axis, its start, step and count.
pub struct SliceSpec {
    pub start: Vec<i64>,
    pub step: Vec<i64>,
    pub count: Vec<i64>,
}

pub fn slice_spec(v: &OpView, shape: &[i64]) -> Result<SliceSpec, String> {
    let rank = shape.len();
    let starts = v.i64s("starts")?.ok_or("missing starts")?;
    let ends = v.i64s("ends")?.ok_or("missing ends")?;
    let axes: Vec<usize> = match v.i64s("axes")? {
        None => (0..starts.len()).collect(),
        Some(a) => a.iter().map(|&x| axis(x, rank)).collect::<Result<_, _>>()?,
    };
    let steps = v.i64s("steps")?.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err("starts, ends, axes and steps must have the same length".to_string());
    }
    let mut s = SliceSpec {
        start: vec![0; rank],
        step: vec![1; rank],
        count: shape.to_vec(),
    };
    for (i, &a) in axes.iter().enumerate() {
        let dim = shape[a];
        let step = steps[i];
        if step == 0 {
            return Err("slice step must not be 0".to_string());
        }
        let clamp = |x: i64, lo: i64, hi: i64| x.max(lo).min(hi);
        let norm = |x: i64| if x < 0 { x.saturating_add(dim) } else { x };
        let (start, end) = if step > 0 {
            (clamp(norm(starts[i]), 0, dim), clamp(norm(ends[i]), 0, dim))
        } else {
            (
                clamp(norm(starts[i]), -1, dim - 1),
                clamp(norm(ends[i]), -1, dim - 1),
            )
        };
        let count = if step > 0 {
            (end - start + step - 1).div_euclid(step)
        } else {
            (start - end + (-step) - 1).div_euclid(-step)
        };
        s.start[a] = start;
        s.step[a] = step;
        s.count[a] = count.max(0);
    }
    Ok(s)
}

pub fn slice(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    one(slice_spec(v, &x.shape)?.count, x.elem)
}

pub fn gather(v: &OpView) -> Infer {
    let (x, idx) = (v.tensor(0)?, v.tensor(1)?);
    if !idx.elem.is_int() {
        return Err(format!("indices must be integers, not {}", idx.elem));
    }
    let a = axis(v.i64("axis")?, x.rank())?;
    if kind(v)? == G::GatherElements {
        if idx.rank() != x.rank() {
            return Err("indices must have the rank of x".to_string());
        }
        return one(idx.shape.clone(), x.elem);
    }
    let mut shape = x.shape[..a].to_vec();
    shape.extend(&idx.shape);
    shape.extend(&x.shape[a + 1..]);
    one(shape, x.elem)
}

pub fn concat(v: &OpView) -> Infer {
    let ts = v.tensors()?;
    let first = ts.first().ok_or("concat needs at least one operand")?;
    let a = axis(v.i64("axis")?, first.rank())?;
    let elem = same_elem(v, &ts)?;
    let mut shape = first.shape.clone();
    shape[a] = 0;
    for t in &ts {
        if t.rank() != first.rank() || (0..t.rank()).any(|i| i != a && t.shape[i] != first.shape[i])
        {
            return Err(format!("{t} does not match {first} outside axis {a}"));
        }
        shape[a] += t.shape[a];
    }
    one(shape, elem)
}

pub fn split_sizes(
    v: &OpView,
    x: &TensorType,
    outputs: usize,
) -> Result<(usize, Vec<i64>), String> {
    let a = axis(v.i64("axis")?, x.rank())?;
    let sizes = match v.i64s("split")? {
        Some(s) => s,
        None => {
            let n = outputs as i64;
            if n == 0 {
                return Err("split needs at least one result".to_string());
            }
            if n > x.shape[a] && x.shape[a] > 0 {
                return Err(format!(
                    "split of an axis of extent {} into {n} equal parts would leave parts empty",
                    x.shape[a]
                ));
            }
            let chunk = (x.shape[a] + n - 1) / n;
            (0..n)
                .map(|i| (x.shape[a] - i * chunk).clamp(0, chunk))
                .collect()
        }
    };
    if sizes.len() != outputs
        || sizes.iter().sum::<i64>() != x.shape[a]
        || sizes.iter().any(|&s| s < 0)
    {
        return Err(format!(
            "split sizes {sizes:?} do not divide extent {} into {outputs} parts",
            x.shape[a]
        ));
    }
    Ok((a, sizes))
}

pub fn split(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    let (a, sizes) = split_sizes(v, x, v.result_types().len())?;
    Ok(sizes
        .iter()
        .map(|&s| {
            let mut shape = x.shape.clone();
            shape[a] = s;
            Type::tensor(shape, x.elem)
        })
        .collect())
}

pub fn pad(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    let pads = v.i64s("pads")?.ok_or("missing pads")?;
    if pads.len() != 2 * x.rank() {
        return Err(format!(
            "pads has {} values but rank {} needs {}",
            pads.len(),
            x.rank(),
            2 * x.rank()
        ));
    }
    let mode = v.str("mode")?;
    if !matches!(mode, "constant" | "reflect" | "edge") {
        return Err(format!("unsupported pad mode '{mode}'"));
    }
    let r = x.rank();
    let shape: Vec<i64> = (0..r).map(|i| x.shape[i] + pads[i] + pads[r + i]).collect();
    if shape.iter().any(|&d| d < 0) {
        return Err(format!("pads {pads:?} remove more than the tensor has"));
    }
    if mode == "reflect"
        && (0..r)
            .any(|i| (pads[i] > 0 || pads[r + i] > 0) && (pads[i].max(pads[r + i]) >= x.shape[i]))
    {
        return Err("reflect padding must be smaller than the padded axis".to_string());
    }
    one(shape, x.elem)
}

pub fn expand(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    let shape = v.i64s("shape")?.ok_or("missing shape")?;
    one(broadcast(&x.shape, &shape)?, x.elem)
}

pub fn tile(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    let reps = v.i64s("repeats")?.ok_or("missing repeats")?;
    if reps.len() != x.rank() || reps.iter().any(|&r| r < 0) {
        return Err(format!(
            "repeats {reps:?} must give one non-negative count per axis"
        ));
    }
    one(
        x.shape.iter().zip(&reps).map(|(d, r)| d * r).collect(),
        x.elem,
    )
}

pub fn depth_space(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    let b = v.i64("blocksize")?;
    if x.rank() != 4 || b < 1 {
        return Err("needs a 4-D tensor and a positive blocksize".to_string());
    }
    let (n, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    if kind(v)? == G::DepthToSpace {
        let mode = v.str("mode")?;
        if !matches!(mode, "DCR" | "CRD") {
            return Err(format!("mode must be DCR or CRD, not '{mode}'"));
        }
        if c % (b * b) != 0 {
            return Err(format!(
                "channels {c} are not divisible by blocksize² {}",
                b * b
            ));
        }
        one(vec![n, c / (b * b), h * b, w * b], x.elem)
    } else {
        if h % b != 0 || w % b != 0 {
            return Err(format!(
                "spatial extents {h}x{w} are not divisible by blocksize {b}"
            ));
        }
        one(vec![n, c * b * b, h / b, w / b], x.elem)
    }
}

pub fn resize(v: &OpView) -> Infer {
    let x = v.tensor(0)?;
    let mode = v.str("mode")?;
    if !matches!(mode, "nearest" | "linear") {
        return Err(format!(
            "unsupported resize mode '{mode}' (nearest, linear)"
        ));
    }
    let ctm = v.str("coordinate_transformation_mode")?;
    if !matches!(
        ctm,
        "half_pixel" | "asymmetric" | "align_corners" | "pytorch_half_pixel"
    ) {
        return Err(format!(
            "unsupported coordinate_transformation_mode '{ctm}'"
        ));
    }
    let nm = v.str("nearest_mode")?;
    if !matches!(
        nm,
        "round_prefer_floor" | "round_prefer_ceil" | "floor" | "ceil"
    ) {
        return Err(format!("unsupported nearest_mode '{nm}'"));
    }
    let shape = match (v.i64s("sizes")?, v.f64s("scales")?) {
        (Some(s), None) => s,
        (None, Some(sc)) => x
            .shape
            .iter()
            .zip(&sc)
            .map(|(&d, &s)| (d as f64 * s).floor() as i64)
            .collect(),
        _ => return Err("resize needs exactly one of 'sizes' and 'scales'".to_string()),
    };
    if shape.len() != x.rank() || shape.iter().any(|&d| d < 1) {
        return Err(format!(
            "resize target {shape:?} must give a positive extent per axis"
        ));
    }
    if x.shape.contains(&0) {
        return Err(format!(
            "resize of {} has an empty axis to sample from",
            Type::Tensor(x.clone())
        ));
    }
    one(shape, x.elem)
}

pub fn constant(v: &OpView) -> Infer {
    match v.attr("value") {
        Some(ircc_core::Attribute::Dense(d)) => Ok(vec![Type::Tensor(d.ty.clone())]),
        _ => Err("attribute 'value' must be a dense constant".to_string()),
    }
}

pub fn param(v: &OpView) -> Result<(), String> {
    v.result_tensor(0)?;
    if v.str("name")?.is_empty() {
        return Err("the weight name must not be empty".to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::broadcast_source_axis;

    #[test]
    fn a_broadcast_operand_moves_with_its_aligned_axes_only() {
        // A bias of 96 added to [1, 56, 56, 96]: only the channels move it.
        let result = [1, 56, 56, 96];
        assert_eq!(broadcast_source_axis(&result, &[96], 3), Some(0));
        assert_eq!(broadcast_source_axis(&result, &[96], 2), None);
        // A per-channel scale [96, 1, 1] on NCHW [1, 96, 7, 7].
        let nchw = [1, 96, 7, 7];
        assert_eq!(broadcast_source_axis(&nchw, &[96, 1, 1], 1), Some(0));
        assert_eq!(broadcast_source_axis(&nchw, &[96, 1, 1], 3), None);
        assert_eq!(broadcast_source_axis(&nchw, &[96, 1, 1], 0), None);
        // A unit axis of both moves with itself.
        assert_eq!(broadcast_source_axis(&nchw, &[1, 96, 1, 1], 0), Some(0));
        // An operand of the result's shape moves with every axis, and an
        // axis past the result moves nothing.
        assert_eq!(broadcast_source_axis(&nchw, &nchw, 2), Some(2));
        assert_eq!(broadcast_source_axis(&nchw, &nchw, 4), None);
    }
}
