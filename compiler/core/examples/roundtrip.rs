fn main() {
    let path = std::env::args().nth(1).unwrap();
    let generic = std::env::args().nth(2).is_some();
    let src = std::fs::read_to_string(&path).unwrap();
    match ircc_core::parse_module(&src, Some(&path)) {
        Ok(m) => print!(
            "{}",
            ircc_core::print_module(
                &m,
                if generic {
                    ircc_core::Form::Generic
                } else {
                    ircc_core::Form::Pretty
                }
            )
        ),
        Err(e) => eprint!("{}", e.render(Some(&src))),
    }
}
