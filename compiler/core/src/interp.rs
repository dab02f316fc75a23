//! What an interpret hook may ask of the interpreter running it.

use crate::ir::{Module, RegionId};
use crate::stored::StoredTensor;
use crate::tensor::Tensor;
use crate::types::TensorType;

pub trait Env {
    /// The weight named `name` (a `graph.param`), checked against `ty`.
    fn param(&mut self, name: &str, ty: &TensorType) -> Result<Tensor, String>;

    /// The weight named `name` as stored, for a writer or a GPU upload
    /// that needs its bytes rather than its values; an environment
    /// holding stored weights gives them without decoding.
    fn stored_param(&mut self, name: &str, ty: &TensorType) -> Result<StoredTensor, String> {
        self.param(name, ty).map(|t| StoredTensor::from_tensor(&t))
    }

    /// Runs the single block of `region` on `args` and returns what its
    /// terminator yields (the body of a fused op, say).
    fn run_region(
        &mut self,
        _module: &Module,
        _region: RegionId,
        _args: Vec<Tensor>,
    ) -> Result<Vec<Tensor>, String> {
        Err("regions cannot be run here".to_string())
    }
}

/// The weight `name` from `env`, refused unless it has exactly the shape
/// and element type `ty` that the IR declares: every backend reads weights
/// through this, so none pads, truncates or reinterprets one.
pub fn checked_param(env: &mut dyn Env, name: &str, ty: &TensorType) -> Result<Tensor, String> {
    let t = env.param(name, ty)?;
    check_weight_type(name, &t.ty(), ty)?;
    Ok(t)
}

fn check_weight_type(name: &str, got: &TensorType, ty: &TensorType) -> Result<(), String> {
    if got.shape != ty.shape {
        return Err(format!(
            "weight '{name}' has shape {:?} but the IR declares {ty}",
            got.shape
        ));
    }
    if got.elem != ty.elem {
        return Err(format!(
            "weight '{name}' has element type {} but the IR declares {ty}",
            got.elem
        ));
    }
    Ok(())
}

/// [`checked_param`] as stored.
pub fn checked_stored_param(
    env: &mut dyn Env,
    name: &str,
    ty: &TensorType,
) -> Result<StoredTensor, String> {
    let t = env.stored_param(name, ty)?;
    check_weight_type(name, t.ty(), ty)?;
    Ok(t)
}

/// An environment with no weights, for constant folding.
pub struct NoWeights;

impl Env for NoWeights {
    fn param(&mut self, name: &str, _ty: &TensorType) -> Result<Tensor, String> {
        Err(format!("weight '{name}' is not available here"))
    }
}
