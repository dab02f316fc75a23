//! ONNX tensors (TensorProto) to ircc tensors and back, external data
//! included.
//!
//! A tensor's raw bytes (in the model or in an external-data file) are
//! kept as they are, a [`StoredTensor`] sharing the file's mapped bytes,
//! and decoded only where an operator must be evaluated on them at import.
//! Each external-data file is mapped once, however many tensors it holds.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ircc_core::minifloat::MiniFloat;
use ircc_core::stored::{Bytes, map_file};
use ircc_core::{ElemType, StoredTensor, Tensor, TensorType};
use ndarray::{ArrayD, IxDyn};

use crate::proto::{DATA_LOCATION_EXTERNAL, TensorProto, data_type as dt};
use crate::{ImportError, Result};

/// The ircc element type of an ONNX data type.
pub fn elem_type(data_type: i32) -> Result<ElemType> {
    Ok(match data_type {
        dt::FLOAT => ElemType::F32,
        dt::DOUBLE => ElemType::F64,
        dt::FLOAT16 => ElemType::F16,
        dt::BFLOAT16 => ElemType::BF16,
        dt::FLOAT8E4M3FN => ElemType::F8E4M3FN,
        dt::FLOAT8E4M3FNUZ => ElemType::F8E4M3FNUZ,
        dt::FLOAT8E5M2 => ElemType::F8E5M2,
        dt::FLOAT8E5M2FNUZ => ElemType::F8E5M2FNUZ,
        dt::FLOAT4E2M1 => ElemType::F4E2M1FN,
        dt::INT64 => ElemType::I64,
        dt::INT32 => ElemType::I32,
        dt::INT16 => ElemType::I16,
        dt::INT8 => ElemType::I8,
        dt::UINT64 => ElemType::U64,
        dt::UINT32 => ElemType::U32,
        dt::UINT16 => ElemType::U16,
        dt::UINT8 => ElemType::U8,
        dt::INT4 => ElemType::I4,
        dt::UINT4 => ElemType::U4,
        dt::INT2 => ElemType::I2,
        dt::UINT2 => ElemType::U2,
        dt::BOOL => ElemType::I1,
        other => {
            let name = data_type_name(other);
            return Err(ImportError::unsupported(if name.is_empty() {
                format!("data type {other} is not an ONNX data type")
            } else {
                format!("data type {name} is not supported")
            }));
        }
    })
}

pub fn data_type_name(t: i32) -> &'static str {
    match t {
        dt::FLOAT => "float32",
        dt::UINT8 => "uint8",
        dt::INT8 => "int8",
        dt::UINT16 => "uint16",
        dt::INT16 => "int16",
        dt::INT32 => "int32",
        dt::INT64 => "int64",
        dt::STRING => "string",
        dt::BOOL => "bool",
        dt::FLOAT16 => "float16",
        dt::DOUBLE => "float64",
        dt::UINT32 => "uint32",
        dt::UINT64 => "uint64",
        dt::BFLOAT16 => "bfloat16",
        dt::FLOAT8E4M3FN => "float8e4m3fn",
        dt::FLOAT8E4M3FNUZ => "float8e4m3fnuz",
        dt::FLOAT8E5M2 => "float8e5m2",
        dt::FLOAT8E5M2FNUZ => "float8e5m2fnuz",
        dt::UINT4 => "uint4",
        dt::INT4 => "int4",
        dt::FLOAT4E2M1 => "float4e2m1",
        // Not held by ircc: named, so the error says which.
        dt::FLOAT8E8M0 => "float8e8m0",
        dt::UINT2 => "uint2",
        dt::INT2 => "int2",
        _ => "",
    }
}

/// The external-data files of a model's folder, each mapped once.
pub struct ExternalData {
    base: PathBuf,
    files: RefCell<HashMap<PathBuf, Bytes>>,
}

impl ExternalData {
    /// External data relative to `base`, the model's folder.
    pub fn new(base: &Path) -> ExternalData {
        ExternalData {
            base: base.to_path_buf(),
            files: RefCell::default(),
        }
    }

    /// The bytes of the file at `path`, mapped the first time.
    fn file(&self, path: &Path) -> std::result::Result<Bytes, String> {
        if let Some(b) = self.files.borrow().get(path) {
            return Ok(b.clone());
        }
        let bytes = map_file(path)?;
        self.files
            .borrow_mut()
            .insert(path.to_path_buf(), bytes.clone());
        Ok(bytes)
    }
}

