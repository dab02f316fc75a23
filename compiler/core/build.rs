//! Generates the typed ops of the dialects the textual format itself knows
//! (`func`, and `index` for the pretty form of `index.view`) from their
//! specs; see `ircc-ods`.

fn main() {
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    for dialect in ["func", "index"] {
        let spec = format!("../../spec/dialects/{dialect}.toml");
        println!("cargo::rerun-if-changed={spec}");
        let text = std::fs::read_to_string(&spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let code = ircc_ods::generate(&text, "crate").unwrap_or_else(|e| panic!("{spec}: {e}"));
        std::fs::write(
            std::path::Path::new(&out).join(format!("{dialect}_ops.rs")),
            code,
        )
        .unwrap_or_else(|e| panic!("writing {dialect}_ops.rs: {e}"));
    }
}
