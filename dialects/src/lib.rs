//! The dialects of ircc. Each binds the op declarations of its spec in
//! `spec/dialects/` to Rust hooks; the specs are embedded so the binary
//! stands alone.

pub mod graph;
pub mod index;
pub mod kernel;
pub mod texture;

use ircc_core::{Diagnostic, Registry};

/// A registry with every dialect ircc ships.
pub fn registry() -> Result<Registry, Diagnostic> {
    let mut r = Registry::new();
    ircc_core::builtin::register(&mut r)?;
    graph::register(&mut r)?;
    index::register(&mut r)?;
    kernel::register(&mut r)?;
    texture::register(&mut r)?;
    Ok(r)
}

use ircc_core::{DenseAttr, Module, OpId, ValueId};

/// Whether `op` holds data instead of computing it: a weight, a constant
/// or a view of another tensor. Such ops never become kernels of their own.
pub fn is_data(m: &Module, op: OpId) -> bool {
    matches!(
        graph::GraphOp::of(m, op),
        Some(graph::GraphOp::Param | graph::GraphOp::Constant)
    ) || index::IndexOp::of(m, op).is_some()
}

/// The tensor `v` holds when a `graph.constant` defines it.
pub fn constant_of(m: &Module, v: ValueId) -> Option<&DenseAttr> {
    let constant = graph::ops::Constant::new(m, m.defining_op(v)?)?;
    Some(constant.value())
}
