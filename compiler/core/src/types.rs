//! Types: ranked tensors with static shapes, vectors, `index`, scalars,
//! function types and opaque dialect types (`!dialect.name<...>`).

use std::fmt;

/// Element types of tensors and vectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ElemType {
    F64,
    F32,
    F16,
    BF16,
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
    F4E2M1FN,
    I64,
    I32,
    I16,
    I8,
    U64,
    U32,
    U16,
    U8,
    I4,
    U4,
    I2,
    U2,
    I1,
}

impl ElemType {
    pub const ALL: [ElemType; 22] = [
        ElemType::F64,
        ElemType::F32,
        ElemType::F16,
        ElemType::BF16,
        ElemType::F8E4M3FN,
        ElemType::F8E4M3FNUZ,
        ElemType::F8E5M2,
        ElemType::F8E5M2FNUZ,
        ElemType::F4E2M1FN,
        ElemType::I64,
        ElemType::I32,
        ElemType::I16,
        ElemType::I8,
        ElemType::U64,
        ElemType::U32,
        ElemType::U16,
        ElemType::U8,
        ElemType::I4,
        ElemType::U4,
        ElemType::I2,
        ElemType::U2,
        ElemType::I1,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ElemType::F64 => "f64",
            ElemType::F32 => "f32",
            ElemType::F16 => "f16",
            ElemType::BF16 => "bf16",
            ElemType::F8E4M3FN => "f8E4M3FN",
            ElemType::F8E4M3FNUZ => "f8E4M3FNUZ",
            ElemType::F8E5M2 => "f8E5M2",
            ElemType::F8E5M2FNUZ => "f8E5M2FNUZ",
            ElemType::F4E2M1FN => "f4E2M1FN",
            ElemType::I64 => "i64",
            ElemType::I32 => "i32",
            ElemType::I16 => "i16",
            ElemType::I8 => "i8",
            // MLIR's spelling of unsigned integers.
            ElemType::U64 => "ui64",
            ElemType::U32 => "ui32",
            ElemType::U16 => "ui16",
            ElemType::U8 => "ui8",
            ElemType::I4 => "i4",
            ElemType::U4 => "ui4",
            ElemType::I2 => "i2",
            ElemType::U2 => "ui2",
            ElemType::I1 => "i1",
        }
    }

    pub fn from_name(name: &str) -> Option<ElemType> {
        ElemType::ALL.into_iter().find(|t| t.name() == name)
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            ElemType::F64
                | ElemType::F32
                | ElemType::F16
                | ElemType::BF16
                | ElemType::F8E4M3FN
                | ElemType::F8E4M3FNUZ
                | ElemType::F8E5M2
                | ElemType::F8E5M2FNUZ
                | ElemType::F4E2M1FN
        )
    }

    pub fn is_int(self) -> bool {
        !self.is_float() && !self.is_bool()
    }

    pub fn is_unsigned(self) -> bool {
        matches!(
            self,
            ElemType::U64
                | ElemType::U32
                | ElemType::U16
                | ElemType::U8
                | ElemType::U4
                | ElemType::U2
        )
    }

    /// The range of an integer type's values as held in an `i64`; u64
    /// is held as its bit pattern, so its range is all of i64's.
    pub fn int_range(self) -> (i64, i64) {
        match self {
            ElemType::I32 => (i32::MIN as i64, i32::MAX as i64),
            ElemType::I16 => (i16::MIN as i64, i16::MAX as i64),
            ElemType::I8 => (i8::MIN as i64, i8::MAX as i64),
            ElemType::U32 => (0, u32::MAX as i64),
            ElemType::U16 => (0, u16::MAX as i64),
            ElemType::U8 => (0, u8::MAX as i64),
            ElemType::I4 => (-8, 7),
            ElemType::U4 => (0, 15),
            ElemType::I2 => (-2, 1),
            ElemType::U2 => (0, 3),
            ElemType::I1 => (0, 1),
            _ => (i64::MIN, i64::MAX),
        }
    }

    pub fn is_bool(self) -> bool {
        self == ElemType::I1
    }

    /// The width of a value in bits.
    pub fn bits(self) -> u32 {
        match self {
            ElemType::F4E2M1FN | ElemType::I4 | ElemType::U4 => 4,
            ElemType::I2 | ElemType::U2 => 2,
            ElemType::I1 => 1,
            e => e.byte_size() as u32 * 8,
        }
    }

    /// Storage size of one element in bytes. i1 and the types narrower
    /// than a byte are stored a byte each: only ONNX packs 4- and 2-bit
    /// values, and its reader unpacks them.
    pub fn byte_size(self) -> usize {
        match self {
            ElemType::F64 | ElemType::I64 | ElemType::U64 => 8,
            ElemType::F32 | ElemType::I32 | ElemType::U32 => 4,
            ElemType::F16 | ElemType::BF16 | ElemType::I16 | ElemType::U16 => 2,
            ElemType::I8
            | ElemType::U8
            | ElemType::I1
            | ElemType::F8E4M3FN
            | ElemType::F8E4M3FNUZ
            | ElemType::F8E5M2
            | ElemType::F8E5M2FNUZ
            | ElemType::F4E2M1FN
            | ElemType::I4
            | ElemType::U4
            | ElemType::I2
            | ElemType::U2 => 1,
        }
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A ranked tensor with a static shape: `tensor<2x3xf32>`, `tensor<f32>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub shape: Vec<i64>,
    pub elem: ElemType,
}

impl TensorType {
    pub fn new(shape: Vec<i64>, elem: ElemType) -> Self {
        TensorType { shape, elem }
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The element count, saturating at `i64::MAX` for absurd shapes.
    pub fn num_elements(&self) -> i64 {
        self.shape.iter().fold(1i64, |n, &d| n.saturating_mul(d))
    }

    pub fn byte_size(&self) -> i64 {
        self.num_elements()
            .saturating_mul(self.elem.byte_size() as i64)
    }
}

/// Every type the IR knows.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    Tensor(TensorType),
    Vector {
        shape: Vec<i64>,
        elem: ElemType,
    },
    Scalar(ElemType),
    Index,
    Function {
        inputs: Vec<Type>,
        results: Vec<Type>,
    },
    /// `!dialect.name` or `!dialect.name<body>`; the body is kept verbatim.
    Opaque {
        dialect: String,
        name: String,
        body: Option<String>,
    },
}

impl Type {
    pub fn tensor(shape: Vec<i64>, elem: ElemType) -> Type {
        Type::Tensor(TensorType::new(shape, elem))
    }

    pub fn as_tensor(&self) -> Option<&TensorType> {
        match self {
            Type::Tensor(t) => Some(t),
            _ => None,
        }
    }
}

fn write_shape(f: &mut fmt::Formatter<'_>, shape: &[i64], elem: ElemType) -> fmt::Result {
    for d in shape {
        write!(f, "{d}x")?;
    }
    write!(f, "{elem}")
}

fn write_type_list(f: &mut fmt::Formatter<'_>, types: &[Type]) -> fmt::Result {
    for (i, t) in types.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{t}")?;
    }
    Ok(())
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tensor<")?;
        write_shape(f, &self.shape, self.elem)?;
        f.write_str(">")
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Tensor(t) => write!(f, "{t}"),
            Type::Vector { shape, elem } => {
                f.write_str("vector<")?;
                write_shape(f, shape, *elem)?;
                f.write_str(">")
            }
            Type::Scalar(e) => write!(f, "{e}"),
            Type::Index => f.write_str("index"),
            Type::Function { inputs, results } => {
                f.write_str("(")?;
                write_type_list(f, inputs)?;
                f.write_str(") -> ")?;
                // A single non-function result needs no parentheses.
                if results.len() == 1 && !matches!(results[0], Type::Function { .. }) {
                    write!(f, "{}", results[0])
                } else {
                    f.write_str("(")?;
                    write_type_list(f, results)?;
                    f.write_str(")")
                }
            }
            Type::Opaque {
                dialect,
                name,
                body,
            } => {
                write!(f, "!{dialect}.{name}")?;
                if let Some(body) = body {
                    write!(f, "<{body}>")?;
                }
                Ok(())
            }
        }
    }
}
