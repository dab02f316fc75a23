//! Affine maps with `floordiv`, `ceildiv` and `mod`, as MLIR writes them:
//! `affine_map<(d0, d1)[s0] -> (d0 floordiv 4, d1 mod 4 + s0)>`.
//!
//! These are the index maps of the whole compiler (views, layouts, kernel
//! addresses), so they are first-class values: they evaluate, compose and
//! print. Construction folds constants and drops neutral elements, nothing
//! more; real simplification is equality saturation in `passes`.
//!
//! Printing follows MLIR: `a + b * -1` prints as `a - b`, and the parser
//! reads `a - b` back as `a + b * -1`, so print/parse is a fixed point.

use std::fmt;

use crate::limits::MAX_AFFINE_HEIGHT;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AffineExpr {
    Dim(u32),
    Sym(u32),
    Const(i64),
    Add(Box<AffineExpr>, Box<AffineExpr>),
    Mul(Box<AffineExpr>, Box<AffineExpr>),
    FloorDiv(Box<AffineExpr>, Box<AffineExpr>),
    CeilDiv(Box<AffineExpr>, Box<AffineExpr>),
    Mod(Box<AffineExpr>, Box<AffineExpr>),
}

/// `+`, `-`, `*` and unary `-` build expressions, folding constants and
/// dropping neutral elements (`x + 0`, `x * 1`).
impl std::ops::Add for AffineExpr {
    type Output = AffineExpr;
    fn add(self, rhs: AffineExpr) -> AffineExpr {
        self.add_folded(rhs)
    }
}

impl std::ops::Sub for AffineExpr {
    type Output = AffineExpr;
    fn sub(self, rhs: AffineExpr) -> AffineExpr {
        self.add_folded(rhs.neg_folded())
    }
}

impl std::ops::Mul for AffineExpr {
    type Output = AffineExpr;
    fn mul(self, rhs: AffineExpr) -> AffineExpr {
        self.mul_folded(rhs)
    }
}

impl std::ops::Neg for AffineExpr {
    type Output = AffineExpr;
    fn neg(self) -> AffineExpr {
        self.neg_folded()
    }
}

/// Why an affine expression could not be evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AffineError {
    DivisionByZero,
    Overflow,
    DimOutOfRange(u32),
    SymOutOfRange(u32),
}

impl fmt::Display for AffineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AffineError::DivisionByZero => f.write_str("division by zero in affine expression"),
            AffineError::Overflow => f.write_str("integer overflow in affine expression"),
            AffineError::DimOutOfRange(d) => write!(f, "dimension d{d} has no value"),
            AffineError::SymOutOfRange(s) => write!(f, "symbol s{s} has no value"),
        }
    }
}

/// Floor division, rounding towards negative infinity.
pub fn floor_div(a: i64, b: i64) -> Option<i64> {
    if b == 0 {
        return None;
    }
    let q = a.checked_div(b)?;
    Some(if (a % b != 0) && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    })
}

/// Ceiling division, rounding towards positive infinity.
pub fn ceil_div(a: i64, b: i64) -> Option<i64> {
    if b == 0 {
        return None;
    }
    let q = a.checked_div(b)?;
    Some(if (a % b != 0) && ((a < 0) == (b < 0)) {
        q + 1
    } else {
        q
    })
}

/// The remainder that goes with [`floor_div`]: `a - b * floor_div(a, b)`.
pub fn floor_mod(a: i64, b: i64) -> Option<i64> {
    let q = floor_div(a, b)?;
    a.checked_sub(b.checked_mul(q)?)
}

impl AffineExpr {
    pub fn dim(i: u32) -> Self {
        AffineExpr::Dim(i)
    }
    pub fn sym(i: u32) -> Self {
        AffineExpr::Sym(i)
    }
    pub fn constant(c: i64) -> Self {
        AffineExpr::Const(c)
    }

    pub fn as_const(&self) -> Option<i64> {
        match self {
            AffineExpr::Const(c) => Some(*c),
            _ => None,
        }
    }

    fn add_folded(self, rhs: AffineExpr) -> Self {
        match (self.as_const(), rhs.as_const()) {
            (Some(a), Some(b)) if a.checked_add(b).is_some() => AffineExpr::Const(a + b),
            (_, Some(0)) => self,
            (Some(0), _) => rhs,
            _ => AffineExpr::Add(Box::new(self), Box::new(rhs)),
        }
    }

