//! Tensors as files store them: a type and the elements' little-endian
//! bytes, kept undecoded until something needs their values.
//!
//! A model's weights pass from the file they are read from (ONNX external
//! data, a safetensors file, both mapped into memory) to the file or GPU
//! buffer they are written to without being widened: a [`Tensor`] holds
//! floats as f64, eight bytes an element, which for a published-size
//! network is several times the weights themselves. The bytes are shared
//! ([`Bytes`]): a slice of a mapped file or of one allocation, so cloning
//! a stored tensor copies nothing.
//!
//! Each element is stored as [`byte_storage`] of its type gives, as
//! safetensors stores it: floats and integers of a byte or more as
//! themselves, the 4- and 2-bit types a byte each, booleans a byte each.

use std::fs::File;
use std::path::Path;

pub use bytes::Bytes;
use ndarray::{ArrayD, IxDyn};

use crate::minifloat::MiniFloat;
use crate::tensor::{Tensor, TensorData, byte_storage, ints_from_le, ints_to_le};
use crate::types::{ElemType, TensorType};

#[derive(Clone, Debug, PartialEq)]
pub struct StoredTensor {
    ty: TensorType,
    bytes: Bytes,
}

impl StoredTensor {
    /// The tensor of `ty` that `bytes` store; an error unless they hold
    /// exactly one stored element per element of `ty`.
    pub fn new(ty: TensorType, bytes: Bytes) -> Result<StoredTensor, String> {
        let want = (ty.num_elements() as u64).checked_mul(byte_storage(ty.elem).byte_size() as u64);
        if want != Some(bytes.len() as u64) {
            return Err(format!(
                "{} bytes hold no {ty}, which takes {} bytes",
                bytes.len(),
                want.map_or("more".to_string(), |w| w.to_string())
            ));
        }
        Ok(StoredTensor { ty, bytes })
    }

    /// The tensor with its bytes copied out of any file they are mapped
    /// from, for a holder that outlives the file's contents (a model a
    /// program keeps while the file may be rewritten).
    pub fn detached(&self) -> StoredTensor {
        StoredTensor {
            ty: self.ty.clone(),
            bytes: Bytes::copy_from_slice(&self.bytes),
        }
    }

    /// `t`'s values stored in its own type.
    pub fn from_tensor(t: &Tensor) -> StoredTensor {
        let storage = byte_storage(t.elem);
        let bytes: Vec<u8> = match t.data() {
            TensorData::Float(a) => match storage {
                ElemType::F64 => a.iter().flat_map(|x| x.to_le_bytes()).collect(),
                ElemType::F32 => a.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect(),
                ElemType::F16 => a
                    .iter()
                    .flat_map(|&x| half::f16::from_f64(x).to_le_bytes())
                    .collect(),
                ElemType::BF16 => a
                    .iter()
                    .flat_map(|&x| half::bf16::from_f64(x).to_le_bytes())
                    .collect(),
                e => {
                    let f8 = MiniFloat::of(e).expect("every other float is a minifloat");
                    a.iter().map(|&x| f8.to_bits(x)).collect()
                }
            },
            TensorData::Int(a) => ints_to_le(a.iter().copied(), storage),
            TensorData::Bool(a) => a.iter().map(|&b| b as u8).collect(),
        };
        StoredTensor {
            ty: t.ty(),
            bytes: Bytes::from(bytes),
        }
    }

    pub fn ty(&self) -> &TensorType {
        &self.ty
    }

