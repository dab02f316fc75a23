//! Driver options whose output is not byte-stable (timings) or that write
//! files, and verification after a broken pass.

mod common;

use common::{ircc, root, scratch_dir};
use ircc_core::Module;
use ircc_core::diag::Diagnostics;
use ircc_core::pass::{Pass, PassContext};

fn example() -> String {
    root()
        .join("tests/ir/canonicalize/cse.ir")
        .display()
        .to_string()
}

#[test]
fn dump_dir_holds_the_ir_after_each_pass() {
    let dir = scratch_dir("dump");
    let d = dir.display().to_string();
    let out = ircc(&[
        &example(),
        "--passes",
        "canonicalize,canonicalize",
        "--dump-dir",
        &d,
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let first = std::fs::read_to_string(dir.join("01-canonicalize.ir")).unwrap();
    let second = std::fs::read_to_string(dir.join("02-canonicalize.ir")).unwrap();
    assert_eq!(first, second);
    assert_eq!(first, out.stdout);
}

/// Progress bars are drawn only on a terminal: run as a program whose
/// stderr is a pipe, `ircc check` and `ircc bench` print their reports and
/// nothing else, and `--quiet` changes nothing of them.
#[test]
fn progress_stays_off_pipes() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ircc"))
            .args(args)
            .output()
            .unwrap();
        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        (out.status.code(), text(out.stdout), text(out.stderr))
    };
    let example = example();
    let scratch = common::scratch_dir("progress-pipes");
    let out_dir = scratch.join("out");
    let (bert, bert_input) = bert();
    let mut commands = vec![
        (
            vec!["check", &example, "--pipeline", "smartmem"],
            "passes checked",
        ),
        (
            vec![
                "run",
                &bert,
                "--input",
                &bert_input,
                "--output-dir",
                out_dir.to_str().unwrap(),
            ],
            "wrote",
        ),
    ];
    if common::gpu_available() {
        commands.push((
            vec!["bench", &example, "--runs", "2", "--warmup", "1"],
            "median",
        ));
    } else {
        eprintln!("bench: 0 passed, 0 failed, 1 skipped (no GPU adapter)");
    }
    for (args, report) in commands {
        let loud = run(&args);
        let quiet = run(&[args.as_slice(), &["--quiet"]].concat());
        for (code, stdout, stderr) in [&loud, &quiet] {
            assert_eq!(*code, Some(0), "{args:?}: {stderr}");
            assert!(stdout.contains(report), "{args:?}: {stdout}");
            assert!(stderr.is_empty(), "{args:?}: {stderr:?}");
        }
        if args[0] == "check" {
            assert_eq!(loud.1, quiet.1);
        }
    }
}

/// The small BERT and its input: an import and an interpreter run.
fn bert() -> (String, String) {
    let path = |f: &str| common::root().join(f).to_str().unwrap().to_string();
    (
        path("tests/models/bert_l2_w64.onnx"),
        path("tests/models/bert_l2_w64.input.npy"),
    )
}

