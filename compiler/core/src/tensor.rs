//! Runtime tensors: the values the reference interpreter computes with.
//!
//! Floats of every width are held as `f64` and rounded to their element
//! type after each operation, so one code path serves f64, f32, f16 and
//! bf16 while results stay those of the narrower type. Integers are held as
//! `i64` and wrapped to their width; booleans as `bool`.
//!
//! Every array a tensor holds is in row-major (standard) layout: the
//! constructors copy any other layout once, so no reader — an interpret
//! hook reshaping its operand, a writer walking its bytes — meets strides.
//! ndarray makes other layouts quietly (a concatenation along the last
//! axis grows that axis outermost; element-wise maps keep their input's
//! order), which is why the fields are private.

use ndarray::{ArrayD, IxDyn};

use crate::attr::{DenseAttr, DenseValues, round_to};
use crate::types::{ElemType, TensorType};

#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    Float(ArrayD<f64>),
    Int(ArrayD<i64>),
    Bool(ArrayD<bool>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub elem: ElemType,
    data: TensorData,
}

/// `v` wrapped to `elem`'s width, as two's-complement hardware wraps it
/// (u64 is held as its bit pattern, so it wraps as i64 does).
pub fn wrap_int(v: i64, elem: ElemType) -> i64 {
    match elem {
        ElemType::I32 => v as i32 as i64,
        ElemType::I16 => v as i16 as i64,
        ElemType::I8 => v as i8 as i64,
        ElemType::U32 => v as u32 as i64,
        ElemType::U16 => v as u16 as i64,
        ElemType::U8 => v as u8 as i64,
        ElemType::I4 => ((v as i8) << 4 >> 4) as i64,
        ElemType::U4 => v & 0xF,
        ElemType::I2 => ((v as i8) << 6 >> 6) as i64,
        ElemType::U2 => v & 0x3,
        _ => v,
    }
}

/// The byte type a type narrower than a byte is stored as where a format
/// has none of its own (safetensors): one holding each of its values
/// exactly. Other types are stored as themselves.
pub fn byte_storage(elem: ElemType) -> ElemType {
    match elem {
        ElemType::I4 | ElemType::I2 => ElemType::I8,
        ElemType::U4 | ElemType::U2 => ElemType::U8,
        ElemType::F4E2M1FN => ElemType::F8E4M3FN,
        e => e,
    }
}

/// An integer of `elem` as f64 (u64's bit pattern read unsigned).
fn int_to_f64(v: i64, elem: ElemType) -> f64 {
    if elem == ElemType::U64 {
        v as u64 as f64
    } else {
        v as f64
    }
}

/// The integers of `elem` that little-endian `bytes` hold.
pub fn ints_from_le(bytes: &[u8], elem: ElemType) -> Vec<i64> {
    let n = elem.byte_size();
    bytes
        .chunks_exact(n)
        .map(|c| {
            let mut b = [0u8; 8];
            b[..n].copy_from_slice(c);
            wrap_int(i64::from_le_bytes(b), elem)
        })
        .collect()
}

/// The little-endian bytes of integers of `elem`.
pub fn ints_to_le(values: impl Iterator<Item = i64>, elem: ElemType) -> Vec<u8> {
    let n = elem.byte_size();
    values.flat_map(|v| v.to_le_bytes()[..n].to_vec()).collect()
}

impl Tensor {
    /// A tensor of `elem` holding `data` (of the matching kind), in
    /// row-major layout, rounded or wrapped to `elem`.
    pub fn new(elem: ElemType, data: TensorData) -> Tensor {
        match data {
            TensorData::Float(a) => Tensor::float(elem, a),
            TensorData::Int(a) => Tensor::int(elem, a),
            TensorData::Bool(a) => Tensor::bool(a),
        }
    }

    /// A tensor of `source`'s elements rearranged (a reshape, transpose,
    /// gather of them): its type, and row-major layout, but no rounding
    /// again, since every value is one of the type already.
    pub fn rearranged(source: &Tensor, data: TensorData) -> Tensor {
        let data = match data {
            TensorData::Float(a) => TensorData::Float(row_major(a)),
            TensorData::Int(a) => TensorData::Int(row_major(a)),
            TensorData::Bool(a) => TensorData::Bool(row_major(a)),
        };
        Tensor {
            elem: source.elem,
            data,
        }
    }

    /// The values, in row-major layout.
    pub fn data(&self) -> &TensorData {
        &self.data
    }

    /// A float tensor, rounded to `elem`.
    pub fn float(elem: ElemType, data: ArrayD<f64>) -> Tensor {
        Tensor {
            elem,
            data: TensorData::Float(row_major(data)),
        }
        .normalized()
    }

    /// An integer tensor, wrapped to `elem`'s width.
    pub fn int(elem: ElemType, data: ArrayD<i64>) -> Tensor {
        Tensor {
            elem,
            data: TensorData::Int(row_major(data)),
        }
        .normalized()
    }

    pub fn bool(data: ArrayD<bool>) -> Tensor {
        Tensor {
            elem: ElemType::I1,
            data: TensorData::Bool(row_major(data)),
        }
    }

