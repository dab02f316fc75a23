//! Generates the typed ops of the dialects the textual format itself knows
//! (`func`, and `index` for the pretty form of `index.view`) from their
//! specs; see `ircc-ods`.

fn main() {
    ircc_ods::build_dialects("../../spec/dialects", &["func", "index"], "crate");
}