    fn mul_folded(self, rhs: AffineExpr) -> Self {
        match (self.as_const(), rhs.as_const()) {
            (Some(a), Some(b)) if a.checked_mul(b).is_some() => AffineExpr::Const(a * b),
            (_, Some(1)) => self,
            (Some(1), _) => rhs,
            // Keep the constant on the right, as MLIR does.
            (Some(_), None) => rhs.mul_folded(self),
            // (x * c1) * c2 -> x * (c1 * c2): one canonical tree per product,
            // so `-(-x)` cannot print as `- -x`.
            (None, Some(c2)) if matches!(&self, AffineExpr::Mul(_, k) if k.as_const().and_then(|c1| c1.checked_mul(c2)).is_some()) =>
            {
                let AffineExpr::Mul(x, k) = self else {
                    unreachable!("matched above")
                };
                let c = k.as_const().unwrap_or(1) * c2;
                x.mul_folded(AffineExpr::Const(c))
            }
            _ => AffineExpr::Mul(Box::new(self), Box::new(rhs)),
        }
    }

    /// `-self`, folded so that `a - b` parses to the tree that prints as `a - b`.
    fn neg_folded(self) -> Self {
        match self {
            AffineExpr::Const(c) if c != i64::MIN => AffineExpr::Const(-c),
            AffineExpr::Mul(x, k) if matches!(*k, AffineExpr::Const(c) if c != i64::MIN) => {
                let c = k.as_const().unwrap_or_default();
                if c == -1 {
                    *x
                } else {
                    AffineExpr::Mul(x, Box::new(AffineExpr::Const(-c)))
                }
            }
            other => AffineExpr::Mul(Box::new(other), Box::new(AffineExpr::Const(-1))),
        }
    }

    pub fn floor_div(self, rhs: AffineExpr) -> Self {
        match (self.as_const(), rhs.as_const()) {
            (Some(a), Some(b)) if floor_div(a, b).is_some() => {
                AffineExpr::Const(floor_div(a, b).unwrap_or(0))
            }
            (_, Some(1)) => self,
            _ => AffineExpr::FloorDiv(Box::new(self), Box::new(rhs)),
        }
    }

    pub fn ceil_div(self, rhs: AffineExpr) -> Self {
        match (self.as_const(), rhs.as_const()) {
            (Some(a), Some(b)) if ceil_div(a, b).is_some() => {
                AffineExpr::Const(ceil_div(a, b).unwrap_or(0))
            }
            (_, Some(1)) => self,
            _ => AffineExpr::CeilDiv(Box::new(self), Box::new(rhs)),
        }
    }

    pub fn modulo(self, rhs: AffineExpr) -> Self {
        match (self.as_const(), rhs.as_const()) {
            (Some(a), Some(b)) if floor_mod(a, b).is_some() => {
                AffineExpr::Const(floor_mod(a, b).unwrap_or(0))
            }
            (_, Some(1)) => AffineExpr::Const(0),
            _ => AffineExpr::Mod(Box::new(self), Box::new(rhs)),
        }
    }

    pub fn eval(&self, dims: &[i64], syms: &[i64]) -> Result<i64, AffineError> {
        let bin = |a: &AffineExpr, b: &AffineExpr| -> Result<(i64, i64), AffineError> {
            Ok((a.eval(dims, syms)?, b.eval(dims, syms)?))
        };
        match self {
            AffineExpr::Dim(d) => dims
                .get(*d as usize)
                .copied()
                .ok_or(AffineError::DimOutOfRange(*d)),
            AffineExpr::Sym(s) => syms
                .get(*s as usize)
                .copied()
                .ok_or(AffineError::SymOutOfRange(*s)),
            AffineExpr::Const(c) => Ok(*c),
            AffineExpr::Add(a, b) => {
                let (a, b) = bin(a, b)?;
                a.checked_add(b).ok_or(AffineError::Overflow)
            }
            AffineExpr::Mul(a, b) => {
                let (a, b) = bin(a, b)?;
                a.checked_mul(b).ok_or(AffineError::Overflow)
            }
            AffineExpr::FloorDiv(a, b) => {
                let (a, b) = bin(a, b)?;
                if b == 0 {
                    Err(AffineError::DivisionByZero)
                } else {
                    floor_div(a, b).ok_or(AffineError::Overflow)
                }
            }
            AffineExpr::CeilDiv(a, b) => {
                let (a, b) = bin(a, b)?;
                if b == 0 {
                    Err(AffineError::DivisionByZero)
                } else {
                    ceil_div(a, b).ok_or(AffineError::Overflow)
                }
            }
            AffineExpr::Mod(a, b) => {
                let (a, b) = bin(a, b)?;
                if b == 0 {
                    Err(AffineError::DivisionByZero)
                } else {
                    floor_mod(a, b).ok_or(AffineError::Overflow)
                }
            }
        }
    }

