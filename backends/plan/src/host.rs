//! Tensors to and from the bytes of device memory, as a plan's `dtype`
//! lays them out: little-endian f32, f16 or i32, or bytes (i8, ui8),
//! densely in row-major order.

use ircc_core::stored::Bytes;
use ircc_core::{ElemType, StoredTensor, Tensor};
use ndarray::{ArrayD, IxDyn};

type R<T> = Result<T, String>;

/// The bytes of `t` stored as `dtype`, no more: its own bytes (shared,
/// not copied) where the file stores it as the device does (f32 weights
/// at f32, f16 at f16, bytes as bytes), else its values converted as
/// [`to_bytes`] converts them.
pub fn stored_bytes(t: &StoredTensor, dtype: &str) -> R<Bytes> {
    use ElemType as E;
    let same = matches!(
        (dtype, t.ty().elem),
        ("f32", E::F32) | ("f16", E::F16) | ("i32", E::I32) | ("i8", E::I8) | ("ui8", E::U8)
    );
    if same {
        return Ok(t.bytes().clone());
    }
    let exact = t.ty().num_elements() as u64 * dtype_size(dtype)?;
    let mut bytes = to_bytes(&t.to_tensor(), dtype, exact)?;
    bytes.truncate(exact as usize);
    Ok(Bytes::from(bytes))
}

/// [`stored_bytes`] zero-padded to a multiple of four bytes, for a buffer
/// of `bytes`; still shared where no padding is needed.
pub fn stored_to_bytes(t: &StoredTensor, dtype: &str, bytes: u64) -> R<Bytes> {
    let data = stored_bytes(t, dtype)?;
    if data.len() as u64 > bytes {
        return Err(format!(
            "{} bytes of data for a {bytes}-byte buffer",
            data.len()
        ));
    }
    let padded = bytes.div_ceil(4) as usize * 4;
    if data.len() == padded {
        return Ok(data);
    }
    let mut out = data.to_vec();
    out.resize(padded, 0);
    Ok(Bytes::from(out))
}

/// The bytes of an element stored as `dtype`.
pub fn dtype_size(dtype: &str) -> R<u64> {
    match dtype {
        "f32" | "i32" => Ok(4),
        "f16" => Ok(2),
        "i8" | "ui8" => Ok(1),
        other => Err(format!("no storage of element type {other}")),
    }
}

/// The bytes of `t` stored as `dtype`, zero-padded to a multiple of four
/// bytes; an error if they exceed `bytes`.
pub fn to_bytes(t: &Tensor, dtype: &str, bytes: u64) -> R<Vec<u8>> {
    let mut out = Vec::with_capacity(bytes as usize);
    match dtype {
        "f32" => t
            .to_f64()
            .iter()
            .for_each(|&x| out.extend((x as f32).to_le_bytes())),
        "f16" => t
            .to_f64()
            .iter()
            .for_each(|&x| out.extend(half::f16::from_f64(x).to_le_bytes())),
        // Kernels compute integers of every width in i32; a value outside
        // its range would be silently mis-read, so it is refused.
        "i32" => {
            for &x in t.to_i64().iter() {
                let fits = i32::try_from(x).is_ok() && !(t.elem == ElemType::U64 && x < 0);
                if !fits {
                    let x = if t.elem == ElemType::U64 {
                        (x as u64).to_string()
                    } else {
                        x.to_string()
                    };
                    return Err(format!(
                        "{} value {x} does not fit the GPU's 32-bit integers",
                        t.elem
                    ));
                }
                out.extend((x as i32).to_le_bytes());
            }
        }
        // Integers of 8 bits or fewer that no kernel writes, a byte each.
        "i8" | "ui8" => {
            let (lo, hi) = if dtype == "i8" { (-128, 127) } else { (0, 255) };
            for &x in t.to_i64().iter() {
                if !(lo..=hi).contains(&x) {
                    return Err(format!("{} value {x} does not fit a byte", t.elem));
                }
                out.push(x as u8);
            }
        }
        other => return Err(format!("no upload for element type {other}")),
    }
    if out.len() as u64 > bytes {
        return Err(format!(
            "{} bytes of data for a {bytes}-byte buffer",
            out.len()
        ));
    }
    out.resize(bytes.div_ceil(4) as usize * 4, 0);
    Ok(out)
}

/// The tensor of element type `elem` and `shape` that `data`, stored as
/// `dtype`, holds.
pub fn from_bytes(data: &[u8], dtype: &str, shape: &[usize], elem: ElemType) -> R<Tensor> {
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = match dtype {
        "f32" => data
            .chunks_exact(4)
            .take(n)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        "f16" => data
            .chunks_exact(2)
            .take(n)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        "i32" => data
            .chunks_exact(4)
            .take(n)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        "i8" => data.iter().take(n).map(|&b| f64::from(b as i8)).collect(),
        "ui8" => data.iter().take(n).map(|&b| f64::from(b)).collect(),
        other => return Err(format!("no download for element type {other}")),
    };
    let a = ArrayD::from_shape_vec(IxDyn(shape), vals).map_err(|e| e.to_string())?;
    Ok(if elem.is_float() {
        Tensor::float(elem, a)
    } else if elem == ElemType::I1 {
        Tensor::bool(a.mapv(|x| x != 0.0))
    } else {
        Tensor::int(elem, a.mapv(|x| x as i64))
    })
}

/// The bytes of each of `plan`'s inputs, `(buffer, bytes)`, after checking
/// that `inputs` are as many as the plan's and of their shapes.
pub fn input_bytes(plan: &crate::Plan, inputs: &[Tensor]) -> R<Vec<(usize, Vec<u8>)>> {
    if inputs.len() != plan.inputs.len() {
        return Err(format!(
            "{} inputs given, {} expected",
            inputs.len(),
            plan.inputs.len()
        ));
    }
    inputs
        .iter()
        .zip(&plan.inputs)
        .map(|(t, &id)| {
            let b = &plan.buffers[id];
            let expected: Vec<usize> = b.shape.iter().map(|&d| d as usize).collect();
            if t.shape() != expected.as_slice() {
                return Err(format!(
                    "input '{}' has shape {:?}, expected {:?}",
                    b.name,
                    t.shape(),
                    b.shape
                ));
            }
            Ok((id, to_bytes(t, &b.dtype, b.bytes.div_ceil(4) * 4)?))
        })
        .collect()
}
