//! The inputs a command runs a model on: read from `.npy` files as the
//! command line names them, or seeded random ones.

use std::path::Path;

use ircc_core::{Diagnostic, ElemType, Module, Tensor, Type};
use ndarray::{ArrayD, IxDyn};

use crate::Failure;

/// Seeded inputs: floats in [-1, 1), integers in [0, 4), random booleans.
pub(crate) fn random_inputs(module: &Module, seed: u64) -> Result<Vec<Tensor>, Diagnostic> {
    let f = module
        .lookup_symbol("main")
        .ok_or_else(|| Diagnostic::plain("no function '@main'"))?;
    let entry = module
        .entry_block(f)
        .ok_or_else(|| Diagnostic::plain("'@main' has no body"))?;
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    module.blocks[entry]
        .args
        .iter()
        .map(|&a| {
            let Type::Tensor(t) = module.value_type(a) else {
                return Err(Diagnostic::plain("check needs tensor inputs"));
            };
            let shape = IxDyn(&t.shape.iter().map(|&d| d as usize).collect::<Vec<_>>());
            let n = t.num_elements() as usize;
            Ok(match t.elem {
                e if e.is_float() => Tensor::float(
                    e,
                    ArrayD::from_shape_vec(shape, (0..n).map(|_| next() * 2.0 - 1.0).collect())
                        .expect("sized"),
                ),
                ElemType::I1 => Tensor::bool(
                    ArrayD::from_shape_vec(shape, (0..n).map(|_| next() < 0.5).collect())
                        .expect("sized"),
                ),
                e => Tensor::int(
                    e,
                    ArrayD::from_shape_vec(shape, (0..n).map(|_| (next() * 4.0) as i64).collect())
                        .expect("sized"),
                ),
            })
        })
        .collect()
}

/// The inputs `specs` (`NAME=PATH.npy`, or `PATH.npy` in order) give the
/// function whose inputs are `names`.
pub(crate) fn read_inputs(specs: &[String], names: &[String]) -> Result<Vec<Tensor>, Failure> {
    let mut slots: Vec<Option<Tensor>> = vec![None; names.len()];
    let mut next_positional = 0;
    for spec in specs {
        let (index, path) = match spec.split_once('=') {
            Some((name, path)) => {
                let i = names.iter().position(|n| n == name).ok_or_else(|| {
                    Diagnostic::plain(format!(
                        "no input named '{name}' (inputs: {})",
                        names.join(", ")
                    ))
                })?;
                (i, path)
            }
            None => {
                let i = next_positional;
                next_positional += 1;
                (i, spec.as_str())
            }
        };
        if index >= names.len() {
            return Err(Diagnostic::plain(format!(
                "too many inputs: the function takes {}",
                names.len()
            ))
            .into());
        }
        slots[index] = Some(ircc_reference::read_npy(Path::new(path)).map_err(Diagnostic::plain)?);
    }
    slots
        .into_iter()
        .zip(names)
        .map(|(t, n)| {
            t.ok_or_else(|| {
                Diagnostic::plain(format!("missing input '{n}' (give --input {n}=PATH.npy)")).into()
            })
        })
        .collect()
}
