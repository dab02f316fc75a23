//! Passes over the graph dialect: canonicalization, DNNFusion's algebraic
//! rewriting, attention folding, and the fusion and layout-elimination passes that read the
//! DNNFusion and SmartMem tables.

pub mod attention;
pub mod canonicalize;
pub mod fusion;
pub mod math;
