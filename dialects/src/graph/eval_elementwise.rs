//! Interpretation of elementwise ops: unary math, arithmetic with
//! broadcasting, comparisons, where, cast.

use super::{GraphOp as G, kind};
use ircc_core::interp::Env;
use ircc_core::registry::OpView;
use ircc_core::{ElemType, Tensor, TensorData, Type};
use ndarray::{ArrayD, IxDyn, Zip};

pub type Eval = Result<Vec<Tensor>, String>;

pub(crate) fn erf(x: f64) -> f64 {
    // Abramowitz–Stegun 7.1.26 is too coarse for a reference; use the
    // series for small |x| and the continued fraction for large |x|.
    if x.abs() < 2.5 {
        let mut sum = x;
        let mut term = x;
        let x2 = x * x;
        // For |x| < 2.5 the terms fall below f64 precision within ~60 steps.
        for n in 1..100 {
            let n = n as f64;
            term *= -x2 / n;
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() <= 1e-17 * sum.abs() {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        let ax = x.abs();
        // erfc(x) = exp(-x²)/√π · 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...))))
        let mut f = 0.0;
        for k in (1..60).rev() {
            f = (k as f64 / 2.0) / (ax + f);
        }
        let erfc = (-ax * ax).exp() / std::f64::consts::PI.sqrt() / (ax + f);
        (1.0 - erfc).copysign(x)
    }
}

fn float_input<'a>(t: &'a Tensor, what: &str) -> Result<&'a ArrayD<f64>, String> {
    t.as_float()
        .ok_or_else(|| format!("{what} needs a float tensor"))
}

pub fn unary(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = &args[0];
    let name = kind(v)?;
    if let TensorData::Int(a) = x.data() {
        let f: fn(i64) -> i64 = match name {
            G::Neg => |x| x.wrapping_neg(),
            G::Abs => |x| x.wrapping_abs(),
            G::Relu => |x| x.max(0),
            G::Sign => i64::signum,
            G::Identity => |x| x,
            _ => return Err(format!("'{name}' needs a float tensor")),
        };
        return Ok(vec![Tensor::int(x.elem, a.mapv(f))]);
    }
    if name == G::Identity {
        return Ok(vec![x.clone()]);
    }
    let a = float_input(x, name.name())?;
    let attr = |n: &str| v.f64(n);
    let out = match name {
        G::Neg => a.mapv(|x| -x),
        G::Abs => a.mapv(f64::abs),
        G::Exp => a.mapv(f64::exp),
        G::Log => a.mapv(f64::ln),
        G::Sqrt => a.mapv(f64::sqrt),
        G::Reciprocal => a.mapv(|x| 1.0 / x),
        G::Erf => a.mapv(erf),
        G::Tanh => a.mapv(f64::tanh),
        G::Sin => a.mapv(f64::sin),
        G::Cos => a.mapv(f64::cos),
        G::Tan => a.mapv(f64::tan),
        G::Asin => a.mapv(f64::asin),
        G::Acos => a.mapv(f64::acos),
        G::Atan => a.mapv(f64::atan),
        G::Sinh => a.mapv(f64::sinh),
        G::Cosh => a.mapv(f64::cosh),
        G::Asinh => a.mapv(f64::asinh),
        G::Acosh => a.mapv(f64::acosh),
        G::Atanh => a.mapv(f64::atanh),
        G::Sign => a.mapv(|x| {
            if x == 0.0 || x.is_nan() {
                x
            } else {
                x.signum()
            }
        }),
        G::Floor => a.mapv(f64::floor),
        G::Ceil => a.mapv(f64::ceil),
        G::Round => a.mapv(f64::round_ties_even),
        G::Sigmoid => a.mapv(|x| 1.0 / (1.0 + (-x).exp())),
        // A NaN stays, as numpy's maximum(x, 0) keeps it.
        G::Relu => a.mapv(|x| if x < 0.0 { 0.0 } else { x }),
        G::HardSwish => a.mapv(|x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0)),
        G::LeakyRelu => {
            let alpha = attr("alpha")?;
            a.mapv(|x| if x >= 0.0 { x } else { alpha * x })
        }
        G::HardSigmoid => {
            let (alpha, beta) = (attr("alpha")?, attr("beta")?);
            a.mapv(|x| (alpha * x + beta).clamp(0.0, 1.0))
        }
        G::Gelu => match v.str("approximate")? {
            "tanh" => {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                a.mapv(|x| 0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh()))
            }
            "none" => a.mapv(|x| 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))),
            other => return Err(format!("unknown gelu approximation '{other}'")),
        },
        other => return Err(format!("'{other}' is not a unary op")),
    };
    Ok(vec![Tensor::float(x.elem, out)])
}

