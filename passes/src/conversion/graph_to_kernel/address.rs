//! Addresses: index expressions over a kernel's index variables, the
//! row-major layout of a tensor, and the rewrites that make a simplified
//! address exact on the GPU (non-negative division operands, i32
//! constants), checked in debug builds against the map they came from.

use ircc_core::{AffineExpr, AffineMap};

/// An index: an affine expression over the kernel's index variables.
pub type Ix = AffineExpr;

/// Row-major strides of `shape`.
pub fn strides(shape: &[i64]) -> Vec<i64> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The offset of `idx` in a row-major tensor of `shape`.
pub fn linearize(idx: &[Ix], shape: &[i64]) -> Ix {
    idx.iter()
        .zip(strides(shape))
        .fold(Ix::constant(0), |acc, (i, s)| {
            acc + i.clone() * Ix::constant(s)
        })
}

/// The multi-index of offset `i` in a row-major tensor of `shape`.
pub fn delinearize(i: &Ix, shape: &[i64]) -> Vec<Ix> {
    let total: i64 = shape.iter().product();
    strides(shape)
        .iter()
        .zip(shape)
        .map(|(&s, &d)| {
            if d == 1 {
                Ix::constant(0)
            } else if s * d == total {
                i.clone().floor_div(Ix::constant(s))
            } else {
                i.clone().floor_div(Ix::constant(s)).modulo(Ix::constant(d))
            }
        })
        .collect()
}

/// Smallest and largest value of `e` when `Dim(i)` ranges over `[0, ext[i])`.
fn bounds(e: &Ix, ext: &[i64]) -> (i64, i64) {
    use AffineExpr as E;
    match e {
        E::Dim(i) => (0, ext[*i as usize] - 1),
        E::Sym(_) => (i64::MIN / 4, i64::MAX / 4),
        E::Const(c) => (*c, *c),
        E::Add(a, b) => {
            let ((a0, a1), (b0, b1)) = (bounds(a, ext), bounds(b, ext));
            (a0.saturating_add(b0), a1.saturating_add(b1))
        }
        E::Mul(a, b) => {
            let ((a0, a1), (b0, b1)) = (bounds(a, ext), bounds(b, ext));
            let c = [
                a0.saturating_mul(b0),
                a0.saturating_mul(b1),
                a1.saturating_mul(b0),
                a1.saturating_mul(b1),
            ];
            (*c.iter().min().unwrap(), *c.iter().max().unwrap())
        }
        E::FloorDiv(a, b) | E::CeilDiv(a, b) => match b.as_const() {
            Some(d) if d > 0 => {
                let (a0, a1) = bounds(a, ext);
                (a0.div_euclid(d), a1.div_euclid(d) + 1)
            }
            _ => (i64::MIN / 4, i64::MAX / 4),
        },
        E::Mod(_, b) => match b.as_const() {
            Some(d) if d > 0 => (0, d - 1),
            _ => (i64::MIN / 4, i64::MAX / 4),
        },
    }
}

/// Rewrites `e` so that every floordiv, ceildiv and mod has a non-negative
/// left side (`(a + k*d) floordiv d - k` for a negative `a`), which makes
/// truncating division on the GPU agree with floor division.
pub fn nonnegative_divisions(e: &Ix, ext: &[i64]) -> Ix {
    use AffineExpr as E;
    let rec = |x: &Ix| Box::new(nonnegative_divisions(x, ext));
    match e {
        E::Add(a, b) => E::Add(rec(a), rec(b)),
        E::Mul(a, b) => E::Mul(rec(a), rec(b)),
        E::FloorDiv(a, b) | E::CeilDiv(a, b) | E::Mod(a, b) => {
            let a = nonnegative_divisions(a, ext);
            let lo = bounds(&a, ext).0;
            let d = b.as_const().unwrap_or(1);
            if lo >= 0 || d <= 0 {
                return match e {
                    E::FloorDiv(..) => E::FloorDiv(Box::new(a), b.clone()),
                    E::CeilDiv(..) => E::CeilDiv(Box::new(a), b.clone()),
                    _ => E::Mod(Box::new(a), b.clone()),
                };
            }
            let k = (-lo + d - 1) / d;
            let shifted = a + Ix::constant(k * d);
            match e {
                E::FloorDiv(..) => shifted.floor_div(b.as_ref().clone()) - Ix::constant(k),
                E::CeilDiv(..) => shifted.ceil_div(b.as_ref().clone()) - Ix::constant(k),
                _ => shifted.modulo(b.as_ref().clone()),
            }
        }
        other => other.clone(),
    }
}

/// Whether `a` and `b` agree on the corners of the domain and on points
/// spread through it. Debug builds (the tests) check every simplified
/// address with it: the rewrites must never change one.
pub fn agrees(a: &AffineMap, b: &AffineMap, extents: &[i64]) -> bool {
    let n = extents.len();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut point = vec![0i64; n];
    for k in 0..(1usize << n.min(8)) + 512 {
        for (i, p) in point.iter_mut().enumerate() {
            let e = extents[i].max(1);
            *p = if k < 1 << n.min(8) {
                if (k >> i) & 1 == 1 { e - 1 } else { 0 }
            } else {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % e as u64) as i64
            };
        }
        if a.eval(&point, &[]).ok() != b.eval(&point, &[]).ok() {
            return false;
        }
    }
    true
}

pub fn fits_i32(e: &Ix) -> bool {
    use AffineExpr as E;
    match e {
        E::Const(c) => i32::try_from(*c).is_ok(),
        E::Add(a, b) | E::Mul(a, b) | E::FloorDiv(a, b) | E::CeilDiv(a, b) | E::Mod(a, b) => {
            fits_i32(a) && fits_i32(b)
        }
        E::Dim(_) | E::Sym(_) => true,
    }
}

pub fn collect_dims(e: &Ix, out: &mut Vec<u32>) {
    use AffineExpr as E;
    match e {
        E::Dim(i) => {
            if !out.contains(i) {
                out.push(*i);
            }
        }
        E::Add(a, b) | E::Mul(a, b) | E::FloorDiv(a, b) | E::CeilDiv(a, b) | E::Mod(a, b) => {
            collect_dims(a, out);
            collect_dims(b, out);
        }
        E::Sym(_) | E::Const(_) => {}
    }
}