    /// A number every value of the expression is a multiple of, as large
    /// as its terms show: 1 where nothing better is known, 0 for the
    /// constant zero (a multiple of every number). What a vector load
    /// needs to know of its offset.
    pub fn known_divisor(&self) -> i64 {
        fn gcd(a: i64, b: i64) -> i64 {
            if b == 0 { a } else { gcd(b, a % b) }
        }
        match self {
            AffineExpr::Const(c) => c.checked_abs().unwrap_or(1),
            AffineExpr::Dim(_) | AffineExpr::Sym(_) => 1,
            AffineExpr::Add(a, b) => gcd(a.known_divisor(), b.known_divisor()),
            AffineExpr::Mul(a, b) => a
                .known_divisor()
                .checked_mul(b.known_divisor())
                .unwrap_or(1),
            // x mod c = x - c * floor(x / c): a multiple of what divides both.
            AffineExpr::Mod(a, b) => gcd(a.known_divisor(), b.known_divisor()),
            AffineExpr::FloorDiv(..) | AffineExpr::CeilDiv(..) => 1,
        }
    }

    /// Whether dimension `d` appears in the expression.
    pub fn uses_dim(&self, d: u32) -> bool {
        match self {
            AffineExpr::Dim(x) => *x == d,
            AffineExpr::Sym(_) | AffineExpr::Const(_) => false,
            AffineExpr::Add(a, b)
            | AffineExpr::Mul(a, b)
            | AffineExpr::FloorDiv(a, b)
            | AffineExpr::CeilDiv(a, b)
            | AffineExpr::Mod(a, b) => a.uses_dim(d) || b.uses_dim(d),
        }
    }

    /// Replaces `d_i` by `dims[i]` and `s_j` by `syms[j]`.
    pub fn substitute(&self, dims: &[AffineExpr], syms: &[AffineExpr]) -> AffineExpr {
        let rec = |e: &AffineExpr| e.substitute(dims, syms);
        match self {
            AffineExpr::Dim(d) => dims
                .get(*d as usize)
                .cloned()
                .unwrap_or(AffineExpr::Dim(*d)),
            AffineExpr::Sym(s) => syms
                .get(*s as usize)
                .cloned()
                .unwrap_or(AffineExpr::Sym(*s)),
            AffineExpr::Const(c) => AffineExpr::Const(*c),
            AffineExpr::Add(a, b) => rec(a) + rec(b),
            AffineExpr::Mul(a, b) => rec(a) * rec(b),
            AffineExpr::FloorDiv(a, b) => rec(a).floor_div(rec(b)),
            AffineExpr::CeilDiv(a, b) => rec(a).ceil_div(rec(b)),
            AffineExpr::Mod(a, b) => rec(a).modulo(rec(b)),
        }
    }

    /// Whether the expression is affine in MLIR's sense: in every product one
    /// side is a constant or symbolic, and every divisor is constant or symbolic.
    pub fn is_pure_affine(&self) -> bool {
        match self {
            AffineExpr::Dim(_) | AffineExpr::Sym(_) | AffineExpr::Const(_) => true,
            AffineExpr::Add(a, b) => a.is_pure_affine() && b.is_pure_affine(),
            AffineExpr::Mul(a, b) => {
                a.is_pure_affine() && b.is_pure_affine() && (a.is_symbolic() || b.is_symbolic())
            }
            AffineExpr::FloorDiv(a, b) | AffineExpr::CeilDiv(a, b) | AffineExpr::Mod(a, b) => {
                a.is_pure_affine() && b.is_symbolic()
            }
        }
    }

    /// No dimension occurs in the expression.
    pub fn is_symbolic(&self) -> bool {
        match self {
            AffineExpr::Dim(_) => false,
            AffineExpr::Sym(_) | AffineExpr::Const(_) => true,
            AffineExpr::Add(a, b)
            | AffineExpr::Mul(a, b)
            | AffineExpr::FloorDiv(a, b)
            | AffineExpr::CeilDiv(a, b)
            | AffineExpr::Mod(a, b) => a.is_symbolic() && b.is_symbolic(),
        }
    }

