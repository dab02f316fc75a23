//! Bundles (`--emit wgsl|opencl -o DIR`, spec/plan.md): their plan.json
//! follows spec/plan.schema.json, they are written deterministically, they
//! run with `ircc run DIR` as the model does, and a damaged or hostile one
//! is refused with an error naming what is wrong.

mod common;

use std::path::{Path, PathBuf};

use common::{ircc, root, run, scratch_dir};
use serde_json::Value;

const BERT: &str = "tests/models/bert_l2_w64.onnx";
const SWIN: &str = "tests/models/swin_t_w24_dynamo.onnx";

/// Compiles `model` into the bundle `dir` with `extra` options.
fn bundle(model: &str, dir: &Path, extra: &[&str]) {
    let model = root().join(model);
    let mut args = vec![
        "compile",
        model.to_str().unwrap(),
        "--pipeline",
        "smartmem",
        "-o",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = ircc(&args);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

/// An f32 input of `shape` holding `values`, written as `scratch/x.npy`.
fn f32_input(scratch: &Path, values: Vec<f64>, shape: &[usize]) -> PathBuf {
    let x = ircc_core::Tensor::float(
        ircc_core::ElemType::F32,
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(shape), values).unwrap(),
    );
    let input = scratch.join("x.npy");
    ircc_reference::write_npy(&input, &x).unwrap();
    input
}

fn plan(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("plan.json")).unwrap()).unwrap()
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

#[test]
fn plans_follow_the_checked_in_schema() {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("spec/plan.schema.json")).unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema is a valid schema");
    let scratch = scratch_dir("bundle-schema");
    let cases: [(&str, &[&str]); 4] = [
        (BERT, &[]),
        (SWIN, &[]),
        (SWIN, &["--precision", "f16"]),
        (SWIN, &["--backend", "opencl"]),
    ];
    let mut kinds = std::collections::BTreeSet::new();
    for (i, (model, extra)) in cases.iter().enumerate() {
        let dir = scratch.join(format!("b{i}"));
        bundle(model, &dir, extra);
        let plan = plan(&dir);
        let errors: Vec<String> = validator
            .iter_errors(&plan)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{model} {extra:?}: {errors:#?}");
        for b in plan["buffers"].as_array().unwrap() {
            kinds.insert(b["kind"].as_str().unwrap().to_string());
        }
    }
    // The plans cover every kind of buffer the schema describes.
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            "constant",
            "input",
            "intermediate",
            "output",
            "texture",
            "weight"
        ]
    );
    // And the schema is strict: an unknown field or version fails it.
    let dir = scratch.join("b0");
    for (key, value) in [("extra", Value::Bool(true)), ("version", Value::from(2))] {
        let mut p = plan(&dir);
        p[key] = value;
        assert!(!validator.is_valid(&p), "the schema accepts {key}");
    }
    // ... as are its rules within a buffer.
    let buffer_of = |p: &mut Value, kind: &str| -> usize {
        p["buffers"]
            .as_array()
            .unwrap()
            .iter()
            .position(|b| b["kind"] == kind)
            .unwrap()
    };
    let mut p = plan(&dir);
    let w = buffer_of(&mut p, "weight");
    p["buffers"][w].as_object_mut().unwrap().remove("tensor");
    assert!(!validator.is_valid(&p), "a weight without a tensor");
    let mut p = plan(&dir);
    let i = buffer_of(&mut p, "intermediate");
    p["buffers"][i]["pool_offset"] = 100.into();
    assert!(!validator.is_valid(&p), "an unaligned pool offset");
    let mut p = plan(&dir);
    let i = buffer_of(&mut p, "input");
    p["buffers"][i]["texels"] = serde_json::json!([4, 4]);
    assert!(!validator.is_valid(&p), "texels on an input");
}

