//! Generates the typed ops of each dialect from its spec (see `ircc-ods`).

use std::path::Path;

fn main() {
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    for dialect in ["graph", "kernel"] {
        let spec = format!("../spec/dialects/{dialect}.toml");
        println!("cargo::rerun-if-changed={spec}");
        let text = std::fs::read_to_string(&spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let code = ircc_ods::generate(&text, "ircc_core").unwrap_or_else(|e| panic!("{spec}: {e}"));
        std::fs::write(Path::new(&out).join(format!("{dialect}_ops.rs")), code)
            .unwrap_or_else(|e| panic!("writing {dialect}_ops.rs: {e}"));
    }
}