    /// Bounds of the expression's value when each dimension `i` ranges over
    /// `dims[i]` (inclusive): exact for an expression that reads each
    /// dimension once, wider otherwise. `None` where it has a symbol or a
    /// non-constant divisor, or a bound overflows.
    pub fn range(&self, dims: &[(i64, i64)]) -> Option<(i64, i64)> {
        let binary = |a: &AffineExpr, b: &AffineExpr| Some((a.range(dims)?, b.range(dims)?));
        match self {
            AffineExpr::Dim(d) => dims.get(*d as usize).copied(),
            AffineExpr::Sym(_) => None,
            AffineExpr::Const(c) => Some((*c, *c)),
            AffineExpr::Add(a, b) => {
                let ((al, ah), (bl, bh)) = binary(a, b)?;
                Some((al.checked_add(bl)?, ah.checked_add(bh)?))
            }
            AffineExpr::Mul(a, b) => {
                let ((al, ah), (bl, bh)) = binary(a, b)?;
                let corners = [
                    al.checked_mul(bl)?,
                    al.checked_mul(bh)?,
                    ah.checked_mul(bl)?,
                    ah.checked_mul(bh)?,
                ];
                Some((*corners.iter().min()?, *corners.iter().max()?))
            }
            AffineExpr::FloorDiv(a, k) | AffineExpr::CeilDiv(a, k) => {
                let (lo, hi) = a.range(dims)?;
                let k = k.as_const().filter(|&k| k > 0)?;
                let div = if matches!(self, AffineExpr::FloorDiv(..)) {
                    floor_div
                } else {
                    ceil_div
                };
                Some((div(lo, k)?, div(hi, k)?))
            }
            AffineExpr::Mod(a, k) => {
                let (lo, hi) = a.range(dims)?;
                let k = k.as_const().filter(|&k| k > 0)?;
                if floor_div(lo, k)? == floor_div(hi, k)? {
                    Some((floor_mod(lo, k)?, floor_mod(hi, k)?))
                } else {
                    Some((0, k - 1))
                }
            }
        }
    }

    /// The number of operations on the longest path from the root to a leaf.
    pub fn height(&self) -> usize {
        match self {
            AffineExpr::Dim(_) | AffineExpr::Sym(_) | AffineExpr::Const(_) => 0,
            AffineExpr::Add(a, b)
            | AffineExpr::Mul(a, b)
            | AffineExpr::FloorDiv(a, b)
            | AffineExpr::CeilDiv(a, b)
            | AffineExpr::Mod(a, b) => 1 + a.height().max(b.height()),
        }
    }

    /// Number of `floordiv`, `ceildiv` and `mod` operations.
    pub fn div_mod_count(&self) -> usize {
        match self {
            AffineExpr::Dim(_) | AffineExpr::Sym(_) | AffineExpr::Const(_) => 0,
            AffineExpr::Add(a, b) | AffineExpr::Mul(a, b) => a.div_mod_count() + b.div_mod_count(),
            AffineExpr::FloorDiv(a, b) | AffineExpr::CeilDiv(a, b) | AffineExpr::Mod(a, b) => {
                1 + a.div_mod_count() + b.div_mod_count()
            }
        }
    }

    fn max_dim_sym(&self) -> (Option<u32>, Option<u32>) {
        match self {
            AffineExpr::Dim(d) => (Some(*d), None),
            AffineExpr::Sym(s) => (None, Some(*s)),
            AffineExpr::Const(_) => (None, None),
            AffineExpr::Add(a, b)
            | AffineExpr::Mul(a, b)
            | AffineExpr::FloorDiv(a, b)
            | AffineExpr::CeilDiv(a, b)
            | AffineExpr::Mod(a, b) => {
                let (da, sa) = a.max_dim_sym();
                let (db, sb) = b.max_dim_sym();
                (da.max(db), sa.max(sb))
            }
        }
    }

    fn precedence(&self) -> u8 {
        match self {
            AffineExpr::Add(..) => 1,
            AffineExpr::Mul(_, k) if k.as_const() == Some(-1) => 2,
            AffineExpr::Mul(..)
            | AffineExpr::FloorDiv(..)
            | AffineExpr::CeilDiv(..)
            | AffineExpr::Mod(..) => 2,
            AffineExpr::Const(c) if *c < 0 => 2,
            _ => 3,
        }
    }

