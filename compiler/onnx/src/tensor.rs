//! ONNX tensors (TensorProto) to ircc tensors and back, external data
//! included.

use std::path::Path;

use ircc_core::minifloat::MiniFloat;
use ircc_core::{ElemType, Tensor};
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

fn external_bytes(t: &TensorProto, base: &Path) -> Result<Vec<u8>> {
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
    let path = ircc_core::files::file_inside(base, location).map_err(|e| {
        ImportError::invalid(format!(
            "cannot read external data {location} of tensor '{}': {e}",
            t.name
        ))
    })?;
    let data = std::fs::read(&path).map_err(|e| {
        ImportError::invalid(format!(
            "cannot read external data {} of tensor '{}': {e}",
            path.display(),
            t.name
        ))
    })?;
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
    data.get(offset..offset.saturating_add(length))
        .map(<[u8]>::to_vec)
        .ok_or_else(|| {
            ImportError::invalid(format!(
                "external data of tensor '{}' ({offset}+{length} bytes) is beyond the end of {}",
                t.name,
                path.display()
            ))
        })
}

fn from_le<const N: usize, T>(raw: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    raw.chunks_exact(N)
        .map(|c| f(c.try_into().unwrap_or([0; N])))
        .collect()
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
    raw: Option<Vec<u8>>,
) -> Result<Tensor> {
    let bytes = match raw {
        Some(raw) => raw,
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
    let elem = elem_type(t.data_type).map_err(|e| e.context(format!("tensor '{}'", t.name)))?;
    if t.dims.iter().any(|&d| d < 0) {
        return Err(ImportError::invalid(format!(
            "tensor '{}' has a negative dimension",
            t.name
        )));
    }
    let shape: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| ImportError::invalid("tensor too large"))?;
    let raw = if t.data_location == DATA_LOCATION_EXTERNAL {
        Some(external_bytes(t, base)?)
    } else if !t.raw_data.is_empty() {
        Some(t.raw_data.clone())
    } else {
        None
    };
    if let Some(bits) = packed_bits(elem) {
        return unpacked(t, &shape, n, elem, bits, raw);
    }
    let floats: Vec<f64> = match (&raw, elem) {
        (Some(r), ElemType::F32) => from_le(r, |b| f32::from_le_bytes(b) as f64),
        (Some(r), ElemType::F64) => from_le(r, f64::from_le_bytes),
        (Some(r), ElemType::F16) => from_le(r, |b| half::f16::from_le_bytes(b).to_f64()),
        (Some(r), ElemType::BF16) => from_le(r, |b| half::bf16::from_le_bytes(b).to_f64()),
        (Some(r), e) if MiniFloat::of(e).is_some() => {
            let f8 = MiniFloat::of(e).expect("checked");
            r.iter().map(|&b| f8.from_bits(b)).collect()
        }
        (None, ElemType::F32) => t.float_data.iter().map(|&x| x as f64).collect(),
        (None, ElemType::F64) => t.double_data.clone(),
        // float16 and bfloat16 travel as their bit patterns in int32_data.
        (None, ElemType::F16) => t
            .int32_data
            .iter()
            .map(|&x| half::f16::from_bits(x as u16).to_f64())
            .collect(),
        (None, ElemType::BF16) => t
            .int32_data
            .iter()
            .map(|&x| half::bf16::from_bits(x as u16).to_f64())
            .collect(),
        (None, e) if MiniFloat::of(e).is_some() => {
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
    let ints: Vec<i64> = match (&raw, elem) {
        (_, e) if e.is_float() => Vec::new(),
        (Some(r), e) => ircc_core::tensor::ints_from_le(r, e),
        (None, ElemType::I64) => t.int64_data.clone(),
        (None, ElemType::U64 | ElemType::U32) => t.uint64_data.iter().map(|&x| x as i64).collect(),
        (None, e) => t
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
            ArrayD::from_shape_vec(IxDyn(&shape), floats).map_err(bad)?,
        ),
        ElemType::I1 => Tensor::bool(
            ArrayD::from_shape_vec(IxDyn(&shape), ints.iter().map(|&v| v != 0).collect())
                .map_err(bad)?,
        ),
        e => Tensor::int(e, ArrayD::from_shape_vec(IxDyn(&shape), ints).map_err(bad)?),
    })
}