fn external_bytes(t: &TensorProto, external: &ExternalData) -> Result<Bytes> {
    let get = |k: &str| {
        t.external_data
            .iter()
            .find(|e| e.key == k)
            .map(|e| e.value.as_str())
    };
    let location = get("location").ok_or_else(|| {
        ImportError::invalid(format!(
            "tensor '{}' has external data without a location",
            t.name
        ))
    })?;
    let path = ircc_core::files::file_inside(&external.base, location).map_err(|e| {
        ImportError::invalid(format!(
            "cannot read external data {location} of tensor '{}': {e}",
            t.name
        ))
    })?;
    let data = external
        .file(&path)
        .map_err(|e| ImportError::invalid(format!("external data of tensor '{}': {e}", t.name)))?;
    let number = |k: &str| -> Result<Option<usize>> {
        get(k)
            .map(|v| {
                v.parse::<usize>()
                    .map_err(|_| ImportError::invalid(format!("bad external data {k} '{v}'")))
            })
            .transpose()
    };
    let offset = number("offset")?.unwrap_or(0);
    let length = number("length")?.unwrap_or(data.len().saturating_sub(offset));
    match offset.checked_add(length) {
        Some(end) if end <= data.len() => Ok(data.slice(offset..end)),
        _ => Err(ImportError::invalid(format!(
            "external data of tensor '{}' ({offset}+{length} bytes) is beyond the end of {} ({} bytes)",
            t.name,
            path.display(),
            data.len()
        ))),
    }
}

/// The width of a type ONNX packs several to a byte.
fn packed_bits(elem: ElemType) -> Option<usize> {
    match elem {
        ElemType::I4 | ElemType::U4 | ElemType::F4E2M1FN => Some(4),
        ElemType::I2 | ElemType::U2 => Some(2),
        _ => None,
    }
}

/// A tensor of a 4- or 2-bit type: its bytes (the raw data, or one per
/// entry of int32_data) hold 8 / `bits` values each, the first in the low
/// bits; the last byte's unused bits are padding.
fn unpacked(
    t: &TensorProto,
    shape: &[usize],
    n: usize,
    elem: ElemType,
    bits: usize,
    raw: Option<&[u8]>,
) -> Result<Tensor> {
    let bytes = match raw {
        Some(raw) => raw.to_vec(),
        None => t
            .int32_data
            .iter()
            .map(|&x| {
                u8::try_from(x).map_err(|_| {
                    ImportError::invalid(format!(
                        "tensor '{}' of {elem}: int32_data entry {x} is not a packed byte",
                        t.name
                    ))
                })
            })
            .collect::<Result<Vec<u8>>>()?,
    };
    let per_byte = 8 / bits;
    let want = n.div_ceil(per_byte);
    if bytes.len() != want {
        return Err(ImportError::invalid(format!(
            "tensor '{}' of {} holds {} bytes but its shape {:?} needs {want} ({per_byte} values a byte)",
            t.name,
            elem,
            bytes.len(),
            t.dims
        )));
    }
    let mask = (1u8 << bits) - 1;
    let codes = bytes
        .iter()
        .flat_map(|&b| (0..per_byte).map(move |k| (b >> (k * bits)) & mask))
        .take(n);
    let bad = |e: ndarray::ShapeError| ImportError::invalid(e.to_string());
    Ok(match MiniFloat::of(elem) {
        Some(f) => Tensor::float(
            elem,
            ArrayD::from_shape_vec(IxDyn(shape), codes.map(|c| f.from_bits(c)).collect())
                .map_err(bad)?,
        ),
        None => Tensor::int(
            elem,
            ArrayD::from_shape_vec(IxDyn(shape), codes.map(i64::from).collect()).map_err(bad)?,
        ),
    })
}

/// Decodes a tensor; `base` is the folder external data is relative to.
pub fn to_tensor(t: &TensorProto, base: &Path) -> Result<Tensor> {
    to_stored(t, &ExternalData::new(base)).map(|s| s.to_tensor())
}

