//! The GPU path: every shared model lowers to kernels whose WGSL naga
//! accepts, and runs on wgpu (lavapipe in CI, a software Vulkan GPU) for
//! every pipeline and both precisions (`smartmem` holds intermediates in
//! the textures its layout selection chooses, for Adreno 740 and again for
//! Adreno 640's profile), matching the stored reference output
//! (which the interpreter matches within 1e-6, see `tests/models.rs`):
//! f32 within 1e-4 and f16 within 1e-2 of the output's scale.
//!
//! Without a Vulkan adapter the run test fails when `IRCC_REQUIRE_GPU` is
//! set (CI sets it) and is reported as skipped otherwise.

mod common;

use common::{ircc, root, scratch_dir};
use ircc_dialects::kernel::KernelOp;

const PIPELINES: [&str; 3] = ["none", "dnnfusion", "smartmem"];

fn validate(wgsl: &str) -> Result<(), String> {
    let module = naga::front::wgsl::parse_str(wgsl).map_err(|e| e.emit_to_string(wgsl))?;
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| format!("{e:?}"))?;
    Ok(())
}

#[test]
fn every_emitted_shader_passes_naga() {
    let (mut shaders, mut plans) = (0, 0);
    for (name, path) in common::shared_models() {
        for pipeline in PIPELINES {
            for precision in ["f32", "f16"] {
                let dir = scratch_dir("wgsl");
                let out = dir.join("out");
                let args = [
                    "compile",
                    path.to_str().unwrap(),
                    "--pipeline",
                    pipeline,
                    "--precision",
                    precision,
                    "-o",
                    out.to_str().unwrap(),
                ];
                let r = ircc(&args);
                assert_eq!(r.code, 0, "{name} {pipeline} {precision}: {}", r.stderr);
                let plan: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(out.join("plan.json")).unwrap())
                        .unwrap();
                let dispatches = plan["dispatches"].as_array().unwrap();
                assert!(!dispatches.is_empty());
                for d in dispatches {
                    let file = out.join(d["shader"].as_str().unwrap());
                    let wgsl = std::fs::read_to_string(&file).unwrap();
                    assert_eq!(
                        wgsl.contains("enable f16;"),
                        precision == "f16" || wgsl.contains("f16")
                    );
                    validate(&wgsl).unwrap_or_else(|e| panic!("{}: {e}\n{wgsl}", file.display()));
                    shaders += 1;
                }
                plans += 1;
            }
        }
    }
    eprintln!("{shaders} shaders of {plans} plans validated by naga");
}

