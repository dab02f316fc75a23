//! Generates the pass declarations and option structs from
//! `spec/passes.toml` (see `ircc-ods`).

fn main() {
    let spec = "../spec/passes.toml";
    println!("cargo::rerun-if-changed={spec}");
    let text = std::fs::read_to_string(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
    let code =
        ircc_ods::generate_passes(&text, "ircc_core").unwrap_or_else(|e| panic!("{spec}: {e}"));
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    std::fs::write(std::path::Path::new(&out).join("passes.rs"), code)
        .unwrap_or_else(|e| panic!("writing passes.rs: {e}"));
}
