//! Attributes: the compile-time constants attached to operations.

use std::fmt;
use std::sync::Arc;

use indexmap::IndexMap;

use crate::affine::AffineMap;
use crate::minifloat::MiniFloat;
use crate::types::{ElemType, TensorType, Type};

/// An ordered attribute dictionary. Order is kept as written so printing is
/// deterministic and snapshots are stable.
pub type Attributes = IndexMap<String, Attribute>;

#[derive(Clone, Debug, PartialEq)]
pub enum Attribute {
    Unit,
    Bool(bool),
    /// An integer with its type (`4 : i32`); `i64` when written bare.
    Int(i64, Type),
    /// A float with its type (`1.5 : f32`); `f64` when written bare.
    Float(f64, Type),
    String(String),
    Array(Vec<Attribute>),
    /// `array<i64: 1, 2, 3>`.
    DenseI64Array(Vec<i64>),
    /// `array<f32: 1.0, 2.0>` and `array<f64: ...>`.
    DenseFloatArray(ElemType, Vec<f64>),
    Dict(Attributes),
    Type(Type),
    Dense(DenseAttr),
    /// `@a` or `@a::@b`.
    SymbolRef(Vec<String>),
    AffineMap(AffineMap),
    /// `#dialect.name<...>`, kept verbatim.
    Opaque {
        dialect: String,
        name: String,
        body: Option<String>,
    },
}

/// `dense<...> : tensor<...>`: a constant tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct DenseAttr {
    pub ty: TensorType,
    pub values: DenseValues,
}

/// Element storage of a dense constant. Shared, so cloning a module does not
/// copy constants.
#[derive(Clone, Debug, PartialEq)]
pub enum DenseValues {
    Float(Arc<[f64]>),
    Int(Arc<[i64]>),
    Bool(Arc<[bool]>),
}