/// A tensor as stored: raw bytes (in the model or in `external` data) of a
/// type of a byte or more are kept undecoded, shared with the file;
/// values in typed fields and packed 4- and 2-bit values are decoded.
pub fn to_stored(t: &TensorProto, external: &ExternalData) -> Result<StoredTensor> {
    let elem = elem_type(t.data_type).map_err(|e| e.context(format!("tensor '{}'", t.name)))?;
    let raw = if t.data_location == DATA_LOCATION_EXTERNAL {
        Some(external_bytes(t, external)?)
    } else if !t.raw_data.is_empty() {
        Some(t.raw_data.clone())
    } else {
        None
    };
    let shape = dims(t)?;
    let n = shape.iter().product();
    let decoded = match (raw, packed_bits(elem)) {
        (raw, Some(bits)) => unpacked(t, &shape, n, elem, bits, raw.as_deref())?,
        (Some(raw), None) => {
            let ty = TensorType::new(shape.iter().map(|&d| d as i64).collect(), elem);
            return StoredTensor::new(ty, raw).map_err(|e| {
                ImportError::invalid(format!(
                    "tensor '{}' of {elem} with shape {:?}: {e}",
                    t.name, t.dims
                ))
            });
        }
        (None, None) => typed_fields(t, elem, &shape)?,
    };
    Ok(StoredTensor::from_tensor(&decoded))
}

/// The tensor's shape, checked: no negative extents, no overflowing count.
fn dims(t: &TensorProto) -> Result<Vec<usize>> {
    if t.dims.iter().any(|&d| d < 0) {
        return Err(ImportError::invalid(format!(
            "tensor '{}' has a negative dimension",
            t.name
        )));
    }
    let shape: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
    shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n as u64 <= ircc_core::limits::MAX_ELEMENTS as u64)
        .ok_or_else(|| ImportError::invalid(format!("tensor '{}' is too large", t.name)))?;
    Ok(shape)
}

/// The values of a tensor held in its typed fields.
fn typed_fields(t: &TensorProto, elem: ElemType, shape: &[usize]) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let floats: Vec<f64> = match elem {
        ElemType::F32 => t.float_data.iter().map(|&x| x as f64).collect(),
        ElemType::F64 => t.double_data.clone(),
        // float16 and bfloat16 travel as their bit patterns in int32_data.
        ElemType::F16 => t
            .int32_data
            .iter()
            .map(|&x| half::f16::from_bits(x as u16).to_f64())
            .collect(),
        ElemType::BF16 => t
            .int32_data
            .iter()
            .map(|&x| half::bf16::from_bits(x as u16).to_f64())
            .collect(),
        e if MiniFloat::of(e).is_some() => {
            let f8 = MiniFloat::of(e).expect("checked");
            t.int32_data
                .iter()
                .map(|&x| f8.from_bits(x as u8))
                .collect()
        }
        _ => Vec::new(),
    };
    // Without raw data, ONNX keeps int64 in int64_data, uint32 and uint64
    // in uint64_data, and narrower integers and bool in int32_data.
    let ints: Vec<i64> = match elem {
        e if e.is_float() => Vec::new(),
        ElemType::I64 => t.int64_data.clone(),
        ElemType::U64 | ElemType::U32 => t.uint64_data.iter().map(|&x| x as i64).collect(),
        e => t
            .int32_data
            .iter()
            .map(|&x| ircc_core::tensor::wrap_int(x as i64, e))
            .collect(),
    };
    let count = if elem.is_float() {
        floats.len()
    } else {
        ints.len()
    };
    if count != n {
        return Err(ImportError::invalid(format!(
            "tensor '{}' holds {count} values but its shape {:?} needs {n}",
            t.name, t.dims
        )));
    }
    let bad = |e: ndarray::ShapeError| ImportError::invalid(e.to_string());
    Ok(match elem {
        e if e.is_float() => Tensor::float(
            e,
            ArrayD::from_shape_vec(IxDyn(shape), floats).map_err(bad)?,
        ),
        ElemType::I1 => Tensor::bool(
            ArrayD::from_shape_vec(IxDyn(shape), ints.iter().map(|&v| v != 0).collect())
                .map_err(bad)?,
        ),
        e => Tensor::int(e, ArrayD::from_shape_vec(IxDyn(shape), ints).map_err(bad)?),
    })
}
