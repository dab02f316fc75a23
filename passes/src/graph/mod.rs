//! Passes over the graph dialect: canonicalization, DNNFusion's algebraic
//! rewriting, and the fusion and layout-elimination passes that read the
//! DNNFusion and SmartMem tables.

pub mod canonicalize;
pub mod fusion;
pub mod math;
