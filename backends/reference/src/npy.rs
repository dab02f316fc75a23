//! `.npy` input and output through `ndarray-npy`.

use std::path::Path;

use ircc_core::{ElemType, Tensor, TensorData};
use ndarray::ArrayD;
use ndarray_npy::{ReadNpyExt, WriteNpyExt};

/// Reads a `.npy` file of any element type ircc supports.
pub fn read_npy(path: &Path) -> Result<Tensor, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let b = &bytes[..];
    if let Ok(a) = ArrayD::<f32>::read_npy(b) {
        return Ok(Tensor::float(ElemType::F32, a.mapv(f64::from)));
    }
    if let Ok(a) = ArrayD::<f64>::read_npy(b) {
        return Ok(Tensor::float(ElemType::F64, a));
    }
    if let Ok(a) = ArrayD::<i64>::read_npy(b) {
        return Ok(Tensor::int(ElemType::I64, a));
    }
    if let Ok(a) = ArrayD::<i32>::read_npy(b) {
        return Ok(Tensor::int(ElemType::I32, a.mapv(i64::from)));
    }
    if let Ok(a) = ArrayD::<i16>::read_npy(b) {
        return Ok(Tensor::int(ElemType::I16, a.mapv(i64::from)));
    }
    if let Ok(a) = ArrayD::<i8>::read_npy(b) {
        return Ok(Tensor::int(ElemType::I8, a.mapv(i64::from)));
    }
    if let Ok(a) = ArrayD::<u64>::read_npy(b) {
        return Ok(Tensor::int(ElemType::U64, a.mapv(|x| x as i64)));
    }
    if let Ok(a) = ArrayD::<u32>::read_npy(b) {
        return Ok(Tensor::int(ElemType::U32, a.mapv(i64::from)));
    }
    if let Ok(a) = ArrayD::<u16>::read_npy(b) {
        return Ok(Tensor::int(ElemType::U16, a.mapv(i64::from)));
    }
    if let Ok(a) = ArrayD::<u8>::read_npy(b) {
        return Ok(Tensor::int(ElemType::U8, a.mapv(i64::from)));
    }
    if let Ok(a) = ArrayD::<bool>::read_npy(b) {
        return Ok(Tensor::bool(a));
    }
    Err(format!(
        "{}: not a .npy file of a supported type (float32, float64, int64, int32, int16, int8, uint64, uint32, uint16, uint8, bool)",
        path.display()
    ))
}

/// Writes a tensor as `.npy` (f16, bf16 and the 8- and 4-bit floats widen
/// to float32, the 4- and 2-bit integers to a byte).
pub fn write_npy(path: &Path, t: &Tensor) -> Result<(), String> {
    let file = std::fs::File::create(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let w = std::io::BufWriter::new(file);
    let r = match (t.data(), t.elem) {
        (TensorData::Float(a), ElemType::F64) => a.write_npy(w),
        (TensorData::Float(a), _) => a.mapv(|x| x as f32).write_npy(w),
        (TensorData::Int(a), ElemType::I32) => a.mapv(|x| x as i32).write_npy(w),
        (TensorData::Int(a), ElemType::I16) => a.mapv(|x| x as i16).write_npy(w),
        // numpy has no 4- or 2-bit integers: they widen to a byte.
        (TensorData::Int(a), ElemType::I8 | ElemType::I4 | ElemType::I2) => {
            a.mapv(|x| x as i8).write_npy(w)
        }
        (TensorData::Int(a), ElemType::U64) => a.mapv(|x| x as u64).write_npy(w),
        (TensorData::Int(a), ElemType::U32) => a.mapv(|x| x as u32).write_npy(w),
        (TensorData::Int(a), ElemType::U16) => a.mapv(|x| x as u16).write_npy(w),
        (TensorData::Int(a), ElemType::U8 | ElemType::U4 | ElemType::U2) => {
            a.mapv(|x| x as u8).write_npy(w)
        }
        (TensorData::Int(a), _) => a.write_npy(w),
        (TensorData::Bool(a), _) => a.write_npy(w),
    };
    r.map_err(|e| format!("cannot write {}: {e}", path.display()))
}
