//! Conversions from one level to the next, as MLIR's `Conversion/`:
//! `graph_to_kernel` (the `kernel.lower` pass) turns fused graph groups
//! into kernel IR.

pub mod graph_to_kernel;
