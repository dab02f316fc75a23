//! `my-ircc`: ircc plus the example pass, e.g.
//! `cargo run -p ircc-example-plugin -- FILE --passes example.fold-double-neg,canonicalize`.

use std::process::ExitCode;

fn main() -> ExitCode {
    match ircc_example_plugin::driver() {
        Ok(d) => d.main(),
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}
