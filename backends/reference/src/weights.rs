//! Weights from a `.safetensors` file (mapped, and sliced per tensor),
//! looked up by `graph.param` name; writing weights as one; and weights
//! held in memory, as an import produces them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ircc_core::interp::Env;
use ircc_core::stored::{Bytes, map_file};
use ircc_core::tensor::byte_storage;
use ircc_core::{ElemType, StoredTensor, Tensor, TensorType};
use safetensors::{Dtype, SafeTensors};

/// The safetensors dtype a tensor of `elem` is stored as (safetensors has
/// no 4- or 2-bit types: those are stored a byte each, as
/// [`byte_storage`] says).
pub fn safetensors_dtype(elem: ElemType) -> Dtype {
    use ElemType as E;
    match byte_storage(elem) {
        E::F64 => Dtype::F64,
        E::F32 => Dtype::F32,
        E::F16 => Dtype::F16,
        E::BF16 => Dtype::BF16,
        E::F8E4M3FN => Dtype::F8_E4M3,
        E::F8E4M3FNUZ => Dtype::F8_E4M3FNUZ,
        E::F8E5M2 => Dtype::F8_E5M2,
        E::F8E5M2FNUZ => Dtype::F8_E5M2FNUZ,
        E::I64 => Dtype::I64,
        E::I32 => Dtype::I32,
        E::I16 => Dtype::I16,
        E::I8 => Dtype::I8,
        E::U64 => Dtype::U64,
        E::U32 => Dtype::U32,
        E::U16 => Dtype::U16,
        E::U8 => Dtype::U8,
        E::I1 => Dtype::BOOL,
        E::F4E2M1FN | E::I4 | E::U4 | E::I2 | E::U2 => {
            unreachable!("byte_storage widens the types narrower than a byte")
        }
    }
}

/// The element type of a safetensors dtype, where ircc has one.
pub fn elem_of_dtype(dtype: Dtype) -> Option<ElemType> {
    ElemType::ALL
        .into_iter()
        .find(|&e| byte_storage(e) == e && safetensors_dtype(e) == dtype)
}

/// Writes named tensors as a safetensors file, each in its stored type:
/// the bytes as they are held, never decoded.
pub fn write_safetensors(path: &Path, tensors: &[(String, StoredTensor)]) -> Result<(), String> {
    let views = tensors
        .iter()
        .map(|(name, t)| {
            let shape: Vec<usize> = t.ty().shape.iter().map(|&d| d as usize).collect();
            safetensors::tensor::TensorView::new(safetensors_dtype(t.ty().elem), shape, t.bytes())
                .map(|v| (name.clone(), v))
                .map_err(|e| format!("tensor '{name}': {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Written beside and renamed over by the crate: a link at the path
    // is replaced, as files::write_replacing does.
    safetensors::serialize_to_file(views, None, path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A safetensors file, mapped and checked whole (its header's offsets
/// against its size) when opened.
pub struct SafetensorsWeights {
    path: PathBuf,
    bytes: Bytes,
}

impl SafetensorsWeights {
    pub fn open(path: &Path) -> Result<Self, String> {
        let bytes = map_file(path)
            .map_err(|e| format!("cannot read the safetensors file {}: {e}", path.display()))?;
        SafeTensors::deserialize(&bytes)
            .map_err(|e| format!("{}: not a valid safetensors file: {e}", path.display()))?;
        Ok(SafetensorsWeights {
            path: path.to_path_buf(),
            bytes,
        })
    }

    fn file(&self) -> SafeTensors<'_> {
        SafeTensors::deserialize(&self.bytes).expect("checked when opened")
    }

    /// Every tensor of the file by name, as stored, in the file's order.
    pub fn tensors(&self) -> Result<Vec<(String, StoredTensor)>, String> {
        let file = self.file();
        let mut names: Vec<(usize, String)> = file
            .tensors()
            .into_iter()
            .map(|(name, view)| (view.data().as_ptr() as usize, name))
            .collect();
        names.sort();
        names
            .into_iter()
            .map(|(_, name)| Ok((name.clone(), self.stored(&name)?)))
            .collect()
    }

    /// The tensor `name` as the file stores it.
    pub fn stored(&self, name: &str) -> Result<StoredTensor, String> {
        let file = self.file();
        let view = file
            .tensor(name)
            .map_err(|_| format!("'{name}' is not in {}", self.path.display()))?;
        let elem = elem_of_dtype(view.dtype()).ok_or_else(|| {
            format!(
                "'{name}' in {} has the dtype {:?}, which ircc has no type for",
                self.path.display(),
                view.dtype()
            )
        })?;
        let shape = view.shape().iter().map(|&d| d as i64).collect();
        // The view's data is a slice of the mapped file.
        let start = view.data().as_ptr() as usize - self.bytes.as_ptr() as usize;
        let bytes = self.bytes.slice(start..start + view.data().len());
        StoredTensor::new(TensorType::new(shape, elem), bytes)
            .map_err(|e| format!("'{name}' in {}: {e}", self.path.display()))
    }
}

impl Env for SafetensorsWeights {
    fn param(&mut self, name: &str, ty: &TensorType) -> Result<Tensor, String> {
        self.stored_param(name, ty).map(|t| t.to_tensor())
    }

    fn stored_param(&mut self, name: &str, ty: &TensorType) -> Result<StoredTensor, String> {
        let t = self.stored(name).map_err(|e| format!("weight {e}"))?;
        // A type narrower than a byte is stored as a byte type: read back
        // as the declared type where each value is one of it.
        let narrow = ty.elem != t.ty().elem && byte_storage(ty.elem) == t.ty().elem;
        if !narrow {
            return Ok(t);
        }
        t.to_tensor()
            .narrowed(ty.elem)
            .map_err(|e| format!("weight '{name}' of {ty}: {e}"))?;
        StoredTensor::new(
            TensorType::new(t.ty().shape.clone(), ty.elem),
            t.bytes().clone(),
        )
    }
}

/// Weights held in memory, as an import produces them.
pub struct MemoryWeights(pub HashMap<String, StoredTensor>);

impl Env for MemoryWeights {
    fn param(&mut self, name: &str, ty: &TensorType) -> Result<Tensor, String> {
        self.stored_param(name, ty).map(|t| t.to_tensor())
    }

    fn stored_param(&mut self, name: &str, _ty: &TensorType) -> Result<StoredTensor, String> {
        self.0
            .get(name)
            .cloned()
            .ok_or_else(|| format!("weight '{name}' is not among the imported weights"))
    }
}