/// Twice the same bundle, byte for byte: from `ircc compile` and from
/// `--emit wgsl -o DIR`, which writes the same.
#[test]
fn a_bundle_is_written_byte_for_byte_the_same_twice() {
    let scratch = scratch_dir("bundle-deterministic");
    let (a, b) = (scratch.join("a"), scratch.join("b"));
    bundle(SWIN, &a, &[]);
    let model = root().join(SWIN);
    let out = ircc(&[
        model.to_str().unwrap(),
        "--pipeline",
        "smartmem-gpu",
        "--emit",
        "wgsl",
        "-o",
        b.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let (fa, fb) = (files(&a), files(&b));
    assert!(fa.iter().any(|(f, _)| f == "weights.safetensors"));
    assert_eq!(fa.len(), fb.len());
    for ((na, da), (nb, db)) in fa.iter().zip(&fb) {
        assert_eq!(na, nb);
        assert!(da == db, "{na} differs between two writes");
    }
}

/// `ircc run DIR` on a bundle gives what `ircc run MODEL --backend B`
/// gives, bit for bit: the same kernels (both compiled for Adreno 740's
/// profile, textures and all) on the same device.
fn bundle_runs_as_the_model(backend: &str) {
    let scratch = scratch_dir(&format!("bundle-run-{backend}"));
    let dir = scratch.join("bundle");
    bundle(SWIN, &dir, &["--backend", backend, "--device", "adreno740"]);
    let input = root().join("tests/models/swin_t_w24_dynamo.input.npy");
    let (by_bundle, by_model) = (scratch.join("o1"), scratch.join("o2"));
    let out = run(&dir, &input, &by_bundle, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let model_args = [
        "--pipeline",
        "smartmem",
        "--backend",
        backend,
        "--device",
        "adreno740",
    ];
    let out = run(&root().join(SWIN), &input, &by_model, &model_args);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let names = common::files_under(&by_model);
    assert_eq!(common::files_under(&by_bundle), names);
    for name in names {
        let a = std::fs::read(by_bundle.join(&name)).unwrap();
        let b = std::fs::read(by_model.join(&name)).unwrap();
        assert!(
            a == b,
            "{name}: the bundle's output differs from the model's"
        );
    }
}

#[test]
fn a_wgsl_bundle_runs_as_the_model_does() {
    if common::gpu_available() {
        bundle_runs_as_the_model("wgpu");
    }
}

#[test]
fn an_opencl_bundle_runs_as_the_model_does() {
    if common::opencl_available() {
        bundle_runs_as_the_model("opencl");
    }
}

/// Writes `ir` as a file in `scratch` and compiles it into the bundle
/// `scratch/bundle` with `--emit LANGUAGE -o`, a kernel per op: the IR file, the folder
/// and ircc's output.
fn ir_bundle(scratch: &Path, ir: &str, language: &str) -> (PathBuf, PathBuf, common::Output) {
    let file = scratch.join("m.ir");
    std::fs::write(&file, ir).unwrap();
    let dir = scratch.join("bundle");
    let out = ircc(&[
        file.to_str().unwrap(),
        "--passes",
        "kernel.schedule,kernel.lower,kernel.ace",
        "--emit",
        language,
        "-o",
        dir.to_str().unwrap(),
    ]);
    (file, dir, out)
}

/// A WGSL bundle's plan says what it asks of a WebGPU device beyond the
/// defaults: f16 shaders need `shader-f16`, a concat of nine tensors binds
/// ten storage buffers; an OpenCL plan says nothing of WebGPU.
#[test]
fn a_wgsl_plan_says_what_it_asks_of_webgpu() {
    let scratch = scratch_dir("bundle-webgpu");
    let dir = scratch.join("f16");
    bundle(BERT, &dir, &["--precision", "f16"]);
    assert_eq!(
        plan(&dir)["webgpu"],
        serde_json::json!({"features": ["shader-f16"], "limits": {}})
    );
    let dir = scratch.join("opencl");
    bundle(BERT, &dir, &["--backend", "opencl"]);
    assert!(plan(&dir).get("webgpu").is_none());
    let args: Vec<String> = (0..9).map(|i| format!("%x{i}: tensor<4xf32>")).collect();
    let operands: Vec<String> = (0..9).map(|i| format!("%x{i}")).collect();
    let ir = format!(
        "func.func @main({}) -> tensor<36xf32> {{\n  %y = graph.concat {} {{axis = 0}} : {} -> tensor<36xf32>\n  func.return %y : tensor<36xf32>\n}}\n",
        args.join(", "),
        operands.join(", "),
        ["tensor<4xf32>"; 9].join(", ")
    );
    let (_, dir, out) = ir_bundle(&scratch, &ir, "wgsl");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        plan(&dir)["webgpu"],
        serde_json::json!({"features": [], "limits": {"maxStorageBuffersPerShaderStage": 10}})
    );
}

/// The BERT bundle, written once, copied for each damage done to it.
fn damaged(name: &str, damage: impl FnOnce(&Path, &mut Value)) -> (common::Scratch, PathBuf) {
    let scratch = scratch_dir(&format!("bundle-damaged-{name}"));
    let dir = scratch.join("bundle");
    bundle(BERT, &dir, &[]);
    let mut p = plan(&dir);
    damage(&dir, &mut p);
    std::fs::write(dir.join("plan.json"), p.to_string()).unwrap();
    (scratch, dir)
}

fn run_fails(dir: &Path, extra: &[&str], expected: &str, code: i32) {
    let input = root().join("tests/models/bert_l2_w64.input.npy");
    let out_dir = dir.with_file_name("out");
    let out = run(dir, &input, &out_dir, extra);
    assert_eq!(out.code, code, "{}", out.stderr);
    assert!(
        out.stderr.contains(expected),
        "expected '{expected}' in: {}",
        out.stderr
    );
    assert!(!out_dir.exists(), "a refused bundle wrote outputs");
}

#[test]
fn a_damaged_or_hostile_bundle_is_refused_with_what_is_wrong() {
    type Damage = Box<dyn FnOnce(&Path, &mut Value)>;
    let cases: Vec<(&str, Damage, &str)> = vec![
        (
            "version",
            Box::new(|_, p| p["version"] = 2.into()),
            "plan.json: version 2 of the plan format; this ircc reads version 1",
        ),
        (
            "unknown-field",
            Box::new(|_, p| p["buffers"][0]["layout"] = "nchw".into()),
            "unknown field `layout`",
        ),
        (
            "binding",
            Box::new(|_, p| p["dispatches"][0]["bindings"][0]["buffer"] = 9999.into()),
            "names buffer 9999, which does not exist",
        ),
        (
            "bytes",
            Box::new(|_, p| p["buffers"][0]["bytes"] = (1u64 << 40).into()),
            "bytes, where its shape and type take 32768",
        ),
        (
            "pool",
            Box::new(|_, p| {
                let b = p["buffers"]
                    .as_array_mut()
                    .unwrap()
                    .iter_mut()
                    .find(|b| b["kind"] == "intermediate")
                    .unwrap();
                b["pool_offset"] = (1u64 << 50).into();
            }),
            "ends past the",
        ),
        (
            "shader-path",
            Box::new(|_, p| p["dispatches"][0]["shader"] = "../../etc/passwd".into()),
            "leaves the folder",
        ),
        (
            "grid",
            Box::new(|_, p| p["dispatches"][0]["workgroups"] = serde_json::json!([1, 0, 1])),
            "is not three counts (x, y, z) of at least 1",
        ),
        (
            "weight-missing",
            Box::new(|_, p| {
                let b = p["buffers"]
                    .as_array_mut()
                    .unwrap()
                    .iter_mut()
                    .find(|b| b["kind"] == "weight")
                    .unwrap();
                b["tensor"] = "no-such-weight".into();
            }),
            "weights.safetensors has no tensor 'no-such-weight', which the plan names",
        ),
        (
            "weights-absolute",
            Box::new(|_, p| p["weights"] = "/etc/passwd".into()),
            "leaves the folder",
        ),
        (
            "shader-link",
            Box::new(|dir, p| {
                std::os::unix::fs::symlink("/etc/hostname", dir.join("k.wgsl")).unwrap();
                p["dispatches"][0]["shader"] = "k.wgsl".into();
            }),
            "outside the folder",
        ),
        (
            "output-names",
            Box::new(|_, p| p["output_names"] = serde_json::json!([])),
            "1 outputs but 0 output names",
        ),
        (
            "read-write-weight",
            Box::new(|_, p| {
                let weight = p["buffers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .position(|b| b["kind"] == "weight")
                    .unwrap();
                for d in p["dispatches"].as_array_mut().unwrap() {
                    for b in d["bindings"].as_array_mut().unwrap() {
                        if b["buffer"] == weight {
                            b["access"] = "read_write".into();
                        }
                    }
                }
            }),
            "as ReadWrite",
        ),
        (
            "weight-type",
            Box::new(|dir, p| {
                // The weights written at f16 for a plan that says f32.
                let f16 = dir.with_file_name("f16");
                bundle(BERT, &f16, &["--precision", "f16"]);
                std::fs::copy(
                    f16.join("weights.safetensors"),
                    dir.join("weights.safetensors"),
                )
                .unwrap();
                p["precision"] = "f32".into();
            }),
            "the plan stores it as f32",
        ),
        (
            "shader-nul",
            Box::new(|dir, p| {
                // A megabyte of NUL bytes: refused at once, naming where.
                std::fs::write(dir.join("k.wgsl"), vec![0u8; 1 << 20]).unwrap();
                p["dispatches"][0]["shader"] = "k.wgsl".into();
            }),
            "k.wgsl:1:1: a control character (U+0000)",
        ),
        (
            "webgpu-needs",
            Box::new(|_, p| p["webgpu"]["features"] = serde_json::json!(["subgroups"])),
            "plan.json: 'webgpu' says the plan needs {\"features\":[\"subgroups\"],\"limits\":{}}; its dispatches and shaders need {\"features\":[],\"limits\":{}}",
        ),
        (
            "escaped-control",
            Box::new(|_, p| p["output_names"] = serde_json::json!(["\u{1b}[31mred\nfake: ok"])),
            "holds a control character, which no name in a plan has",
        ),
    ];
    for (name, damage, expected) in cases {
        let (_scratch, dir) = damaged(name, damage);
        run_fails(&dir, &[], expected, 1);
    }
}

#[test]
fn options_fixed_when_compiling_are_errors_with_a_bundle() {
    let (_scratch, dir) = damaged("options", |_, _| {});
    run_fails(
        &dir,
        &["--pipeline", "none"],
        "--pipeline does not apply to a bundle",
        2,
    );
    run_fails(
        &dir,
        &["--precision", "f16"],
        "--precision does not apply to a bundle",
        2,
    );
    run_fails(
        &dir,
        &["--cl-options", "-cl-fast-relaxed-math"],
        "--cl-options does not apply: bundle",
        1,
    );
    run_fails(
        &dir,
        &["--backend", "opencl"],
        "holds WGSL sources, which run on --backend wgpu",
        1,
    );
}

/// `ircc bench DIR` times a bundle as it was compiled (its plan's
/// dispatches, precision and target) and takes only the options a bundle
/// can: compiling options and another backend's are refused before a
/// device is opened.
#[test]
fn a_bundle_is_timed_as_compiled() {
    let (_scratch, dir) = damaged("bench", |_, _| {});
    let dir_arg = dir.to_str().unwrap();
    let bench = |extra: &[&str]| {
        let mut args = vec!["bench", dir_arg];
        args.extend_from_slice(extra);
        ircc(&args)
    };
    let out = bench(&["--precision", "f16"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("--precision does not apply to a bundle")
    );
    assert!(out.stderr.contains("--runs, --warmup"), "{}", out.stderr);
    let out = bench(&["--backend", "opencl"]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("holds WGSL sources, which run on --backend wgpu")
    );
    // The bounds `ircc run DIR` holds a bundle to, before a device opens.
    let out = bench(&["--max-bytes", "16"]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("more than --max-bytes 16"),
        "{}",
        out.stderr
    );
    if !common::gpu_available() {
        return;
    }
    let out = bench(&["--runs", "2", "--warmup", "1", "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let report: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let p = plan(&dir);
    let dispatches = p["dispatches"].as_array().unwrap().len();
    assert_eq!(report["kernels"].as_u64(), Some(dispatches as u64));
    assert_eq!(report["pipeline"], "bundle");
    assert_eq!(report["precision"], p["precision"]);
    assert_eq!(report["device"], p["target"]["device"]);
    assert!(report["median_ms"].as_f64().unwrap() > 0.0, "{report}");
    let out = bench(&["--runs", "1", "--roofline"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout
            .contains("no roofline: a bundle holds no kernel IR")
    );
    // `ircc run DIR` takes --output-format, as a model's run does.
    let input = root().join("tests/models/bert_l2_w64.input.npy");
    let outputs = dir.with_file_name("outputs");
    let out = run(&dir, &input, &outputs, &["--output-format", "safetensors"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(outputs.join("outputs.safetensors").is_file());
}

#[test]
fn a_bundle_needs_every_weight() {
    // IR naming a weight that no file holds cannot make a bundle.
    let scratch = scratch_dir("bundle-no-weights");
    let (_, dir, out) = ir_bundle(
        &scratch,
        "func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %w = graph.param {name = \"w\"} : () -> tensor<4xf32>\n  %y = graph.add %x, %w : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>\n  func.return %y : tensor<4xf32>\n}\n",
        "wgsl",
    );
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("weight 'w' is not available"),
        "{}",
        out.stderr
    );
    assert!(!dir.join("plan.json").exists());
}

/// Functionally identical kernels may share one file: each dispatch runs
/// the source its `shader` names, not the n-th file read.
#[test]
fn dispatches_sharing_a_shader_file_each_run_it() {
    if !common::gpu_available() {
        return;
    }
    let scratch = scratch_dir("bundle-shared-shader");
    let (ir, dir, out) = ir_bundle(
        &scratch,
        "func.func @main(%x: tensor<64xf32>) -> tensor<64xf32> {\n  %a = graph.exp %x : tensor<64xf32> -> tensor<64xf32>\n  %b = graph.exp %a : tensor<64xf32> -> tensor<64xf32>\n  %c = graph.exp %b : tensor<64xf32> -> tensor<64xf32>\n  func.return %c : tensor<64xf32>\n}\n",
        "wgsl",
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    // The second and third kernels read and write the pool alike: the
    // third dispatch takes the second's file, and its own goes.
    let mut p = plan(&dir);
    let second = p["dispatches"][1]["shader"].clone();
    let third = p["dispatches"][2]["shader"].as_str().unwrap().to_string();
    p["dispatches"][2]["shader"] = second;
    std::fs::write(dir.join("plan.json"), p.to_string()).unwrap();
    std::fs::remove_file(dir.join(third)).unwrap();
    let values = (0..64).map(|i| i as f64 / 64.0 - 0.5).collect();
    let input = f32_input(&scratch, values, &[64]);
    let (by_bundle, by_ir) = (scratch.join("o1"), scratch.join("o2"));
    for (file, out_dir) in [(&dir, &by_bundle), (&ir, &by_ir)] {
        let out = run(file, &input, out_dir, &[]);
        assert_eq!(out.code, 0, "{}", out.stderr);
    }
    let diff = common::max_relative(&by_bundle.join("result0.npy"), &by_ir.join("result0.npy"));
    assert!(diff < 1e-5, "exp(exp(exp(x))) off by {diff}");
}

/// A plan may return its input as it is, with no dispatch: an OpenCL
/// bundle with no kernel to build still runs (ircc itself copies the
/// input with a kernel; another producer of plans need not).
#[test]
fn a_bundle_without_dispatches_runs() {
    if !common::opencl_available() {
        return;
    }
    let scratch = scratch_dir("bundle-empty");
    let (_, dir, out) = ir_bundle(
        &scratch,
        "func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n  func.return %x : tensor<4xf32>\n}\n",
        "opencl",
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let input = f32_input(&scratch, vec![1.0, -2.0, 3.5, 0.0], &[4]);
    let mut p = plan(&dir);
    p["dispatches"] = serde_json::json!([]);
    p["outputs"] = p["inputs"].clone();
    std::fs::write(dir.join("plan.json"), p.to_string()).unwrap();
    let out_dir = scratch.join("out");
    let out = run(&dir, &input, &out_dir, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        common::max_relative(&out_dir.join("result0.npy"), &input),
        0.0
    );
}

/// A bundle's run is bounded before anything is set up: the invocations
/// of all its dispatches (one asking for 65535 x 65535 x 16 workgroups,
/// inside every device limit, would run for days), the bytes of its
/// buffers and of each text file, each limit one a user can raise; and
/// with --timeout, the wall clock, which ends even a run the device is in
/// the middle of.
#[test]
fn a_bundle_run_is_bounded() {
    let huge_grid = |_: &Path, p: &mut Value| {
        let last = p["dispatches"].as_array().unwrap().len() - 1;
        p["dispatches"][last]["workgroups"] = serde_json::json!([65535, 65535, 16]);
    };
    let (_scratch, dir) = damaged("huge-grid", huge_grid);
    run_fails(
        &dir,
        &[],
        "more than --max-invocations 17179869184 (raise it",
        1,
    );
    run_fails(
        &dir,
        &["--max-invocations", "1000"],
        "more than --max-invocations 1000",
        1,
    );
    let (_scratch2, small) = damaged("max-bytes", |_, _| {});
    run_fails(
        &small,
        &["--max-bytes", "1000"],
        "bytes, more than --max-bytes 1000",
        1,
    );
    // A source of valid text all through, past the default: a shader
    // compiler would take time and memory in proportion.
    let (_scratch3, big) = damaged("big-source", |dir, p| {
        let file = dir.join(p["dispatches"][0]["shader"].as_str().unwrap());
        let mut text = std::fs::read_to_string(&file).unwrap();
        text += &format!("// {}\n", "a".repeat(17 << 20));
        std::fs::write(file, text).unwrap();
    });
    run_fails(
        &big,
        &[],
        "bytes, more than --max-source-bytes 16777216 (raise it",
        1,
    );
    run_fails(
        &small,
        &["--max-source-bytes", "1000"],
        "bytes, more than --max-source-bytes 1000",
        1,
    );
    if !common::gpu_available() {
        eprintln!("0 passed, 0 failed, 1 skipped (no GPU adapter)");
        return;
    }
    let input = root().join("tests/models/bert_l2_w64.input.npy");
    let out_dir = dir.with_file_name("timed-out");
    let start = std::time::Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ircc"))
        .arg("run")
        .arg(&dir)
        .arg("--input")
        .arg(&input)
        .arg("--output-dir")
        .arg(&out_dir)
        .args([
            "--backend",
            "wgpu",
            "--max-invocations",
            "1000000000000000",
            "--timeout",
            "2",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("ran longer than --timeout 2 s"), "{stderr}");
    assert!(start.elapsed().as_secs() < 60, "{:?}", start.elapsed());
    assert!(!out_dir.exists());
}