/// On a terminal (a pseudo-terminal made by util-linux's `script`), `ircc
/// run` on an ONNX model draws a bar for the import and one for the
/// interpreter, and `--quiet` draws neither.
#[test]
fn progress_is_drawn_on_a_terminal() {
    let scratch = common::scratch_dir("progress-terminal");
    let (bert, input) = bert();
    let command = |extra: &str| {
        format!(
            "{} run {bert} --input {input} --output-dir {} {extra}",
            env!("CARGO_BIN_EXE_ircc"),
            scratch.join("out").display()
        )
    };
    let on_terminal = |extra: &str| {
        std::process::Command::new("script")
            .args(["-qec", &command(extra), "/dev/null"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let Ok(loud) = on_terminal("") else {
        eprintln!("progress on a terminal: 0 passed, 0 failed, 1 skipped (no `script` here)");
        return;
    };
    assert!(
        loud.contains("importing") && loud.contains("initializers and nodes"),
        "{loud}"
    );
    assert!(
        loud.contains("interpreting") && loud.contains("/116 ops"),
        "{loud}"
    );
    let quiet = on_terminal("--quiet").unwrap();
    assert!(quiet.contains("wrote"), "{quiet}");
    assert!(
        !quiet.contains("importing") && !quiet.contains("interpreting"),
        "{quiet}"
    );
}

#[test]
fn timing_reports_every_pass() {
    let out = ircc(&[
        &example(),
        "--passes",
        "canonicalize,canonicalize",
        "--timing",
    ]);
    assert_eq!(out.code, 0);
    assert!(
        out.stderr.contains("Execution time report"),
        "{}",
        out.stderr
    );
    assert_eq!(
        out.stderr.matches("% canonicalize").count()
            + out.stderr.matches("%  canonicalize").count(),
        2,
        "{}",
        out.stderr
    );
}

/// `--timing` covers the whole command: reading the model, each pass, and
/// for a device the code generation, GPU setup and runs.
#[test]
fn timing_has_a_row_for_each_step_of_the_command() {
    let emit = ircc(&[
        &example(),
        "--pipeline",
        "smartmem-gpu",
        "--emit",
        "wgsl",
        "--timing",
    ]);
    assert_eq!(emit.code, 0, "{}", emit.stderr);
    for row in [
        "parse",
        ircc_passes::decl::KernelLowerOptions::NAME,
        ircc_passes::decl::KernelAceOptions::NAME,
        "code generation (WGSL, plan)",
    ] {
        assert!(
            emit.stderr.contains(&format!("  {row}\n")),
            "{row}: {}",
            emit.stderr
        );
    }
    if !common::gpu_available() {
        return;
    }
    let mlp = common::root().join("examples/mlp.ir");
    let x = common::root().join("tests/data/mlp_x.npy");
    let dir = common::scratch_dir("timing_run");
    let run = ircc(&[
        "run",
        mlp.to_str().unwrap(),
        "--backend",
        "wgpu",
        "--input",
        &format!("x={}", x.display()),
        "--output-dir",
        dir.to_str().unwrap(),
        "--timing",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    for row in ["parse", "GPU setup", "GPU run"] {
        assert!(run.stderr.contains(row), "{row}: {}", run.stderr);
    }
}

#[test]
fn output_file_and_listings() {
    let dir = scratch_dir("outfile");
    let file = dir.join("out.ir").display().to_string();
    let out = ircc(&[&example(), "--emit", "generic", "-o", &file]);
    assert_eq!(out.code, 0);
    assert!(out.stdout.is_empty());
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .starts_with("\"builtin.module\"() ({")
    );

    let ops = ircc(&["--list-ops"]);
    assert_eq!(ops.code, 0);
    let registry = ircc_dialects::registry().unwrap();
    for name in registry.ops.keys() {
        assert!(
            ops.stdout
                .lines()
                .any(|l| l.starts_with(&format!("{name} "))),
            "{name} not listed"
        );
    }
    assert!(
        ops.stdout
            .contains("graph.conv                 many-to-many  ILD-Variable"),
        "{}",
        ops.stdout
    );
    let passes = ircc(&["--list-passes"]);
    assert!(
        passes.stdout.starts_with("canonicalize "),
        "{}",
        passes.stdout
    );
    let devices = ircc(&["--list-devices"]);
    assert_eq!(devices.code, 0);
    for (name, _) in ircc_dialects::kernel::PROFILES {
        assert!(
            devices.stdout.lines().any(|l| l.starts_with(name)),
            "{name} not listed: {}",
            devices.stdout
        );
    }

    let usage = ircc(&[]);
    assert_eq!(usage.code, 2);
    let missing = ircc(&["/nonexistent/file.ir"]);
    assert_eq!(missing.code, 1);
    assert!(
        missing
            .stderr
            .starts_with("error: cannot read /nonexistent/file.ir"),
        "{}",
        missing.stderr
    );
}

/// Changes every relu's result type, which the verifier must catch.
struct BreakTypes;

impl Pass for BreakTypes {
    fn name(&self) -> &str {
        "test.break-types"
    }
    fn run(&mut self, module: &mut Module, _: &PassContext) -> Result<(), Diagnostics> {
        let mut relus = Vec::new();
        module.walk(|op| relus.push(op));
        for op in relus {
            if module.op(op).name == "graph.relu" {
                let r = module.op(op).results[0];
                module.values[r].ty = ircc_core::Type::tensor(vec![1], ircc_core::ElemType::F32);
            }
        }
        Ok(())
    }
}

#[test]
fn verification_after_a_pass_names_the_pass() {
    let mut driver = ircc::Driver::new().unwrap();
    driver
        .passes_mut()
        .register("test.break-types", "breaks types", |_| {
            Ok(Box::new(BreakTypes))
        });
    let run = |extra: &[&str]| {
        let mut args = vec!["ircc".to_string(), example()];
        args.extend(extra.iter().map(|s| s.to_string()));
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = driver.run_cli(args, &mut out, &mut err);
        (code, String::from_utf8(err).unwrap())
    };
    let (code, err) = run(&["--passes", "canonicalize,test.break-types"]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("error: verification failed after pass 'test.break-types'"),
        "{err}"
    );
    assert!(
        err.contains("cse.ir:4:8: error: 'graph.relu': result #0 is declared as tensor<1xf32>"),
        "{err}"
    );
    // Without verification the broken module goes through.
    let (code, _) = run(&["--passes", "test.break-types", "--no-verify-each"]);
    assert_eq!(code, 0);
}

/// Turns every gelu into a relu: valid IR, wrong results.
struct WrongResults;

impl Pass for WrongResults {
    fn name(&self) -> &str {
        "test.wrong-results"
    }
    fn run(&mut self, module: &mut Module, _: &PassContext) -> Result<(), Diagnostics> {
        let mut ops = Vec::new();
        module.walk(|op| ops.push(op));
        for op in ops {
            if module.op(op).name == "graph.gelu" {
                module.op_mut(op).name = "graph.relu".into();
                module.op_mut(op).attrs.clear();
            }
        }
        Ok(())
    }
}

#[test]
fn check_names_the_pass_that_changes_results() {
    let mut driver = ircc::Driver::new().unwrap();
    driver
        .passes_mut()
        .register("test.wrong-results", "breaks results", |_| {
            Ok(Box::new(WrongResults))
        });
    let model = root().join("examples/mlp.ir").display().to_string();
    let run = |pipeline: &str| {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = driver.run_cli(
            ["ircc", "check", model.as_str(), "--passes", pipeline],
            &mut out,
            &mut err,
        );
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    };
    let (code, out, err) = run("canonicalize,graph.eliminate-layout-ops,index.simplify,graph.fuse");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("4 passes checked"), "{out}");
    let (code, out, err) = run("canonicalize,test.wrong-results,graph.fuse");
    assert_eq!(code, 1, "{out}");
    assert!(
        err.contains("pass 'test.wrong-results' changed the results"),
        "{err}"
    );
    assert!(
        !out.contains("graph.fuse"),
        "checking stops at the first bad pass: {out}"
    );
}

/// Options that would do nothing are errors that say why, and a misspelt
/// command gets a suggestion instead of being read as a file name.
#[test]
fn options_that_would_do_nothing_are_refused() {
    // `args` exit with `code` and a message holding every one of `says`.
    let refused = |args: &[&str], code: i32, says: &[&str]| {
        let out = ircc(args);
        assert_eq!(out.code, code, "{args:?}: {}", out.stderr);
        for s in says {
            assert!(out.stderr.contains(s), "{args:?}: {}", out.stderr);
        }
    };
    let example = example();
    refused(
        &[
            &example,
            "--pipeline",
            "canonicalize",
            "--print-ir-after",
            "canonicalise",
        ],
        1,
        &["--print-ir-after canonicalise: the pipeline runs no such pass (it runs: canonicalize)"],
    );
    refused(
        &[&example, "--input-shape", "x=1x2"],
        1,
        &["--input-shape fixes an ONNX model's symbolic dimensions"],
    );
    let bert = common::root().join("tests/models/bert_l2_w64.onnx");
    refused(
        &[bert.to_str().unwrap(), "--input-shape", "nosuch=1x2"],
        1,
        &["--input-shape names 'nosuch', which is not an input of the model (inputs: input)"],
    );
    // Textures are chosen by the pipeline's layout passes; the flag is gone.
    refused(
        &[&example, "--textures"],
        2,
        &["unexpected argument '--textures'"],
    );
    refused(
        &["rn", &example],
        2,
        &["unknown command 'rn'; did you mean 'run'?"],
    );
    let dir = scratch_dir("precision");
    refused(
        &[
            "run",
            &example,
            "--precision",
            "f16",
            "--output-dir",
            dir.to_str().unwrap(),
        ],
        1,
        &["--precision f16 sets the precision of GPU kernels"],
    );
    // Printing runs the pipeline as written, lowering or not: a kernel
    // option beside it is refused rather than ignored.
    for (pipeline, flag, value) in [
        ("smartmem", "--precision", "f16"),
        ("smartmem-gpu", "--attention", "rows"),
    ] {
        refused(
            &[&example, "--pipeline", pipeline, flag, value],
            1,
            &[
                &format!("{flag} {value} is an option of the kernels a GPU backend runs"),
                &format!("kernel.schedule{{{}={value}}}", &flag[2..]),
            ],
        );
    }
    // bench times a device: the interpreter is not among its backends.
    refused(
        &["bench", &example, "--backend", "reference"],
        2,
        &["invalid value 'reference'", "wgpu, opencl"],
    );
    // kernel.lower, in the pipeline --emit wgsl names, can be printed after.
    let lower = ircc_passes::decl::KernelLowerOptions::NAME;
    let out = ircc(&[
        &example,
        "--pipeline",
        "smartmem-gpu",
        "--emit",
        "wgsl",
        "--print-ir-after",
        lower,
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let header = format!("// -----// IR Dump After {lower} //----- //");
    assert!(out.stderr.starts_with(&header), "{}", out.stderr);
    let func = ircc_dialects::kernel::KernelOp::Func.name();
    assert!(out.stderr.contains(func), "{}", out.stderr);
    // A command spelt right keeps clap's own message.
    refused(&["run", &example], 2, &["--output-dir"]);
    // A path named like a command is still read as a file.
    let dir = scratch_dir("command-like");
    let file = dir.join("rn");
    std::fs::copy(&example, &file).unwrap();
    let out = ircc(&[file.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

/// `ircc simulate-attention`: a Table 1 workload by any of its names or
/// as H,S,E, one schedule as text or JSON, Table 2 beside the paper's,
/// and clear errors for what it does not know.
#[test]
fn simulate_attention_runs_the_edge_simulator() {
    let mas = ircc(&[
        "simulate-attention",
        "--workload",
        "bert-base",
        "--schedule",
        "mas",
    ]);
    assert_eq!(mas.code, 0, "{}", mas.stderr);
    assert!(
        mas.stdout.starts_with("BERT-Base & T5-Base under mas: "),
        "{}",
        mas.stdout
    );
    let cycles = |args: &[&str]| -> u64 {
        let mut all = vec!["simulate-attention", "--json"];
        all.extend_from_slice(args);
        let out = ircc(&all);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        report["cycles"].as_u64().unwrap()
    };
    // BERT-Base is 12 heads over 512 tokens of width 768.
    let by_name = cycles(&["--workload", "BERT-Base", "--schedule", "flat"]);
    assert_eq!(
        by_name,
        cycles(&["--workload", "12,512,768", "--schedule", "flat"])
    );
    assert!(by_name > cycles(&["--workload", "12,512,768", "--schedule", "mas"]));
    let table = ircc(&["simulate-attention", "--table2"]);
    assert_eq!(table.code, 0, "{}", table.stderr);
    assert_eq!(table.stdout.lines().count(), 2 + 12 + 1, "{}", table.stdout);
    assert!(table.stdout.contains("Geometric mean"), "{}", table.stdout);
    for (args, says) in [
        (&["--workload", "GPT-9"][..], "no workload 'GPT-9'"),
        (&["--workload", "12,0,768"][..], "simulate-attention: "),
        (
            &["--workload", "ViT-B/16", "--schedule", "fast"][..],
            "simulate-attention: ",
        ),
        (
            &["--workload", "ViT-B/16", "--search", "annealing"][..],
            "no search 'annealing'",
        ),
    ] {
        let mut all = vec!["simulate-attention"];
        all.extend_from_slice(args);
        let out = ircc(&all);
        assert_eq!(out.code, 1, "{args:?}: {}", out.stdout);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
}

/// `--describe-op` prints an op's declaration from its spec; a misspelt
/// name gets the closest one.
#[test]
fn describe_op_prints_the_declaration() {
    let attention = ircc_dialects::graph::GraphOp::Attention.name();
    let out = ircc(&["--describe-op", attention]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let heading = format!("{attention}: scaled dot-product attention");
    for want in [
        heading.as_str(),
        "operands:   q, k, v, mask (optional)",
        "results:    y",
        "scale ",
        "float, optional -- the scores' factor",
        "causal ",
        "int, default 0 -- 1: query i sees",
        "DNNFusion mapping type: many-to-many",
        "SmartMem layout class:  ILD-Variable",
        "reduces:",
    ] {
        assert!(out.stdout.contains(want), "{want}: {}", out.stdout);
    }
    let func = ircc_dialects::kernel::KernelOp::Func.name();
    let kernel = ircc(&["--describe-op", func]);
    assert!(
        kernel.stdout.contains(
            "enum of elementwise|elementwise_texels|matmul_tiled|row_reduction|attention_rows|attention_tiled"
        ),
        "{}",
        kernel.stdout
    );
    let misspelt = attention.replacen("tt", "t", 1);
    let typo = ircc(&["--describe-op", &misspelt]);
    assert_eq!(typo.code, 1, "{}", typo.stdout);
    let suggestion = format!("did you mean '{attention}'");
    assert!(typo.stderr.contains(&suggestion), "{}", typo.stderr);
}

/// IR that names no weights file cannot run its params; the error says how
/// to get IR that can.
#[test]
fn missing_weights_say_how_to_get_them() {
    let dir = scratch_dir("weights");
    let ir = dir.join("m.ir");
    std::fs::write(
        &ir,
        "func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n  %w = graph.param {name = \"w\"} : () -> tensor<2xf32>\n  %y = graph.add %x, %w : tensor<2xf32>, tensor<2xf32> -> tensor<2xf32>\n  func.return %y : tensor<2xf32>\n}\n",
    )
    .unwrap();
    let x = dir.join("x.npy");
    let t = ircc_core::Tensor::float(
        ircc_core::ElemType::F32,
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[2]), vec![1.0, 2.0]).unwrap(),
    );
    ircc_reference::write_npy(&x, &t).unwrap();
    let out = dir.join("out");
    let r = common::run(&ir, &x, &out, &[]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        r.stderr.contains("weight 'w' is not available"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("ircc import MODEL.onnx -o FILE.ir"),
        "{}",
        r.stderr
    );
}

/// `--version` names the git revision the binary was built from.
#[test]
fn version_names_the_git_revision() {
    let out = ircc(&["--version"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let line = out.stdout.trim();
    assert!(
        line.starts_with(&format!("ircc {} (git ", env!("CARGO_PKG_VERSION"))),
        "{line}"
    );
    let revision = line
        .trim_end_matches(')')
        .rsplit(' ')
        .next()
        .unwrap()
        .trim_end_matches("-modified");
    // A checkout gives a hexadecimal revision; a tarball says so.
    assert!(
        revision == "unknown"
            || (revision.len() == 12 && revision.chars().all(|c| c.is_ascii_hexdigit())),
        "{line}"
    );
}

/// `ircc completions SHELL` prints a completion script naming the
/// subcommands and options; an unknown shell lists those it knows.
#[test]
fn completions_are_printed_for_each_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = ircc(&["completions", shell]);
        assert_eq!(out.code, 0, "{shell}: {}", out.stderr);
        for word in ["simulate-attention", "bench", "describe-op", "pipeline"] {
            assert!(out.stdout.contains(word), "{shell} lacks {word}");
        }
    }
    let out = ircc(&["completions", "tcsh"]);
    assert_eq!(out.code, 2, "{}", out.stdout);
    assert!(
        out.stderr.contains("possible values: bash"),
        "{}",
        out.stderr
    );
}

/// Diagnostics are coloured only where asked: `CLICOLOR_FORCE` colours
/// them on a pipe, `NO_COLOR` wins over it, and a pipe alone gets plain
/// text (the binary itself, whose stderr is a pipe here).
#[test]
fn diagnostics_are_coloured_only_where_asked() {
    let dir = common::scratch_dir("color");
    let bad = dir.join("bad.ir");
    std::fs::write(&bad, "func.func @main( {\n").unwrap();
    let run = |env: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ircc"));
        cmd.arg(&bad)
            .env_remove("NO_COLOR")
            .env_remove("CLICOLOR_FORCE");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8(out.stderr).unwrap()
    };
    let plain = run(&[]);
    assert!(
        plain.contains(": error: ") && !plain.contains('\x1b'),
        "{plain:?}"
    );
    let forced = run(&[("CLICOLOR_FORCE", "1")]);
    assert!(forced.contains("\x1b[1;31merror:\x1b[0m"), "{forced:?}");
    assert!(forced.contains("\x1b[1;32m^\x1b[0m"), "{forced:?}");
    assert_eq!(run(&[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]), plain);
}

/// A reader that closes the output pipe early (`ircc ... | head`) ends the
/// command quietly with status 0, as ripgrep's does.
#[test]
fn a_closed_output_pipe_ends_the_command_quietly() {
    let model = root().join("tests/models/swin_t_w24_dynamo.onnx");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ircc"))
        .arg(&model)
        .args(["--pipeline", "smartmem-gpu", "--emit", "wgsl"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Closing the read end before ircc writes: its first write fails.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

/// Output that cannot be written fails the command with a message, for
/// every command that prints (a full disk, here /dev/full); a closed pipe
/// fails none (`a_closed_output_pipe_ends_the_command_quietly`).
#[test]
fn commands_fail_where_their_output_cannot_be_written() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("0 passed, 0 failed, 1 skipped (no /dev/full)");
        return;
    };
    let mlp = example();
    let commands: [&[&str]; 6] = [
        &["stats", &mlp],
        &["check", &mlp],
        &[&mlp, "--pipeline", "canonicalize"],
        &["completions", "bash"],
        &["--help"],
        &["--version"],
    ];
    for args in commands {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ircc"))
            .args(args)
            .stdout(full.try_clone().unwrap())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(
            stderr
                .matches("cannot write the output: No space left on device")
                .count(),
            1,
            "{args:?}: {stderr}"
        );
    }
}

/// A standard output closed by the shell (`>&-`) fails a command that
/// prints, as a full one does, though Rust's runtime reopens it on
/// /dev/null before `main`; a command that prints nothing succeeds.
#[cfg(target_os = "linux")]
#[test]
fn commands_fail_where_stdout_is_closed() {
    let mlp = example();
    let out_dir = scratch_dir("closed-stdout");
    let out = out_dir.join("out.ir");
    let out = out.to_str().unwrap();
    let cases: [(&[&str], i32); 4] = [
        (&["stats", &mlp], 1),
        (&["--version"], 1),
        (&[&mlp, "--pipeline", "canonicalize"], 1),
        (&[&mlp, "--pipeline", "canonicalize", "-o", out], 0),
    ];
    for (args, code) in cases {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg("exec \"$0\" \"$@\" >&-")
            .arg(env!("CARGO_BIN_EXE_ircc"))
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        let said = stderr.contains("cannot write the output: standard output is closed");
        assert_eq!(said, code == 1, "{args:?}: {stderr}");
    }
}

/// Links already in an output folder (to a file outside it, symbolic or
/// hard) are replaced by what ircc writes, never written through: a
/// bundle (`compile -o`, `--emit wgsl -o`), `run --output-dir`'s results
/// and `--dump-dir`'s files.
#[cfg(unix)]
#[test]
fn writes_replace_links_in_output_folders() {
    let mlp = root().join("examples/mlp.ir");
    let mlp = mlp.to_str().unwrap();
    let scratch = common::scratch_dir("output-links");
    let input = scratch.join("x.npy");
    let x = ircc_core::Tensor::float(
        ircc_core::ElemType::F32,
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[2, 4]), vec![0.5; 8]).unwrap(),
    );
    ircc_reference::write_npy(&input, &x).unwrap();
    let input = format!("x={}", input.display());
    let cases: [(&str, &str, Vec<&str>); 4] = [
        ("compile", "plan.json", vec!["compile", mlp, "-o"]),
        (
            "emit",
            "k1_matmul.wgsl",
            vec![mlp, "--pipeline", "smartmem-gpu", "--emit", "wgsl", "-o"],
        ),
        (
            "run",
            "probs.npy",
            vec!["run", mlp, "--input", &input, "--output-dir"],
        ),
        (
            "dump",
            "01-canonicalize.ir",
            vec![mlp, "--pipeline", "canonicalize", "--dump-dir"],
        ),
    ];
    for (case, file, args) in cases {
        for hard in [false, true] {
            let victim = scratch.join(format!("victim-{case}-{hard}"));
            std::fs::write(&victim, "keep").unwrap();
            let out = scratch.join(format!("out-{case}-{hard}"));
            std::fs::create_dir(&out).unwrap();
            if hard {
                std::fs::hard_link(&victim, out.join(file)).unwrap();
            } else {
                std::os::unix::fs::symlink(&victim, out.join(file)).unwrap();
            }
            let mut argv = args.clone();
            argv.push(out.to_str().unwrap());
            let r = common::ircc(&argv);
            assert_eq!(r.code, 0, "{case}: {}", r.stderr);
            assert_eq!(
                std::fs::read_to_string(&victim).unwrap(),
                "keep",
                "{case} hard={hard}"
            );
            let written = std::fs::symlink_metadata(out.join(file)).unwrap();
            assert!(
                written.file_type().is_file() && written.len() > 4,
                "{case} hard={hard}"
            );
        }
    }
}
