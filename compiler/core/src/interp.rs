//! What an interpret hook may ask of the interpreter running it.

use crate::tensor::Tensor;
use crate::types::TensorType;

pub trait Env {
    /// The weight named `name` (a `graph.param`), checked against `ty`.
    fn param(&mut self, name: &str, ty: &TensorType) -> Result<Tensor, String>;
}

/// An environment with no weights, for constant folding.
pub struct NoWeights;

impl Env for NoWeights {
    fn param(&mut self, name: &str, _ty: &TensorType) -> Result<Tensor, String> {
        Err(format!("weight '{name}' is not available here"))
    }
}
