//! The example pass through the custom driver `my-ircc`, on the README's
//! example input; the stock driver does not know the pass.

fn run(args: &[&str]) -> (i32, String, String) {
    run_with(&ircc_example_driver::driver().unwrap(), args)
}

fn run_with(driver: &ircc::Driver, args: &[&str]) -> (i32, String, String) {
    // The README's example input.
    let file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/double_neg.ir");
    let mut argv = vec!["my-ircc".to_string(), file.display().to_string()];
    argv.extend(args.iter().map(|s| s.to_string()));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = driver.run_cli(argv, &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[test]
fn plugin_pass_runs_through_the_custom_driver() {
    let (code, out, err) = run(&["--passes", "example.fold-double-neg,canonicalize"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("graph.neg"), "{out}");
    assert!(out.contains("graph.relu %x"), "{out}");
}

#[test]
fn stock_ircc_does_not_know_the_plugin_pass() {
    let (code, _, err) = run(&["--passes", "example.fold-double-neg"]);
    assert_eq!(code, 0, "the custom driver knows it: {err}");
    let (code, _, err) = run_with(
        &ircc::Driver::new().unwrap(),
        &["--passes", "example.fold-double-neg"],
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("unknown pass 'example.fold-double-neg'"),
        "{err}"
    );
}
