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

/// What a dialect crate's build script does: for each of `dialects`,
/// generate the typed ops of `SPEC_DIR/NAME.toml` into `OUT_DIR/NAME_ops.rs`
/// (`core` is the IR crate's path as that crate sees it), and have cargo
/// rerun the script when a spec changes. A bad spec fails the build with
/// the generator's message.
pub fn build_dialects(spec_dir: &str, dialects: &[&str], core: &str) {
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    for dialect in dialects {
        let spec = format!("{spec_dir}/{dialect}.toml");
        println!("cargo::rerun-if-changed={spec}");
        let text = std::fs::read_to_string(&spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let code = generate(&text, core).unwrap_or_else(|e| panic!("{spec}: {e}"));
        std::fs::write(
            std::path::Path::new(&out).join(format!("{dialect}_ops.rs")),
            code,
        )
        .unwrap_or_else(|e| panic!("writing {dialect}_ops.rs: {e}"));
    }
}
