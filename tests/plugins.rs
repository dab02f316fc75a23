//! Passes from outside ircc: the example plugin built as a library and
//! loaded by the stock `ircc` (`--load-pass-plugin`), a library stamped for
//! another ircc refused, and `--list-passes` naming where each pass came
//! from.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The plugin libraries, built once by cargo as a user builds theirs
/// (into a target directory of their own: this test's cargo holds the
/// workspace's).
fn plugins() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugins");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(common::root())
            .args([
                "build",
                "--offline",
                "--quiet",
                "-p",
                "ircc-example-plugin",
                "-p",
                "ircc-test-stale-plugin",
                "--lib",
                "--target-dir",
            ])
            .arg(&target)
            .status()
            .expect("cargo runs");
        assert!(status.success(), "the plugins build");
        let lib = |name: &str| {
            target.join("debug").join(format!(
                "{}{name}{}",
                std::env::consts::DLL_PREFIX,
                std::env::consts::DLL_SUFFIX
            ))
        };
        (lib("ircc_example_plugin"), lib("ircc_test_stale_plugin"))
    })
}

/// Runs the `ircc` binary, as a user does.
fn ircc(args: &[&str]) -> common::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_ircc"))
        .args(args)
        .output()
        .expect("ircc runs");
    common::Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The README's example input.
fn input() -> PathBuf {
    common::root().join("examples/double_neg.ir")
}

#[test]
fn a_plugin_library_adds_its_pass_to_the_stock_ircc() {
    let (plugin, _) = plugins();
    let file = input();
    let out = ircc(&[
        file.to_str().unwrap(),
        "--load-pass-plugin",
        plugin.to_str().unwrap(),
        "--passes",
        "example.fold-double-neg,canonicalize",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    insta::assert_snapshot!(out.stdout);

    // Without the plugin the pass is unknown.
    let out = ircc(&[
        file.to_str().unwrap(),
        "--passes",
        "example.fold-double-neg",
    ]);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr
            .contains("unknown pass 'example.fold-double-neg'"),
        "{}",
        out.stderr
    );
}

#[test]
fn list_passes_names_where_each_pass_came_from() {
    let (plugin, _) = plugins();
    let out = ircc(&[
        "--list-passes",
        "--load-pass-plugin",
        plugin.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let line = |name: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} is listed:\n{}", out.stdout))
            .to_string()
    };
    assert!(line("canonicalize").ends_with("[built in]"));
    assert!(
        line("example.fold-double-neg").ends_with(&format!("[plugin {}]", plugin.display())),
        "{}",
        out.stdout
    );
}

#[test]
fn a_plugin_stamped_for_another_ircc_is_refused_naming_both() {
    let (_, stale) = plugins();
    let file = input();
    let out = ircc(&[
        file.to_str().unwrap(),
        "--load-pass-plugin",
        stale.to_str().unwrap(),
        "--passes",
        "canonicalize",
    ]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    let ours = format!("ircc {}; rustc ", env!("CARGO_PKG_VERSION"));
    assert!(
        out.stderr
            .contains("it was built for ircc 0.0.1; rustc 1.70.0 (90c541806 2023-05-31)")
            && out.stderr.contains(&format!("but this is {ours}")),
        "{}",
        out.stderr
    );
}

#[test]
fn a_library_that_is_not_a_plugin_is_refused() {
    let file = input();
    let dir = common::scratch_dir("plugins");
    let not_a_library = dir.join("not_a_library.so");
    std::fs::write(&not_a_library, "not ELF").unwrap();
    let out = ircc(&[
        file.to_str().unwrap(),
        "--load-pass-plugin",
        not_a_library.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("cannot load it"), "{}", out.stderr);
    // A folder (or a FIFO, which would block the loader) is not opened.
    let out = ircc(&[
        file.to_str().unwrap(),
        "--load-pass-plugin",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("not a regular file"), "{}", out.stderr);
}

/// A plugin named without a slash is the file of that name in the
/// current folder, as ircc checked it, not a library of that name on the
/// system's library path.
#[test]
fn a_plugin_named_without_a_slash_is_the_file_in_the_current_folder() {
    let file = input();
    let dir = common::scratch_dir("plugins-bare");
    let run = |name: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_ircc"))
            .current_dir(&*dir)
            .args([file.to_str().unwrap(), "--load-pass-plugin", name])
            .output()
            .expect("ircc runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Every glibc system has a libc.so.6 on its library path: this one is
    // not a library at all.
    std::fs::write(dir.join("libc.so.6"), "not ELF").unwrap();
    let (code, stderr) = run("libc.so.6");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot load it") && !stderr.contains("not an ircc plugin"),
        "{stderr}"
    );
    // The example plugin, copied in and named bare, loads and runs.
    std::fs::copy(&plugins().0, dir.join("libmine.so")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ircc"))
        .current_dir(&*dir)
        .args([
            file.to_str().unwrap(),
            "--load-pass-plugin",
            "libmine.so",
            "--list-passes",
        ])
        .output()
        .expect("ircc runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("plugin libmine.so"), "{stdout}");
}