    fn write(&self, f: &mut fmt::Formatter<'_>, min_prec: u8) -> fmt::Result {
        let parens = self.precedence() < min_prec;
        if parens {
            f.write_str("(")?;
        }
        match self {
            AffineExpr::Dim(d) => write!(f, "d{d}")?,
            AffineExpr::Sym(s) => write!(f, "s{s}")?,
            AffineExpr::Const(c) => write!(f, "{c}")?,
            AffineExpr::Add(a, b) => {
                a.write(f, 1)?;
                match b.as_ref() {
                    AffineExpr::Const(c) if *c < 0 && *c != i64::MIN => write!(f, " - {}", -c)?,
                    AffineExpr::Mul(x, k) if matches!(k.as_ref(), AffineExpr::Const(c) if *c < 0 && *c != i64::MIN) =>
                    {
                        let c = -k.as_const().unwrap_or_default();
                        f.write_str(" - ")?;
                        if c == 1 {
                            x.write(f, 2)?;
                        } else {
                            x.write(f, 2)?;
                            write!(f, " * {c}")?;
                        }
                    }
                    _ => {
                        f.write_str(" + ")?;
                        b.write(f, 2)?;
                    }
                }
            }
            AffineExpr::Mul(a, b) if b.as_const() == Some(-1) => {
                f.write_str("-")?;
                a.write(f, 3)?;
            }
            AffineExpr::Mul(a, b) => write_binary(f, a, "*", b)?,
            AffineExpr::FloorDiv(a, b) => write_binary(f, a, "floordiv", b)?,
            AffineExpr::CeilDiv(a, b) => write_binary(f, a, "ceildiv", b)?,
            AffineExpr::Mod(a, b) => write_binary(f, a, "mod", b)?,
        }
        if parens {
            f.write_str(")")?;
        }
        Ok(())
    }
}

fn write_binary(
    f: &mut fmt::Formatter<'_>,
    a: &AffineExpr,
    op: &str,
    b: &AffineExpr,
) -> fmt::Result {
    // Only a product chains without parentheses on the left: `d0 * 2 * 3`
    // but `(d0 floordiv 8) * 7`, which reads as meant.
    let chains = op == "*" && matches!(a, AffineExpr::Mul(..));
    a.write(f, if chains { 2 } else { 3 })?;
    write!(f, " {op} ")?;
    // A negative constant on the right is an atom (`d0 * -1`); anything
    // binary on the right needs parentheses because the operators are
    // left-associative.
    match b {
        AffineExpr::Const(c) => write!(f, "{c}"),
        _ => b.write(f, 3),
    }
}

impl fmt::Display for AffineExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, 1)
    }
}

/// `(d0, ..., dn)[s0, ..., sm] -> (e0, ..., ek)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AffineMap {
    pub num_dims: u32,
    pub num_syms: u32,
    pub results: Vec<AffineExpr>,
}

impl AffineMap {
    pub fn new(num_dims: u32, num_syms: u32, results: Vec<AffineExpr>) -> Self {
        AffineMap {
            num_dims,
            num_syms,
            results,
        }
    }

    pub fn identity(rank: u32) -> Self {
        AffineMap::new(rank, 0, (0..rank).map(AffineExpr::Dim).collect())
    }

    /// `(d0, .., dn) -> (d_perm[0], .., d_perm[n])`.
    pub fn permutation(perm: &[u32]) -> Self {
        AffineMap::new(
            perm.len() as u32,
            0,
            perm.iter().map(|&p| AffineExpr::Dim(p)).collect(),
        )
    }

    pub fn num_results(&self) -> usize {
        self.results.len()
    }

    /// Checks that every dimension and symbol used is declared.
    pub fn check_bounds(&self) -> Result<(), String> {
        for r in &self.results {
            let (d, s) = r.max_dim_sym();
            if let Some(d) = d.filter(|&d| d >= self.num_dims) {
                return Err(format!(
                    "d{d} used but the map has {} dimensions",
                    self.num_dims
                ));
            }
            if let Some(s) = s.filter(|&s| s >= self.num_syms) {
                return Err(format!(
                    "s{s} used but the map has {} symbols",
                    self.num_syms
                ));
            }
        }
        Ok(())
    }

    pub fn eval(&self, dims: &[i64], syms: &[i64]) -> Result<Vec<i64>, AffineError> {
        self.results.iter().map(|e| e.eval(dims, syms)).collect()
    }