impl DenseValues {
    pub fn len(&self) -> usize {
        match self {
            DenseValues::Float(v) => v.len(),
            DenseValues::Int(v) => v.len(),
            DenseValues::Bool(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl DenseAttr {
    /// The value every element has, if they all have one, read from the
    /// values as stored (a splat is one), never expanded.
    pub fn splat(&self) -> Option<f64> {
        fn uniform<T: Copy + PartialEq>(v: &[T]) -> Option<T> {
            let first = *v.first()?;
            v.iter().all(|&x| x == first).then_some(first)
        }
        match &self.values {
            DenseValues::Float(v) => uniform(v),
            DenseValues::Int(v) => uniform(v).map(|x| x as f64),
            DenseValues::Bool(v) => uniform(v).map(|b| f64::from(u8::from(b))),
        }
    }

    /// Builds a constant. A single value, or values that are all equal, are
    /// kept once (a splat), so `dense<0.0> : tensor<4096x4096xf32>` costs
    /// one element, whatever its shape.
    pub fn new(ty: TensorType, values: DenseValues) -> Result<DenseAttr, String> {
        let n =
            usize::try_from(ty.num_elements()).map_err(|_| "negative tensor size".to_string())?;
        if values.len() != n && values.len() != 1 {
            return Err(format!(
                "dense constant has {} elements but its type {} needs {n}",
                values.len(),
                ty
            ));
        }
        let kind_ok = match &values {
            DenseValues::Float(_) => ty.elem.is_float(),
            DenseValues::Int(_) => ty.elem.is_int(),
            DenseValues::Bool(_) => ty.elem.is_bool(),
        };
        if !kind_ok {
            return Err(format!(
                "dense constant values do not match element type {}",
                ty.elem
            ));
        }
        fn first_if_all_same<T: Copy>(v: &[T], same: impl Fn(&T, &T) -> bool) -> Option<Arc<[T]>> {
            (v.len() > 1 && v.windows(2).all(|w| same(&w[0], &w[1]))).then(|| Arc::from(&v[..1]))
        }
        let values = match values {
            DenseValues::Float(v) => DenseValues::Float(
                first_if_all_same(&v, |a, b| a.to_bits() == b.to_bits()).unwrap_or(v),
            ),
            DenseValues::Int(v) => {
                DenseValues::Int(first_if_all_same(&v, |a, b| a == b).unwrap_or(v))
            }
            DenseValues::Bool(v) => {
                DenseValues::Bool(first_if_all_same(&v, |a, b| a == b).unwrap_or(v))
            }
        };
        Ok(DenseAttr { ty, values })
    }

    /// One value stands for every element.
    pub fn is_splat(&self) -> bool {
        self.values.len() == 1 && self.ty.num_elements() != 1
    }

    fn write_element(&self, f: &mut fmt::Formatter<'_>, i: usize) -> fmt::Result {
        match &self.values {
            DenseValues::Float(v) => f.write_str(&format_float(v[i], self.ty.elem)),
            DenseValues::Int(v) => write!(f, "{}", v[i]),
            DenseValues::Bool(v) => write!(f, "{}", v[i]),
        }
    }

    fn write_nested(&self, f: &mut fmt::Formatter<'_>, dim: usize, offset: usize) -> fmt::Result {
        if dim == self.ty.shape.len() {
            return self.write_element(f, offset);
        }
        let extent = self.ty.shape[dim] as usize;
        let stride: usize = self.ty.shape[dim + 1..]
            .iter()
            .map(|&d| d as usize)
            .product();
        f.write_str("[")?;
        for i in 0..extent {
            if i > 0 {
                f.write_str(", ")?;
            }
            self.write_nested(f, dim + 1, offset + i * stride)?;
        }
        f.write_str("]")
    }
}

impl fmt::Display for DenseAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("dense<")?;
        if self.values.len() == 1 {
            self.write_element(f, 0)?;
        } else {
            self.write_nested(f, 0, 0)?;
        }
        write!(f, "> : {}", self.ty)
    }
}

/// Prints a float so that it reads back bit-exactly in both ircc and MLIR:
/// the shortest decimal that round-trips at the element type's precision,
/// always with a `.`, and the bit pattern in hex for infinities and NaN.
pub fn format_float(value: f64, elem: ElemType) -> String {
    if !value.is_finite() {
        return match elem {
            ElemType::F64 => format!("0x{:016X}", value.to_bits()),
            ElemType::F16 => format!("0x{:04X}", half::f16::from_f64(value).to_bits()),
            ElemType::BF16 => format!("0x{:04X}", half::bf16::from_f64(value).to_bits()),
            e => match MiniFloat::of(e) {
                Some(f8) => format!("0x{:02X}", f8.to_bits(value)),
                None => format!("0x{:08X}", (value as f32).to_bits()),
            },
        };
    }
    let text = match elem {
        ElemType::F64 => format!("{value:?}"),
        ElemType::F16 => format!("{:?}", half::f16::from_f64(value).to_f32()),
        ElemType::BF16 => format!("{:?}", half::bf16::from_f64(value).to_f32()),
        _ => format!("{:?}", value as f32),
    };
    match text.find('e') {
        Some(e) if !text[..e].contains('.') => format!("{}.0{}", &text[..e], &text[e..]),
        _ => text,
    }
}

/// Reads a float back from MLIR's hexadecimal bit-pattern form.
pub fn float_from_bits(bits: u64, elem: ElemType) -> f64 {
    match elem {
        ElemType::F64 => f64::from_bits(bits),
        ElemType::F16 => half::f16::from_bits(bits as u16).to_f64(),
        ElemType::BF16 => half::bf16::from_bits(bits as u16).to_f64(),
        e => match MiniFloat::of(e) {
            Some(f8) => f8.from_bits(bits as u8),
            None => f32::from_bits(bits as u32) as f64,
        },
    }
}

/// Rounds a value to what the element type can hold.
pub fn round_to(value: f64, elem: ElemType) -> f64 {
    match elem {
        ElemType::F32 => value as f32 as f64,
        ElemType::F16 => half::f16::from_f64(value).to_f64(),
        ElemType::BF16 => half::bf16::from_f64(value).to_f64(),
        e => MiniFloat::of(e).map_or(value, |f8| f8.nearest(value)),
    }
}

pub fn write_string_literal(f: &mut impl fmt::Write, s: &str) -> fmt::Result {
    f.write_char('"')?;
    for b in s.bytes() {
        match b {
            b'"' => f.write_str("\\\"")?,
            b'\\' => f.write_str("\\\\")?,
            b'\n' => f.write_str("\\n")?,
            b'\t' => f.write_str("\\t")?,
            0x20..=0x7e => f.write_char(b as char)?,
            _ => write!(f, "\\{b:02X}")?,
        }
    }
    f.write_char('"')
}

/// Whether `name` can be printed without quotes (MLIR's bare-id).
pub fn is_bare_id(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '.')
}

pub fn write_dict(f: &mut fmt::Formatter<'_>, dict: &Attributes) -> fmt::Result {
    f.write_str("{")?;
    for (i, (k, v)) in dict.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        if is_bare_id(k) {
            f.write_str(k)?;
        } else {
            write_string_literal(f, k)?;
        }
        if *v != Attribute::Unit {
            write!(f, " = {v}")?;
        }
    }
    f.write_str("}")
}

