//! Filetests: every `tests/ir/**/*.ir` names its command line on its first
//! line (`// RUN: --pipeline canonicalize`); the test runs ircc on the file
//! and snapshots exit code, stdout and stderr. Adding a case is adding a
//! file; `cargo insta review` accepts new or changed output.

use ircc_tests::{ircc, relative, run_args};

#[test]
fn ir_filetests() {
    // The driver resolves relative paths against the working directory.
    std::env::set_current_dir(ircc_tests::root()).unwrap();
    insta::glob!("ir/**/*.ir", |path| {
        let source = std::fs::read_to_string(path).unwrap();
        let file = relative(path);
        let args = run_args(&source)
            .unwrap_or_else(|| panic!("{file}: the first line must be `// RUN: ARGS`"));
        let mut argv = vec![file.as_str()];
        argv.extend(args.iter().map(String::as_str));
        let out = ircc(&argv);
        insta::assert_snapshot!(format!(
            "exit: {}\n--- stdout\n{}--- stderr\n{}",
            out.code, out.stdout, out.stderr
        ));
    });
}
