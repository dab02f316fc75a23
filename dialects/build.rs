//! Generates the typed ops of each dialect from its spec (see `ircc-ods`).

fn main() {
    ircc_ods::build_dialects(
        "../spec/dialects",
        &["graph", "kernel", "texture"],
        "ircc_core",
    );
}