impl fmt::Display for Attribute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attribute::Unit => f.write_str("unit"),
            Attribute::Bool(b) => write!(f, "{b}"),
            Attribute::Int(v, ty) => {
                if *ty == Type::Scalar(ElemType::I64) {
                    write!(f, "{v}")
                } else {
                    write!(f, "{v} : {ty}")
                }
            }
            Attribute::Float(v, ty) => {
                let elem = match ty {
                    Type::Scalar(e) => *e,
                    _ => ElemType::F64,
                };
                let text = format_float(*v, elem);
                f.write_str(&text)?;
                // A hex bit pattern without its type would read back as an integer.
                if elem != ElemType::F64 || text.starts_with("0x") {
                    write!(f, " : {ty}")?;
                }
                Ok(())
            }
            Attribute::String(s) => write_string_literal(f, s),
            Attribute::Array(items) => {
                f.write_str("[")?;
                for (i, a) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str("]")
            }
            Attribute::DenseI64Array(v) => {
                f.write_str("array<i64")?;
                for (i, x) in v.iter().enumerate() {
                    f.write_str(if i == 0 { ": " } else { ", " })?;
                    write!(f, "{x}")?;
                }
                f.write_str(">")
            }
            Attribute::DenseFloatArray(elem, v) => {
                write!(f, "array<{elem}")?;
                for (i, x) in v.iter().enumerate() {
                    f.write_str(if i == 0 { ": " } else { ", " })?;
                    f.write_str(&format_float(*x, *elem))?;
                }
                f.write_str(">")
            }
            Attribute::Dict(d) => write_dict(f, d),
            Attribute::Type(t) => write!(f, "{t}"),
            Attribute::Dense(d) => write!(f, "{d}"),
            Attribute::SymbolRef(path) => {
                for (i, p) in path.iter().enumerate() {
                    if i > 0 {
                        f.write_str("::")?;
                    }
                    f.write_str("@")?;
                    if is_bare_id(p) {
                        f.write_str(p)?;
                    } else {
                        write_string_literal(f, p)?;
                    }
                }
                Ok(())
            }
            Attribute::AffineMap(m) => write!(f, "affine_map<{m}>"),
            Attribute::Opaque {
                dialect,
                name,
                body,
            } => {
                write!(f, "#{dialect}.{name}")?;
                if let Some(b) = body {
                    write!(f, "<{b}>")?;
                }
                Ok(())
            }
        }
    }
}

impl Attribute {
    pub fn i64(v: i64) -> Attribute {
        Attribute::Int(v, Type::Scalar(ElemType::I64))
    }

    pub fn f32(v: f64) -> Attribute {
        Attribute::Float(round_to(v, ElemType::F32), Type::Scalar(ElemType::F32))
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Attribute::Int(v, _) => Some(*v),
            Attribute::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Attribute::Float(v, _) => Some(*v),
            Attribute::Int(v, _) => Some(*v as f64),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Attribute::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_i64_array(&self) -> Option<Vec<i64>> {
        match self {
            Attribute::DenseI64Array(v) => Some(v.clone()),
            Attribute::Array(items) => items.iter().map(Attribute::as_i64).collect(),
            _ => None,
        }
    }

    pub fn as_f64_array(&self) -> Option<Vec<f64>> {
        match self {
            Attribute::DenseFloatArray(_, v) => Some(v.clone()),
            Attribute::DenseI64Array(v) => Some(v.iter().map(|&x| x as f64).collect()),
            Attribute::Array(items) => items.iter().map(Attribute::as_f64).collect(),
            _ => None,
        }
    }

    /// A short name for the kind of attribute, for error messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Attribute::Unit => "unit",
            Attribute::Bool(_) => "bool",
            Attribute::Int(..) => "integer",
            Attribute::Float(..) => "float",
            Attribute::String(_) => "string",
            Attribute::Array(_) => "array",
            Attribute::DenseI64Array(_) => "array<i64>",
            Attribute::DenseFloatArray(..) => "float array",
            Attribute::Dict(_) => "dictionary",
            Attribute::Type(_) => "type",
            Attribute::Dense(_) => "dense",
            Attribute::SymbolRef(_) => "symbol reference",
            Attribute::AffineMap(_) => "affine map",
            Attribute::Opaque { .. } => "opaque",
        }
    }
}