#[test]
fn models_run_on_wgpu_and_match() {
    if !common::gpu_available() {
        eprintln!("0 passed, 0 failed, 64 skipped (no GPU adapter)");
        return;
    }
    let (mut passed, mut failed) = (0, Vec::new());
    for (name, path) in common::shared_models() {
        let dir = path.parent().unwrap();
        let input = dir.join(format!("{name}.input.npy"));
        let want = dir.join(format!("{name}.output.npy"));
        // Every pipeline for the default device; smartmem's layouts again
        // for another device's profile.
        let variants = PIPELINES
            .iter()
            .map(|&p| (p, None))
            .chain([("smartmem", Some("adreno640"))]);
        for (pipeline, device) in variants {
            for (precision, tolerance) in [("f32", 1e-4), ("f16", 1e-2)] {
                let scratch = scratch_dir("run");
                let out = scratch.join("o");
                let mut args = vec![
                    "run",
                    path.to_str().unwrap(),
                    "--pipeline",
                    pipeline,
                    "--precision",
                    precision,
                    "--backend",
                    "wgpu",
                    "--input",
                    input.to_str().unwrap(),
                    "--output-dir",
                    out.to_str().unwrap(),
                ];
                if let Some(device) = device {
                    args.extend(["--device", device]);
                }
                let r = ircc(&args);
                let pipeline = match device {
                    Some(d) => format!("{pipeline} (--device {d})"),
                    None => pipeline.to_string(),
                };
                assert_eq!(r.code, 0, "{name} {pipeline} {precision}: {}", r.stderr);
                let got = std::fs::read_dir(&out)
                    .unwrap()
                    .next()
                    .unwrap()
                    .unwrap()
                    .path();
                let diff = common::max_relative(&got, &want);
                if diff <= tolerance {
                    passed += 1;
                } else {
                    failed.push(format!("{name} {pipeline} {precision}: {diff:e}"));
                }
            }
        }
    }
    eprintln!("{passed} passed, {} failed, 0 skipped", failed.len());
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn kernel_ir_prints_and_parses_back() {
    let mlp = root().join("examples/mlp.ir");
    for (passes, marker) in [
        ("kernel.schedule,kernel.lower", KernelOp::Launch.name()),
        (
            "kernel.schedule,layout.select,texture.map,kernel.lower",
            KernelOp::TextureStore.name(),
        ),
    ] {
        let first = ircc(&[mlp.to_str().unwrap(), "--passes", passes]);
        assert_eq!(first.code, 0, "{}", first.stderr);
        assert!(first.stdout.contains("kernel.func") && first.stdout.contains(marker));
        let dir = scratch_dir("kernel-ir");
        let file = dir.join("lowered.ir");
        std::fs::write(&file, &first.stdout).unwrap();
        let second = ircc(&[file.to_str().unwrap()]);
        assert_eq!(second.code, 0, "{}", second.stderr);
        assert_eq!(first.stdout, second.stdout);
    }
}

#[test]
fn kernel_filetest_shaders_pass_naga() {
    let mut shaders = 0;
    for (file, name, wgsl) in
        common::filetest_sources(&["tests/ir/kernel", "tests/ir/kernel.lower"], "wgsl")
    {
        validate(&wgsl).unwrap_or_else(|e| panic!("{file}, {name}: {e}\n{wgsl}"));
        shaders += 1;
    }
    assert!(shaders >= 12, "only {shaders} filetest shaders");
    eprintln!("{shaders} filetest shaders validated by naga");
}

#[test]
fn products_split_along_k_match_the_interpreter_on_wgpu() {
    if !common::gpu_available() {
        eprintln!("0 passed, 0 failed, 2 skipped (no GPU adapter)");
        return;
    }
    common::assert_template_matches(&common::SPLIT_K, &["--backend", "wgpu"]);
}

#[test]
fn products_writing_texels_normalizing_depthwise_or_grouped_convolutions_match_the_interpreter_on_wgpu()
 {
    if !common::gpu_available() {
        eprintln!("0 passed, 0 failed, 13 skipped (no GPU adapter)");
        return;
    }
    for case in [
        &common::PRODUCT_TEXELS,
        &common::NORM_PROLOGUE,
        &common::DEPTHWISE,
        &common::GROUPED_CONV,
        &common::GROUPED_BLOCKS,
    ] {
        common::assert_lowered_matches(case, &["--backend", "wgpu"]);
    }
    let far = common::norm_far_difference(&["--backend", "wgpu"]);
    assert!(far <= 1e-4, "{}: {far:e}", common::NORM_FAR.file);
}

#[test]
fn attention_templates_match_the_interpreter_on_wgpu() {
    if !common::gpu_available() {
        eprintln!("0 passed, 0 failed, 4 skipped (no GPU adapter)");
        return;
    }
    for (case, template) in common::ATTENTION_TEMPLATES {
        let mut backend = vec!["--backend", "wgpu"];
        backend.extend_from_slice(template);
        common::assert_template_matches(case, &backend);
    }
}

#[test]
fn integer_reductions_match_the_interpreter_on_wgpu() {
    if common::gpu_available() {
        common::integer_reductions_match("wgpu");
    }
}

#[test]
fn integer_products_match_the_interpreter_on_wgpu() {
    if common::gpu_available() {
        common::integer_products_match("wgpu");
    }
}

#[test]
fn suppression_matches_the_interpreter_on_wgpu() {
    if common::gpu_available() {
        common::suppression_matches("wgpu");
    }
}

#[test]
fn byte_inputs_match_the_interpreter_on_wgpu() {
    if common::gpu_available() {
        common::byte_inputs_match("wgpu");
    }
}

#[test]
fn vector_loads_and_stores_match_the_interpreter_on_wgpu() {
    if !common::gpu_available() {
        eprintln!("0 passed, 0 failed, 1 skipped (no GPU adapter)");
        return;
    }
    let args = ["--pipeline", "none", "--backend", "wgpu"];
    for case in [&common::VECTOR_LOAD, &common::VECTOR_STORE] {
        let diff = common::template_difference(case, &args);
        assert!(diff <= 1e-6, "{}: {diff:e}", case.file);
    }
}

#[test]
fn nan_and_infinities_give_onnx_answers_on_wgpu() {
    if common::gpu_available() {
        common::special::special_values_match("wgpu");
    }
}

/// Row kernels (held in registers, or read in a loop, or writing texels,
/// or column reductions) beside the interpreter, at f32 and f16.
#[test]
fn row_kernels_match_the_interpreter_on_wgpu() {
    if !common::gpu_available() {
        eprintln!("0 passed, 0 failed, 6 skipped (no GPU adapter)");
        return;
    }
    for case in [&common::ROWS, &common::ROW_TEXELS, &common::ROW_COLUMNS] {
        common::assert_lowered_matches(case, &["--backend", "wgpu"]);
    }
}

/// A module printed after `kernel.schedule` runs as its schedules say,
/// edited or not, the way IREE lowers a hand-set `lowering_config`: BERT's
/// products given register tiles of 2 x 2 by hand lower to kernels of
/// those tiles (not the heuristic's 1 x 1 again) and match the unedited
/// module; a `--precision` other than the one it was scheduled for, or a
/// `--tuning-db`, is refused, not silently taken or dropped; a pipeline
/// that may change its ops (dnnfusion) schedules them again.
#[test]
fn a_module_scheduled_already_runs_as_its_schedules_say() {
    let model = root().join("tests/models/bert_l2_w64.onnx");
    let input = model.with_extension("input.npy");
    let dir = scratch_dir("scheduled");
    let scheduled = dir.join("scheduled.ir");
    let passes = "canonicalize,graph.fold-attention,graph.math-rewrite,canonicalize,\
                  graph.eliminate-layout-ops,index.simplify,canonicalize,graph.fuse,kernel.schedule";
    let r = ircc(&[
        model.to_str().unwrap(),
        "--passes",
        passes,
        "--device",
        "lavapipe",
        "-o",
        scheduled.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = std::fs::read_to_string(&scheduled).unwrap();
    let heuristic = "register_tile = array<i64: 1, 1>, k_step = 64";
    assert!(text.contains(heuristic), "the heuristic's tiles changed");
    let edited = dir.join("edited.ir");
    std::fs::write(
        &edited,
        text.replace(heuristic, "register_tile = array<i64: 2, 2>, k_step = 32"),
    )
    .unwrap();
    let compile = |extra: &[&str], name: &str| {
        let out = dir.join(name);
        let mut args = vec![
            "compile",
            edited.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        ircc(&args)
    };
    for (extra, refusal) in [
        (
            &["--precision", "f16"][..],
            "--precision f16 contradicts the module's kernel.precision f32",
        ),
        (
            &["--tuning-db", "db.json"][..],
            "--tuning-db db.json: the module's ops have their kernel.schedule already",
        ),
    ] {
        let r = compile(extra, "refused");
        assert_ne!(r.code, 0, "{extra:?}");
        assert!(r.stderr.contains(refusal), "{extra:?}: {}", r.stderr);
    }
    let r = compile(&["--pipeline", "dnnfusion"], "rescheduled");
    assert_eq!(r.code, 0, "{}", r.stderr);
    if !common::gpu_available() {
        eprintln!("0 passed, 0 failed, 1 skipped (no GPU adapter)");
        return;
    }
    let lowered = |file: &std::path::Path, name: &str| {
        let out = dir.join(name);
        let dump = dir.join(format!("{name}-dump"));
        let r = common::run(
            file,
            &input,
            &out,
            &["--backend", "wgpu", "--dump-dir", dump.to_str().unwrap()],
        );
        assert_eq!(r.code, 0, "{name}: {}", r.stderr);
        let kernels = std::fs::read_to_string(dump.join("01-kernel.lower.ir")).unwrap();
        (out.join("output.npy"), kernels)
    };
    let (ours, ours_kernels) = lowered(&scheduled, "heuristic");
    let (theirs, their_kernels) = lowered(&edited, "edited");
    let two_by_two = "tile = array<i64: 32, 32, 32, 2, 2>";
    assert!(
        their_kernels.contains(two_by_two),
        "the edited tiles were not lowered"
    );
    assert!(!ours_kernels.contains(two_by_two));
    assert!(common::max_relative(&theirs, &ours) <= 1e-5);
}
