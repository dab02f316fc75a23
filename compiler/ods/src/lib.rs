//! Operation definition specs, as MLIR's ODS: a dialect's ops are declared
//! once, as data, in `spec/dialects/*.toml`. This crate holds the schema of
//! those files ([`DialectSpec`]), which the registry reads at run time, and
//! the generator ([`generate`]) that a dialect's build script runs to give
//! each op a variant of the dialect's op enum and a typed accessor struct
//! (`Conv::group()` with the spec's default applied), so Rust code never
//! names an op or reads an attribute by a string of its own. The same is
//! done for the pass table, `spec/passes.toml` ([`generate_passes`]).

mod generate;
mod passes;
mod schema;

pub use generate::generate;
pub use passes::generate_passes;
pub use schema::{
    AttrKind, AttrSpecToml, DialectSpec, LayoutClass, MappingType, OpSpecToml, PassesSpec,
    ReductionDims, parse, parse_passes,
};
