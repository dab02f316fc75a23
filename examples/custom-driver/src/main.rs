//! `my-ircc`: ircc with the example plugin's pass linked in, e.g.
//! `cargo run -p ircc-example-driver -- FILE --passes example.fold-double-neg,canonicalize`.

use std::process::ExitCode;

fn main() -> ExitCode {
    match ircc_example_driver::driver() {
        Ok(d) => d.main(),
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}