    /// `self ∘ inner`: the map `x -> self(inner(x))`. The result has the
    /// dimensions of `inner`, and the symbols of `self` followed by those of
    /// `inner`.
    pub fn compose(&self, inner: &AffineMap) -> Result<AffineMap, String> {
        if inner.num_results() != self.num_dims as usize {
            return Err(format!(
                "cannot compose: the inner map has {} results but the outer map takes {} dimensions",
                inner.num_results(),
                self.num_dims
            ));
        }
        let shift: Vec<AffineExpr> = (0..inner.num_syms)
            .map(|s| AffineExpr::Sym(s + self.num_syms))
            .collect();
        let inner_results: Vec<AffineExpr> = inner
            .results
            .iter()
            .map(|e| e.substitute(&[], &shift))
            .collect();
        let syms: Vec<AffineExpr> = (0..self.num_syms).map(AffineExpr::Sym).collect();
        let results = self
            .results
            .iter()
            .map(|e| e.substitute(&inner_results, &syms))
            .collect::<Vec<_>>();
        if results.iter().any(|e| e.height() > MAX_AFFINE_HEIGHT) {
            return Err(format!(
                "cannot compose: the result is deeper than {MAX_AFFINE_HEIGHT} operations"
            ));
        }
        Ok(AffineMap::new(
            inner.num_dims,
            self.num_syms + inner.num_syms,
            results,
        ))
    }

    pub fn div_mod_count(&self) -> usize {
        self.results.iter().map(AffineExpr::div_mod_count).sum()
    }
}

impl fmt::Display for AffineMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        for d in 0..self.num_dims {
            if d > 0 {
                f.write_str(", ")?;
            }
            write!(f, "d{d}")?;
        }
        f.write_str(")")?;
        if self.num_syms > 0 {
            f.write_str("[")?;
            for s in 0..self.num_syms {
                if s > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "s{s}")?;
            }
            f.write_str("]")?;
        }
        f.write_str(" -> (")?;
        for (i, r) in self.results.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{r}")?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_divisors_follow_the_terms() {
        let (d0, d1) = (AffineExpr::dim(0), AffineExpr::dim(1));
        let c = AffineExpr::constant;
        // A vector load's offset: row * 768 + k * 64 + (lane mod 16) * 4.
        let offset = d0.clone() * c(768) + d1.clone() * c(64) + d0.clone().modulo(c(16)) * c(4);
        assert_eq!(offset.known_divisor(), 4);
        assert_eq!((offset.clone() + c(2)).known_divisor(), 2);
        assert_eq!((offset + d1.clone()).known_divisor(), 1);
        assert_eq!(d0.clone().floor_div(c(4)).known_divisor(), 1);
        assert_eq!((d0 * c(12)).modulo(c(8)).known_divisor(), 4);
        assert_eq!(c(0).known_divisor(), 0);
        assert_eq!((d1 * c(0) + c(6)).known_divisor(), 6);
    }

    use super::*;
    use AffineExpr as E;

    #[test]
    fn floor_semantics_match_mlir() {
        assert_eq!(floor_div(-7, 2), Some(-4));
        assert_eq!(ceil_div(-7, 2), Some(-3));
        assert_eq!(floor_mod(-7, 4), Some(1));
        assert_eq!(ceil_div(7, 2), Some(4));
        assert_eq!(floor_div(1, 0), None);
    }

    #[test]
    fn prints_subtraction_like_mlir() {
        let e = E::dim(0) - E::dim(1);
        assert_eq!(e.to_string(), "d0 - d1");
        let e = E::dim(0) - E::dim(1) * E::constant(4);
        assert_eq!(e.to_string(), "d0 - d1 * 4");
        let e = (E::dim(0) + E::dim(1)) * E::constant(2);
        assert_eq!(e.to_string(), "(d0 + d1) * 2");
        let e = E::dim(0).floor_div(E::constant(4)).modulo(E::constant(3));
        assert_eq!(e.to_string(), "(d0 floordiv 4) mod 3");
        let e = E::dim(0).modulo(E::dim(1) + E::constant(1));
        assert_eq!(e.to_string(), "d0 mod (d1 + 1)");
    }

    #[test]
    fn composition_substitutes_results() {
        // Split then merge is the identity on its domain.
        let split = AffineMap::new(
            1,
            0,
            vec![
                E::dim(0).floor_div(E::constant(7)),
                E::dim(0).modulo(E::constant(7)),
            ],
        );
        let merge = AffineMap::new(2, 0, vec![E::dim(0) * E::constant(7) + E::dim(1)]);
        let both = merge.compose(&split).unwrap();
        for i in 0..49 {
            assert_eq!(both.eval(&[i], &[]).unwrap(), vec![i]);
        }
        assert!(merge.compose(&merge).is_err());
    }
}
