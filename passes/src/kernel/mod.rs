//! Passes over the kernel dialect.

pub mod ace;