pub fn clip(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = &args[0];
    let lo = v.attr("min").and_then(|a| a.as_f64());
    let hi = v.attr("max").and_then(|a| a.as_f64());
    match x.data() {
        TensorData::Float(a) => Ok(vec![Tensor::float(
            x.elem,
            a.mapv(|x| {
                let x = lo.map_or(x, |l| if x < l { l } else { x });
                hi.map_or(x, |h| if x > h { h } else { x })
            }),
        )]),
        TensorData::Int(a) => Ok(vec![Tensor::int(
            x.elem,
            a.mapv(|x| {
                let x = lo.map_or(x, |l| x.max(l as i64));
                hi.map_or(x, |h| x.min(h as i64))
            }),
        )]),
        TensorData::Bool(_) => Err("clip needs a numeric tensor".to_string()),
    }
}

fn out_shape(v: &OpView) -> Result<Vec<usize>, String> {
    Ok(v.result_tensor(0)?
        .shape
        .iter()
        .map(|&d| d as usize)
        .collect())
}

fn zip_with<A: Clone, B: Clone, C>(
    a: &ArrayD<A>,
    b: &ArrayD<B>,
    shape: &[usize],
    f: impl Fn(A, B) -> C,
) -> Result<ArrayD<C>, String> {
    let a = a
        .broadcast(IxDyn(shape))
        .ok_or("operand does not broadcast")?;
    let b = b
        .broadcast(IxDyn(shape))
        .ok_or("operand does not broadcast")?;
    Ok(Zip::from(&a)
        .and(&b)
        .map_collect(|x, y| f(x.clone(), y.clone())))
}

fn int_pow(base: i64, exp: i64) -> i64 {
    if exp < 0 {
        return if base == 1 { 1 } else { 0 };
    }
    base.wrapping_pow(exp.min(u32::MAX as i64) as u32)
}

pub fn binary(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let shape = out_shape(v)?;
    let (a, b) = (&args[0], &args[1]);
    let name = kind(v)?;
    match (a.data(), b.data()) {
        (TensorData::Float(x), TensorData::Float(y)) => {
            let f: fn(f64, f64) -> f64 = match name {
                G::Add => |a, b| a + b,
                G::Sub => |a, b| a - b,
                G::Mul => |a, b| a * b,
                G::Div => |a, b| a / b,
                G::Pow => f64::powf,
                // NaN wins, as in numpy's maximum and ONNX's reference.
                G::Max => |a, b| {
                    if a.is_nan() || b.is_nan() {
                        f64::NAN
                    } else {
                        a.max(b)
                    }
                },
                G::Min => |a, b| {
                    if a.is_nan() || b.is_nan() {
                        f64::NAN
                    } else {
                        a.min(b)
                    }
                },
                other => return Err(format!("'{other}' is not a binary op")),
            };
            Ok(vec![Tensor::float(a.elem, zip_with(x, y, &shape, f)?)])
        }
        (TensorData::Int(x), TensorData::Int(y)) => {
            if name == G::Div && y.iter().any(|&d| d == 0) {
                return Err("integer division by zero".to_string());
            }
            // u64 is held as its bit pattern: what depends on the sign
            // reads it unsigned.
            let unsigned = a.elem == ElemType::U64;
            let f: fn(i64, i64) -> i64 = match name {
                G::Add => i64::wrapping_add,
                G::Sub => i64::wrapping_sub,
                G::Mul => i64::wrapping_mul,
                G::Div if unsigned => |a, b| (a as u64 / b as u64) as i64,
                G::Div => i64::wrapping_div,
                G::Pow => int_pow,
                G::Max if unsigned => |a, b| (a as u64).max(b as u64) as i64,
                G::Max => i64::max,
                G::Min if unsigned => |a, b| (a as u64).min(b as u64) as i64,
                G::Min => i64::min,
                other => return Err(format!("'{other}' is not a binary op")),
            };
            Ok(vec![Tensor::int(a.elem, zip_with(x, y, &shape, f)?)])
        }
        _ => Err(format!("'{name}' needs two float or two integer tensors")),
    }
}

pub fn compare(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let shape = out_shape(v)?;
    let (a, b) = (&args[0], &args[1]);
    let name = kind(v)?;
    let out = match (a.data(), b.data()) {
        (TensorData::Float(x), TensorData::Float(y)) => match name {
            G::Equal => zip_with(x, y, &shape, |a, b| a == b)?,
            G::Less => zip_with(x, y, &shape, |a, b| a < b)?,
            _ => zip_with(x, y, &shape, |a, b| a > b)?,
        },
        (TensorData::Int(x), TensorData::Int(y)) if a.elem == ElemType::U64 => match name {
            G::Equal => zip_with(x, y, &shape, |a, b| a == b)?,
            G::Less => zip_with(x, y, &shape, |a, b| (a as u64) < (b as u64))?,
            _ => zip_with(x, y, &shape, |a, b| (a as u64) > (b as u64))?,
        },
        (TensorData::Int(x), TensorData::Int(y)) => match name {
            G::Equal => zip_with(x, y, &shape, |a, b| a == b)?,
            G::Less => zip_with(x, y, &shape, |a, b| a < b)?,
            _ => zip_with(x, y, &shape, |a, b| a > b)?,
        },
        (TensorData::Bool(x), TensorData::Bool(y)) => match name {
            G::Equal => zip_with(x, y, &shape, |a, b| a == b)?,
            G::Less => zip_with(x, y, &shape, |a, b| !a & b)?,
            _ => zip_with(x, y, &shape, |a, b| a & !b)?,
        },
        _ => return Err("comparison operands must have the same element type".to_string()),
    };
    Ok(vec![Tensor::bool(out)])
}

