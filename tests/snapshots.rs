//! Filetests: every `tests/ir/**/*.ir` names its command lines on its first
//! lines (`// RUN: --pipeline canonicalize`); the test runs ircc on the
//! file once per line and snapshots exit code, stdout and stderr of each.
//! Adding a case is adding a file; `cargo insta review` accepts new or
//! changed output.

mod common;

use common::{ircc, relative, run_lines};

#[test]
fn ir_filetests() {
    // The driver resolves relative paths against the working directory.
    std::env::set_current_dir(common::root()).unwrap();
    insta::glob!("ir/**/*.ir", |path| {
        let source = std::fs::read_to_string(path).unwrap();
        let file = relative(path);
        let runs = run_lines(&source);
        assert!(
            !runs.is_empty(),
            "{file}: the first line must be `// RUN: ARGS`"
        );
        let mut snapshot = String::new();
        for args in &runs {
            let mut argv = vec![file.as_str()];
            argv.extend(args.iter().map(String::as_str));
            let out = ircc(&argv);
            if runs.len() > 1 {
                snapshot.push_str(&format!("=== RUN: {}\n", args.join(" ")));
            }
            snapshot.push_str(&format!(
                "exit: {}\n--- stdout\n{}--- stderr\n{}",
                out.code, out.stdout, out.stderr
            ));
        }
        insta::assert_snapshot!(snapshot);
    });
}
