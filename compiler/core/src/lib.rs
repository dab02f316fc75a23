//! ircc's core: the IR and everything every dialect shares.
//!
//! Data flows `parse` → [`ir::Module`] → (`verify`, passes) → `print`. The
//! IR stores operations, values, blocks and regions in arenas with typed
//! handles ([`arena`]); attributes and types are plain values ([`attr`],
//! [`types`]) and affine maps are first-class ([`affine`]). Dialects plug in
//! through the [`registry`], whose op definitions come from TOML specs;
//! passes through the [`pass`] manager.

pub mod affine;
pub mod arena;
pub mod attr;
pub mod builtin;
pub mod diag;
pub mod files;
pub mod interp;
pub mod ir;
pub mod limits;
pub mod minifloat;
pub mod parse;
pub mod pass;
pub mod plugin;
pub mod print;
pub mod registry;
pub mod stored;
pub mod tensor;
pub mod uses;
pub mod verify;

pub use affine::{AffineExpr, AffineMap};
pub use attr::{Attribute, Attributes, DenseAttr, DenseValues};
pub use diag::{Diagnostic, Diagnostics, Location};
pub use ir::{BlockId, Module, OpBuilder, OpId, Operation, RegionId, ValueId};
pub use parse::{parse_attribute, parse_module};
pub use print::{Form, print_module};
pub use registry::{OpHooks, OpView, Registry};
pub use stored::StoredTensor;
pub use tensor::{Tensor, TensorData};
pub use types::{ElemType, TensorType, Type};

pub mod types;
