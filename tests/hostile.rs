//! Hostile and careless input (`tests/hostile/*.ir`, one file per class,
//! with the data files some of them name): each
//! case gives a clear error and a non-zero exit, or the correct result,
//! and writes nothing outside the folders it names. A case's first lines
//! say how to run it and what to expect:
//!
//! - `// RUN: ARGS` — the command line; `FILE` is the case, `OUT` a fresh
//!   output directory, `DATA` `tests/data` (the file comes first unless
//!   the line starts with a subcommand);
//! - `// EXPECT: TEXT` — exit 1 with `TEXT` on stderr;
//! - `// EXPECT-OK: TEXT` — exit 0 with `TEXT` on stdout;
//! - `// EXPECT-FILES: PATHS` — exit 0, and exactly these files under OUT.

mod common;

use common::{files_under, ircc, root, scratch_dir};

/// The header lines of a case (lines may end in `\n`, `\r\n` or `\r`).
fn header(source: &str, key: &str) -> Option<String> {
    source
        .split(['\n', '\r'])
        .filter_map(|l| l.strip_prefix("// "))
        .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
}

#[test]
fn hostile_corpus() {
    let (mut passed, mut failed) = (0, 0);
    let mut cases: Vec<_> = std::fs::read_dir(root().join("tests/hostile"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ir"))
        .collect();
    cases.sort();
    for case in cases {
        let source = std::fs::read_to_string(&case).unwrap();
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let scratch = scratch_dir("hostile");
        // OUT sits two levels down, so a `../..` escape would land in the
        // scratch directory, where it is seen.
        let out = scratch.join("a/out");
        let run = header(&source, "RUN:").unwrap_or_else(|| panic!("{name}: no RUN line"));
        let file = case.to_string_lossy().into_owned();
        let mut args: Vec<String> = run
            .split_whitespace()
            .map(|a| {
                a.replace("FILE", &file)
                    .replace("OUT", &out.to_string_lossy())
                    .replace("DATA", &root().join("tests/data").to_string_lossy())
            })
            .collect();
        if args.first().is_some_and(|a| a.starts_with('-')) {
            args.insert(0, file.clone());
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = ircc(&argv);
        let mut problems = Vec::new();
        if let Some(want) = header(&source, "EXPECT:")
            && (r.code != 1 || !r.stderr.contains(&want))
        {
            problems.push(format!(
                "wanted exit 1 and '{want}', got exit {}: {}",
                r.code, r.stderr
            ));
        }
        if let Some(want) = header(&source, "EXPECT-OK:")
            && (r.code != 0 || !r.stdout.contains(&want))
        {
            problems.push(format!(
                "wanted exit 0 and '{want}', got exit {}: {}{}",
                r.code, r.stdout, r.stderr
            ));
        }
        if let Some(want) = header(&source, "EXPECT-FILES:") {
            let mut want: Vec<String> = want
                .split_whitespace()
                .map(|p| p.replace("OUT", "a/out"))
                .collect();
            want.sort();
            let got = files_under(&scratch);
            if r.code != 0 || got != want {
                problems.push(format!(
                    "wanted exit 0 and files {want:?}, got exit {} and {got:?}: {}",
                    r.code, r.stderr
                ));
            }
        }
        if header(&source, "EXPECT-FILES:").is_none() {
            let written = files_under(&scratch);
            if !written.is_empty() {
                problems.push(format!("wrote {written:?}, though it names no output"));
            }
        }
        if problems.is_empty() {
            passed += 1;
        } else {
            failed += 1;
            eprintln!("{name}: {}", problems.join("; "));
        }
    }
    eprintln!("{passed} passed, {failed} failed, 0 skipped");
    assert_eq!(failed, 0);
}

/// A writer whose every write fails, as stdout redirected to /dev/full.
struct Full;

impl std::io::Write for Full {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::Error::other("no space left on device"))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_failed_write_to_stdout_is_an_error() {
    let driver = ircc::Driver::new().unwrap();
    let mlp = root().join("examples/mlp.ir");
    let mut err = Vec::new();
    let code = driver.run_cli(["ircc", mlp.to_str().unwrap()], &mut Full, &mut err);
    assert_eq!(code, 1);
    assert!(String::from_utf8_lossy(&err).contains("cannot write the output"));
}

#[test]
fn import_refuses_to_write_the_ir_over_its_weights() {
    let model = common::find_model("bert_l2_w64").expect("a small shared model");
    let dir = scratch_dir("import-o");
    for target in ["out.safetensors", "sub/"] {
        let o = dir.join(target);
        let r = ircc(&[
            "import",
            model.to_str().unwrap(),
            "-o",
            &o.to_string_lossy(),
        ]);
        assert_eq!(r.code, 1, "{target}: {}", r.stdout);
        assert!(r.stderr.contains("must name the IR file"), "{}", r.stderr);
    }
    let left = files_under(&dir);
    assert!(left.is_empty(), "files left behind: {left:?}");
}