    /// All zeros (or false) of a type.
    pub fn zeros(ty: &TensorType) -> Tensor {
        let shape: Vec<usize> = ty.shape.iter().map(|&d| d as usize).collect();
        let data = match ty.elem {
            e if e.is_float() => TensorData::Float(ArrayD::zeros(IxDyn(&shape))),
            ElemType::I1 => TensorData::Bool(ArrayD::from_elem(IxDyn(&shape), false)),
            _ => TensorData::Int(ArrayD::zeros(IxDyn(&shape))),
        };
        Tensor {
            elem: ty.elem,
            data,
        }
    }

    /// Rounds floats and wraps integers to the element type.
    pub fn normalized(mut self) -> Tensor {
        let elem = self.elem;
        match &mut self.data {
            TensorData::Float(a) if elem != ElemType::F64 => a.mapv_inplace(|x| round_to(x, elem)),
            TensorData::Int(a) if elem != ElemType::I64 => a.mapv_inplace(|x| wrap_int(x, elem)),
            _ => {}
        }
        self
    }

    pub fn shape(&self) -> &[usize] {
        match &self.data {
            TensorData::Float(a) => a.shape(),
            TensorData::Int(a) => a.shape(),
            TensorData::Bool(a) => a.shape(),
        }
    }

    pub fn len(&self) -> usize {
        self.shape().iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn ty(&self) -> TensorType {
        TensorType::new(self.shape().iter().map(|&d| d as i64).collect(), self.elem)
    }

    pub fn as_float(&self) -> Option<&ArrayD<f64>> {
        match &self.data {
            TensorData::Float(a) => Some(a),
            _ => None,
        }
    }

    pub fn as_int(&self) -> Option<&ArrayD<i64>> {
        match &self.data {
            TensorData::Int(a) => Some(a),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<&ArrayD<bool>> {
        match &self.data {
            TensorData::Bool(a) => Some(a),
            _ => None,
        }
    }

    /// The values as f64, whatever the element type (booleans are 0 or 1).
    pub fn to_f64(&self) -> ArrayD<f64> {
        match &self.data {
            TensorData::Float(a) => a.clone(),
            TensorData::Int(a) => a.mapv(|x| int_to_f64(x, self.elem)),
            TensorData::Bool(a) => a.mapv(|x| x as u8 as f64),
        }
    }

    /// The values as i64 (floats truncate towards zero, as ONNX's Cast
    /// does; a u64 is its bit pattern).
    pub fn to_i64(&self) -> ArrayD<i64> {
        match &self.data {
            TensorData::Float(a) => a.mapv(|x| if x.is_nan() { 0 } else { x as i64 }),
            TensorData::Int(a) => a.clone(),
            TensorData::Bool(a) => a.mapv(|x| x as i64),
        }
    }

    /// Converts to another element type with ONNX Cast semantics.
    pub fn cast(&self, to: ElemType) -> Tensor {
        match to {
            e if e.is_float() => Tensor::float(e, self.to_f64()),
            ElemType::I1 => Tensor::bool(match &self.data {
                TensorData::Float(a) => a.mapv(|x| x != 0.0),
                TensorData::Int(a) => a.mapv(|x| x != 0),
                TensorData::Bool(a) => a.clone(),
            }),
            e => Tensor::int(e, self.to_i64()),
        }
    }

    /// A tensor stored as `byte_storage(to)` read back as `to`; an error
    /// names the first value `to` cannot hold.
    pub fn narrowed(self, to: ElemType) -> Result<Tensor, String> {
        if self.elem == to || byte_storage(to) != self.elem {
            return Ok(self);
        }
        let narrowed = self.cast(to);
        let (a, b) = (self.to_f64(), narrowed.to_f64());
        match a
            .iter()
            .zip(b.iter())
            .find(|(x, y)| x.to_bits() != y.to_bits())
        {
            Some((x, _)) => Err(format!("{x} is not a value of {to}")),
            None => Ok(narrowed),
        }
    }

    pub fn from_dense(d: &DenseAttr) -> Tensor {
        let shape = IxDyn(&d.ty.shape.iter().map(|&x| x as usize).collect::<Vec<_>>());
        fn array<T: Clone>(shape: IxDyn, v: &[T]) -> ArrayD<T> {
            if v.len() == 1 {
                ArrayD::from_elem(shape, v[0].clone())
            } else {
                ArrayD::from_shape_vec(shape, v.to_vec())
                    .expect("a dense constant holds one value per element")
            }
        }
        let data = match &d.values {
            DenseValues::Float(v) => TensorData::Float(array(shape, v)),
            DenseValues::Int(v) => TensorData::Int(array(shape, v)),
            DenseValues::Bool(v) => TensorData::Bool(array(shape, v)),
        };
        Tensor {
            elem: d.ty.elem,
            data,
        }
    }

    pub fn to_dense(&self) -> DenseAttr {
        let values = match &self.data {
            TensorData::Float(a) => {
                DenseValues::Float(a.iter().copied().collect::<Vec<_>>().into())
            }
            TensorData::Int(a) => DenseValues::Int(a.iter().copied().collect::<Vec<_>>().into()),
            TensorData::Bool(a) => DenseValues::Bool(a.iter().copied().collect::<Vec<_>>().into()),
        };
        DenseAttr::new(self.ty(), values).expect("a tensor's values match its type")
    }
}

/// `a` in row-major order: an array read in another order (a Fortran-order
/// `.npy`) is copied once here, so no reader of a tensor meets its strides.
fn row_major<T: Clone>(a: ArrayD<T>) -> ArrayD<T> {
    if a.is_standard_layout() {
        a
    } else {
        a.as_standard_layout().into_owned()
    }
}
