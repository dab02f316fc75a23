//! The dialects of ircc. Each binds the op declarations of its spec in
//! `spec/dialects/` to Rust hooks; the specs are embedded so the binary
//! stands alone.

pub mod graph;
pub mod index;
pub mod kernel;

use ircc_core::{Diagnostic, Registry};

/// A registry with every dialect ircc ships.
pub fn registry() -> Result<Registry, Diagnostic> {
    let mut r = Registry::new();
    ircc_core::builtin::register(&mut r)?;
    graph::register(&mut r)?;
    index::register(&mut r)?;
    kernel::register(&mut r)?;
    Ok(r)
}