pub fn not(_v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let x = &args[0];
    match x.data() {
        TensorData::Bool(a) => Ok(vec![Tensor::bool(a.mapv(|b| !b))]),
        TensorData::Int(a) => Ok(vec![Tensor::int(x.elem, a.mapv(|v| !v))]),
        TensorData::Float(_) => Err("not needs an i1 or integer tensor".to_string()),
    }
}

/// and, or, xor and the shifts; a shift by the type's width or more
/// gives 0 (ONNX's reference shifts numpy's fixed-width integers).
pub fn bitwise(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let shape = out_shape(v)?;
    let (a, b) = (&args[0], &args[1]);
    let name = kind(v)?;
    let width = a.elem.byte_size() as i64 * 8;
    let unsigned = a.elem.is_unsigned();
    match (a.data(), b.data()) {
        (TensorData::Bool(x), TensorData::Bool(y)) => {
            let f: fn(bool, bool) -> bool = match name {
                G::And => |p, q| p & q,
                G::Or => |p, q| p | q,
                G::Xor => |p, q| p ^ q,
                other => return Err(format!("'{other}' needs integer tensors")),
            };
            Ok(vec![Tensor::bool(zip_with(x, y, &shape, f)?)])
        }
        (TensorData::Int(x), TensorData::Int(y)) => {
            let out = match name {
                G::And => zip_with(x, y, &shape, |p, q| p & q)?,
                G::Or => zip_with(x, y, &shape, |p, q| p | q)?,
                G::Xor => zip_with(x, y, &shape, |p, q| p ^ q)?,
                G::ShiftLeft => zip_with(x, y, &shape, |p, q| {
                    if (0..width).contains(&q) { p << q } else { 0 }
                })?,
                _ => zip_with(x, y, &shape, |p, q| match (0..width).contains(&q) {
                    true if unsigned => ((p as u64) >> q) as i64,
                    true => p >> q,
                    false if unsigned || p >= 0 => 0,
                    false => -1,
                })?,
            };
            Ok(vec![Tensor::int(a.elem, out)])
        }
        _ => Err(format!("'{name}' needs two i1 or two integer tensors")),
    }
}

fn select<T: Clone>(
    c: &ArrayD<bool>,
    x: &ArrayD<T>,
    y: &ArrayD<T>,
    shape: &[usize],
) -> Result<ArrayD<T>, String> {
    let c = c
        .broadcast(IxDyn(shape))
        .ok_or("condition does not broadcast")?;
    let x = x.broadcast(IxDyn(shape)).ok_or("x does not broadcast")?;
    let y = y.broadcast(IxDyn(shape)).ok_or("y does not broadcast")?;
    Ok(Zip::from(&c)
        .and(&x)
        .and(&y)
        .map_collect(|&c, x, y| if c { x.clone() } else { y.clone() }))
}

pub fn where_(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let shape = out_shape(v)?;
    let c = args[0].as_bool().ok_or("condition must be i1")?;
    let (x, y) = (&args[1], &args[2]);
    let data = match (x.data(), y.data()) {
        (TensorData::Float(a), TensorData::Float(b)) => TensorData::Float(select(c, a, b, &shape)?),
        (TensorData::Int(a), TensorData::Int(b)) => TensorData::Int(select(c, a, b, &shape)?),
        (TensorData::Bool(a), TensorData::Bool(b)) => TensorData::Bool(select(c, a, b, &shape)?),
        _ => return Err("x and y must have the same element type".to_string()),
    };
    Ok(vec![Tensor::new(x.elem, data)])
}

pub fn cast(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let to = match v.attr("to") {
        Some(ircc_core::Attribute::Type(Type::Scalar(e))) => *e,
        _ => return Err("attribute 'to' must be an element type".to_string()),
    };
    Ok(vec![args[0].cast(to)])
}

#[cfg(test)]
mod tests {
    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.5204998778130465),
            (1.0, 0.8427007929497149),
            (2.0, 0.9953222650189527),
            (3.0, 0.9999779095030014),
            (-1.5, -0.9661051464753108),
        ] {
            assert!(
                (super::erf(x) - want).abs() < 1e-14,
                "erf({x}) = {} not {want}",
                super::erf(x)
            );
        }
    }
}
