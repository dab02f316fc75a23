//! Interoperability with MLIR: for every example and snapshot input that
//! ircc accepts, `ircc --emit generic` output passes
//! `mlir-opt-22 --allow-unregistered-dialect --verify-roundtrip`, and
//! mlir-opt's own generic print reads back into ircc and survives a second
//! trip through mlir-opt unchanged.
//!
//! Needs `mlir-opt-22` on PATH (Debian's mlir-22-tools, installed by
//! `.ci/run`). Without it the test says so and fails if IRCC_REQUIRE_MLIR
//! is set, as it is in CI.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{ir_files, ircc, relative, run_args, scratch_dir};

fn mlir_opt(args: &[&str], input: &str) -> Result<String, String> {
    let mut child = Command::new("mlir-opt-22")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn generic_form_is_accepted_by_mlir_opt() {
    if Command::new("mlir-opt-22")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("IRCC_REQUIRE_MLIR").is_none(),
            "mlir-opt-22 is required but not on PATH"
        );
        eprintln!(
            "0 passed, 0 failed, 1 skipped: mlir-opt-22 is not on PATH (install mlir-22-tools)"
        );
        return;
    }
    std::env::set_current_dir(common::root()).unwrap();
    let dir = scratch_dir("mlir");
    let mut files = ir_files("examples");
    files.extend(ir_files("tests/ir"));
    let (mut passed, mut failed, mut not_applicable) = (0, 0, 0);
    for path in files {
        let file = relative(&path);
        let source = std::fs::read_to_string(&path).unwrap();
        // Only what ircc accepts as written; error cases are not modules.
        let mut argv = vec![file.as_str()];
        let extra = run_args(&source).unwrap_or_default();
        if extra.iter().any(|a| a == "--allow-unregistered-dialect") {
            argv.push("--allow-unregistered-dialect");
        }
        argv.extend(["--emit", "generic"]);
        let out = ircc(&argv);
        if out.code != 0 {
            not_applicable += 1;
            continue;
        }
        let check = || -> Result<(), String> {
            mlir_opt(
                &["--allow-unregistered-dialect", "--verify-roundtrip"],
                &out.stdout,
            )?;
            let theirs = mlir_opt(
                &["--allow-unregistered-dialect", "--mlir-print-op-generic"],
                &out.stdout,
            )?;
            let reread_path = dir.join("reread.ir");
            std::fs::write(&reread_path, &theirs).unwrap();
            let back = ircc(&[
                reread_path.to_str().unwrap(),
                "--allow-unregistered-dialect",
                "--emit",
                "generic",
            ]);
            if back.code != 0 {
                return Err(format!(
                    "ircc cannot read mlir-opt's output:\n{}",
                    back.stderr
                ));
            }
            let again = mlir_opt(
                &["--allow-unregistered-dialect", "--mlir-print-op-generic"],
                &back.stdout,
            )?;
            if again != theirs {
                return Err(format!(
                    "not a fixed point through ircc:\n{theirs}\nvs\n{again}"
                ));
            }
            Ok(())
        };
        match check() {
            Ok(()) => passed += 1,
            Err(e) => {
                failed += 1;
                eprintln!("{file}: {e}");
            }
        }
    }
    eprintln!(
        "{passed} passed, {failed} failed, 0 skipped ({not_applicable} error-case inputs are not modules)"
    );
    assert_eq!(failed, 0);
    assert!(passed >= 25, "only {passed} files checked");
}