    /// The stored bytes: each element as [`byte_storage`] of the type.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The values, decoded.
    pub fn to_tensor(&self) -> Tensor {
        let elem = self.ty.elem;
        let storage = byte_storage(elem);
        let shape = IxDyn(
            &self
                .ty
                .shape
                .iter()
                .map(|&d| d as usize)
                .collect::<Vec<_>>(),
        );
        let b = &self.bytes[..];
        fn le<const N: usize>(b: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
            b.chunks_exact(N)
                .map(|c| c.try_into().expect("chunks of N"))
        }
        let floats = |v: Vec<f64>| {
            Tensor::float(
                elem,
                ArrayD::from_shape_vec(shape.clone(), v).expect("checked when stored"),
            )
        };
        match storage {
            ElemType::F64 => floats(le::<8>(b).map(f64::from_le_bytes).collect()),
            ElemType::F32 => floats(le::<4>(b).map(|x| f32::from_le_bytes(x) as f64).collect()),
            ElemType::F16 => floats(
                le::<2>(b)
                    .map(|x| half::f16::from_le_bytes(x).to_f64())
                    .collect(),
            ),
            ElemType::BF16 => floats(
                le::<2>(b)
                    .map(|x| half::bf16::from_le_bytes(x).to_f64())
                    .collect(),
            ),
            ElemType::I1 => Tensor::bool(
                ArrayD::from_shape_vec(shape, b.iter().map(|&x| x != 0).collect())
                    .expect("checked when stored"),
            ),
            e if e.is_float() => {
                let f8 = MiniFloat::of(e).expect("every other float is a minifloat");
                floats(b.iter().map(|&x| f8.from_bits(x)).collect())
            }
            e => Tensor::int(
                elem,
                ArrayD::from_shape_vec(shape, ints_from_le(b, e)).expect("checked when stored"),
            ),
        }
    }
}

/// The bytes of the file at `path`, mapped into memory: read by the pages
/// a reader touches, shared by every slice taken of them.
///
/// A mapped file that another program truncates while it is mapped would
/// fault on the next read of a lost page, as it would for any program
/// mapping its inputs (safetensors and onnxruntime do); ircc only reads
/// the files it is given.
pub fn map_file(path: &Path) -> Result<Bytes, String> {
    // Asked before opening: opening a FIFO blocks until a writer comes.
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    let file = File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let len = file
        .metadata()
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .len();
    if len == 0 {
        // Mapping nothing is an error on some systems.
        return Ok(Bytes::new());
    }
    // SAFETY: the map is read-only; see the note above on files changed
    // while mapped.
    let map = unsafe { memmap2::Mmap::map(&file) }
        .map_err(|e| format!("cannot map {}: {e}", path.display()))?;
    Ok(Bytes::from_owner(map))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_round_trips_through_its_stored_bytes() {
        for elem in ElemType::ALL {
            let ty = TensorType::new(vec![2, 3], elem);
            let values: Vec<f64> = [0.0, 1.0, -1.0, 0.5, 3.0, -2.0].to_vec();
            let t = match elem {
                ElemType::I1 => Tensor::bool(
                    ArrayD::from_shape_vec(
                        IxDyn(&[2, 3]),
                        values.iter().map(|&v| v != 0.0).collect(),
                    )
                    .unwrap(),
                ),
                e if e.is_float() => {
                    Tensor::float(e, ArrayD::from_shape_vec(IxDyn(&[2, 3]), values).unwrap())
                }
                e => Tensor::int(
                    e,
                    ArrayD::from_shape_vec(
                        IxDyn(&[2, 3]),
                        values.iter().map(|&v| v as i64).collect(),
                    )
                    .unwrap(),
                ),
            };
            let stored = StoredTensor::from_tensor(&t);
            assert_eq!(stored.ty(), &ty);
            assert_eq!(
                stored.bytes().len(),
                6 * byte_storage(elem).byte_size(),
                "{elem}"
            );
            assert_eq!(stored.to_tensor(), t, "{elem}");
            let again = StoredTensor::new(ty, stored.bytes().clone()).unwrap();
            assert_eq!(again.to_tensor(), t, "{elem}");
        }
    }

    #[test]
    fn bytes_of_another_size_are_refused() {
        let ty = TensorType::new(vec![4], ElemType::F32);
        let err = StoredTensor::new(ty, Bytes::from(vec![0u8; 15])).unwrap_err();
        assert!(err.contains("15 bytes") && err.contains("16"), "{err}");
    }

    #[test]
    fn a_mapped_file_reads_its_bytes() {
        let dir = std::env::temp_dir().join(format!("ircc-map-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.bin");
        std::fs::write(&path, [1u8, 2, 3, 4, 5]).unwrap();
        let bytes = map_file(&path).unwrap();
        assert_eq!(&bytes.slice(1..4)[..], &[2, 3, 4]);
        std::fs::write(dir.join("empty"), []).unwrap();
        assert!(map_file(&dir.join("empty")).unwrap().is_empty());
        assert!(
            map_file(&dir.join("missing"))
                .unwrap_err()
                .contains("missing")
        );
        assert!(map_file(&dir).unwrap_err().contains("not a regular file"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
