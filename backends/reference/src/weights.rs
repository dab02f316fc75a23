//! Weights from a `.safetensors` file, looked up by `graph.param` name.

use std::path::{Path, PathBuf};

use ircc_core::interp::Env;
use ircc_core::{ElemType, Tensor, TensorType};
use ndarray::{ArrayD, IxDyn};
use safetensors::{Dtype, SafeTensors};

pub struct SafetensorsWeights {
    path: PathBuf,
    bytes: Vec<u8>,
}

impl SafetensorsWeights {
    pub fn open(path: &Path) -> Result<Self, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot read weights file {}: {e}", path.display()))?;
        SafeTensors::deserialize(&bytes)
            .map_err(|e| format!("{}: not a valid safetensors file: {e}", path.display()))?;
        Ok(SafetensorsWeights {
            path: path.to_path_buf(),
            bytes,
        })
    }
}

fn decode<const N: usize, T>(data: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    data.chunks_exact(N)
        .map(|c| f(c.try_into().unwrap_or([0; N])))
        .collect()
}

impl Env for SafetensorsWeights {
    fn param(&mut self, name: &str, ty: &TensorType) -> Result<Tensor, String> {
        // safetensors has no 4- or 2-bit types: they are stored a byte each.
        self.stored(name)?
            .narrowed(ty.elem)
            .map_err(|e| format!("weight '{name}' of {ty}: {e}"))
    }
}

impl SafetensorsWeights {
    fn stored(&self, name: &str) -> Result<Tensor, String> {
        let st = SafeTensors::deserialize(&self.bytes).map_err(|e| e.to_string())?;
        let view = st
            .tensor(name)
            .map_err(|_| format!("weight '{name}' is not in {}", self.path.display()))?;
        let shape = IxDyn(view.shape());
        let d = view.data();
        let arr = |v: Vec<f64>| ArrayD::from_shape_vec(shape.clone(), v).map_err(|e| e.to_string());
        let iarr =
            |v: Vec<i64>| ArrayD::from_shape_vec(shape.clone(), v).map_err(|e| e.to_string());
        Ok(match view.dtype() {
            Dtype::F32 => Tensor::float(
                ElemType::F32,
                arr(decode(d, |b| f32::from_le_bytes(b) as f64))?,
            ),
            Dtype::F64 => Tensor::float(ElemType::F64, arr(decode(d, f64::from_le_bytes))?),
            Dtype::F16 => Tensor::float(
                ElemType::F16,
                arr(decode(d, |b| half::f16::from_le_bytes(b).to_f64()))?,
            ),
            Dtype::BF16 => Tensor::float(
                ElemType::BF16,
                arr(decode(d, |b| half::bf16::from_le_bytes(b).to_f64()))?,
            ),
            Dtype::F8_E4M3 | Dtype::F8_E4M3FNUZ | Dtype::F8_E5M2 | Dtype::F8_E5M2FNUZ => {
                let elem = match view.dtype() {
                    Dtype::F8_E4M3 => ElemType::F8E4M3FN,
                    Dtype::F8_E4M3FNUZ => ElemType::F8E4M3FNUZ,
                    Dtype::F8_E5M2 => ElemType::F8E5M2,
                    _ => ElemType::F8E5M2FNUZ,
                };
                let f8 = ircc_core::minifloat::MiniFloat::of(elem).expect("an 8-bit float");
                Tensor::float(elem, arr(d.iter().map(|&b| f8.from_bits(b)).collect())?)
            }
            Dtype::I64
            | Dtype::I32
            | Dtype::I16
            | Dtype::I8
            | Dtype::U64
            | Dtype::U32
            | Dtype::U16
            | Dtype::U8 => {
                let elem = match view.dtype() {
                    Dtype::I64 => ElemType::I64,
                    Dtype::I32 => ElemType::I32,
                    Dtype::I16 => ElemType::I16,
                    Dtype::I8 => ElemType::I8,
                    Dtype::U64 => ElemType::U64,
                    Dtype::U32 => ElemType::U32,
                    Dtype::U16 => ElemType::U16,
                    _ => ElemType::U8,
                };
                Tensor::int(elem, iarr(ircc_core::tensor::ints_from_le(d, elem))?)
            }
            Dtype::BOOL => Tensor::bool(
                ArrayD::from_shape_vec(shape, d.iter().map(|&b| b != 0).collect())
                    .map_err(|e| e.to_string())?,
            ),
            other => return Err(format!("weight '{name}' has unsupported dtype {other:?}")),
        })
    }
}

/// Weights held in memory, as an import produces them.
pub struct MemoryWeights(pub std::collections::HashMap<String, Tensor>);

impl Env for MemoryWeights {
    fn param(&mut self, name: &str, _ty: &TensorType) -> Result<Tensor, String> {
        self.0
            .get(name)
            .cloned()
            .ok_or_else(|| format!("weight '{name}' is not among the imported weights"))
    }
}
