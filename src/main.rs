use std::process::ExitCode;

fn main() -> ExitCode {
    match ircc::Driver::new() {
        Ok(driver) => driver.main(),
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}
