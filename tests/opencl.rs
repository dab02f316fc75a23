//! The OpenCL path: every shared model through `none`, `dnnfusion` and
//! `smartmem`, in f32 and with f16 storage, compiled to one OpenCL C
//! program and run through the OpenCL ICD loader (PoCL in CI, a CPU
//! device with images), matching the stored reference outputs as the
//! wgpu runs must (f32 within 1e-4, f16 within 1e-2 of the output's
//! scale). PoCL's own optimizer is off here (`--cl-options
//! -cl-opt-disable`): it compiles each kernel the first time it runs, and
//! optimizing costs more than running these small models.
//!
//! Without an OpenCL device the run test fails when `IRCC_REQUIRE_OPENCL`
//! is set (CI sets it) and is reported as skipped otherwise.

mod common;

use std::path::Path;

use common::{ircc, max_relative, scratch_dir};

const PIPELINES: [&str; 3] = ["none", "dnnfusion", "smartmem"];

/// One model through one pipeline at one precision: the relative
/// difference from the reference, and how many kernels read images.
fn run_model(
    name: &str,
    path: &Path,
    pipeline: &str,
    precision: &str,
) -> Result<(f64, usize), String> {
    let dir = path.parent().unwrap();
    let input = dir.join(format!("{name}.input.npy"));
    let want = dir.join(format!("{name}.output.npy"));
    let scratch = scratch_dir("opencl");
    let out = scratch.join("o");
    let r = ircc(&[
        "run",
        path.to_str().unwrap(),
        "--pipeline",
        pipeline,
        "--precision",
        precision,
        "--backend",
        "opencl",
        "--cl-options",
        "-cl-opt-disable",
        "--input",
        input.to_str().unwrap(),
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    if r.code != 0 {
        return Err(r.stderr);
    }
    let got = std::fs::read_dir(&out)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let emitted = scratch.join("cl");
    let e = ircc(&[
        "compile",
        path.to_str().unwrap(),
        "--pipeline",
        pipeline,
        "--precision",
        precision,
        "--backend",
        "opencl",
        "-o",
        emitted.to_str().unwrap(),
    ]);
    assert_eq!(e.code, 0, "{}", e.stderr);
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(emitted.join("plan.json")).unwrap()).unwrap();
    let image_readers = plan["dispatches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| {
            d["bindings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|b| b["access"] == "texture")
        })
        .count();
    Ok((max_relative(&got, &want), image_readers))
}

#[test]
fn models_run_on_opencl_and_match() {
    if !common::opencl_available() {
        eprintln!("0 passed, 0 failed, 48 skipped (no OpenCL device)");
        return;
    }
    let mut jobs = Vec::new();
    for (name, path) in common::shared_models() {
        for pipeline in PIPELINES {
            for (precision, tolerance) in [("f32", 1e-4), ("f16", 1e-2)] {
                jobs.push((name.clone(), path.clone(), pipeline, precision, tolerance));
            }
        }
    }
    // Two at a time: PoCL compiles each kernel on one core.
    let queue = std::sync::Mutex::new(jobs.into_iter());
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let Some((name, path, pipeline, precision, tolerance)) =
                        queue.lock().unwrap().next()
                    else {
                        break;
                    };
                    let outcome = run_model(&name, &path, pipeline, precision);
                    results
                        .lock()
                        .unwrap()
                        .push((name, pipeline, precision, tolerance, outcome));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by(|a, b| (&a.0, a.1, a.2).cmp(&(&b.0, b.1, b.2)));
    let (mut passed, mut failed) = (0, Vec::new());
    for (name, pipeline, precision, tolerance, outcome) in results {
        match outcome {
            Ok((diff, images)) if diff <= tolerance => {
                passed += 1;
                eprintln!(
                    "{name} {pipeline} {precision}: {diff:.1e}, {images} kernels read images"
                );
            }
            Ok((diff, _)) => failed.push(format!("{name} {pipeline} {precision}: {diff:e}")),
            Err(e) => failed.push(format!("{name} {pipeline} {precision}: {e}")),
        }
    }
    eprintln!("{passed} passed, {} failed, 0 skipped", failed.len());
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn smartmem_kernels_read_images() {
    // The texture level's choice reaches OpenCL as image2d_t arguments.
    let swin = common::find_model("swin_t_w24").expect("swin_t_w24.onnx");
    let dir = scratch_dir("opencl-emit");
    let out = dir.join("cl");
    let r = ircc(&[
        swin.to_str().unwrap(),
        "--pipeline",
        "smartmem-gpu",
        "--emit",
        "opencl",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cl = std::fs::read_to_string(out.join("kernels.cl")).unwrap();
    assert!(cl.contains("__read_only image2d_t") && cl.contains("read_imagef("));
    assert!(cl.contains("__write_only image2d_t") && cl.contains("write_imagef("));
    let plan = std::fs::read_to_string(out.join("plan.json")).unwrap();
    assert!(plan.contains("\"texel_format\": \"rgba32f\""));
    assert!(plan.contains("\"entry\""));
}

/// The OpenCL C of each kernel and texture filetest that emits it.
fn filetest_programs() -> Vec<(String, String)> {
    common::filetest_sources(&["tests/ir/kernel", "tests/ir/texture"], "opencl")
        .into_iter()
        .map(|(file, _, cl)| (file, cl))
        .collect()
}

#[test]
fn filetest_programs_build_on_the_device() {
    if !common::opencl_available() {
        return;
    }
    let programs = filetest_programs();
    assert!(programs.len() >= 13, "{} programs", programs.len());
    for (file, cl) in &programs {
        ircc_opencl::check_program(cl, "").unwrap_or_else(|e| panic!("{file}: {e}\n{cl}"));
    }
    eprintln!("{} filetest programs built", programs.len());
}

#[test]
fn compiler_errors_name_the_kernel_and_the_line() {
    if !common::opencl_available() {
        return;
    }
    let (_, cl) = filetest_programs()
        .into_iter()
        .find(|(f, _)| f.ends_with("layer_norm.ir"))
        .unwrap();
    // Break one statement of the first kernel.
    let line = cl.lines().position(|l| l.contains("const float")).unwrap();
    let broken: String = cl
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == line {
                format!("{}\n", l.replace("const float", "const flot"))
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let kernel = cl.lines().find_map(|l| l.strip_prefix("void ")).unwrap();
    let kernel = kernel.split('(').next().unwrap();
    let e = ircc_opencl::check_program(&broken, "").unwrap_err();
    assert!(
        e.contains(&format!("kernel {kernel}, line {}", line + 1)),
        "{e}"
    );
    assert!(e.contains("const flot"), "{e}");
}

#[test]
fn scalar_operands_are_splat_only_where_the_device_cannot_broadcast() {
    // A tiled matmul's register tile multiplies one scalar of A by four
    // lanes of B: one vector product, the scalar broadcast or splat.
    let file = common::root().join("tests/ir/kernel/swin_window.ir");
    let r = ircc(&[file.to_str().unwrap(), "--pipeline", "smartmem-gpu"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let m = ircc_core::parse_module(&r.stdout, None).unwrap();
    let main = m.lookup_symbol("main").unwrap();
    let print = |autobroadcast| {
        let options = ircc_opencl::Options { autobroadcast };
        let cl = ircc_opencl::plan(&m, main, options).unwrap().sources[0]
            .1
            .clone();
        let wgsl = ircc_wgsl::plan(&m, main, options).unwrap().sources;
        let wgsl: String = wgsl.into_iter().map(|(_, s)| s).collect();
        (cl, wgsl)
    };
    let (cl, wgsl) = print(true);
    // `vN = S * vM;` with S a lane (`v3.x`), as it is or splat by `splat`.
    let product = |l: &str, splat: &str| {
        let Some(rhs) = l.split(" = ").nth(1) else {
            return false;
        };
        let Some((a, b)) = rhs.trim_end_matches(';').split_once(" * ") else {
            return false;
        };
        let lane = a.strip_prefix(splat).map(|x| {
            if splat.is_empty() {
                x
            } else {
                x.trim_end_matches(')')
            }
        });
        lane.is_some_and(|x| x.starts_with('v') && x.contains('.') && !x.contains('('))
            && b.starts_with('v')
            && !b.contains('.')
    };
    assert!(cl.lines().any(|l| product(l, "")), "{cl}");
    assert!(wgsl.lines().any(|l| product(l, "")), "{wgsl}");
    let (cl, wgsl) = print(false);
    assert!(cl.lines().any(|l| product(l, "(float4)(")), "{cl}");
    assert!(wgsl.lines().any(|l| product(l, "vec4<f32>(")), "{wgsl}");
    assert!(!cl.lines().any(|l| product(l, "")));
    if common::opencl_available() {
        ircc_opencl::check_program(&cl, "").unwrap();
    }
}

#[test]
fn products_split_along_k_match_the_interpreter_on_opencl() {
    if !common::opencl_available() {
        eprintln!("0 passed, 0 failed, 2 skipped (no OpenCL device)");
        return;
    }
    let backend = ["--backend", "opencl", "--cl-options", "-cl-opt-disable"];
    common::assert_template_matches(&common::SPLIT_K, &backend);
}

#[test]
fn products_writing_texels_normalizing_depthwise_or_grouped_convolutions_match_the_interpreter_on_opencl()
 {
    if !common::opencl_available() {
        eprintln!("0 passed, 0 failed, 13 skipped (no OpenCL device)");
        return;
    }
    for case in [
        &common::PRODUCT_TEXELS,
        &common::NORM_PROLOGUE,
        &common::DEPTHWISE,
        &common::GROUPED_CONV,
        &common::GROUPED_BLOCKS,
    ] {
        common::assert_lowered_matches(
            case,
            &["--backend", "opencl", "--cl-options", "-cl-opt-disable"],
        );
    }
    let far =
        common::norm_far_difference(&["--backend", "opencl", "--cl-options", "-cl-opt-disable"]);
    assert!(far <= 1e-4, "{}: {far:e}", common::NORM_FAR.file);
}

#[test]
fn attention_templates_match_the_interpreter_on_opencl() {
    if !common::opencl_available() {
        eprintln!("0 passed, 0 failed, 4 skipped (no OpenCL device)");
        return;
    }
    for (case, template) in common::ATTENTION_TEMPLATES {
        let mut backend = vec!["--backend", "opencl", "--cl-options", "-cl-opt-disable"];
        backend.extend_from_slice(template);
        common::assert_template_matches(case, &backend);
    }
}

#[test]
fn integer_reductions_match_the_interpreter_on_opencl() {
    if common::opencl_available() {
        common::integer_reductions_match("opencl");
    }
}

#[test]
fn integer_products_match_the_interpreter_on_opencl() {
    if common::opencl_available() {
        common::integer_products_match("opencl");
    }
}

#[test]
fn suppression_matches_the_interpreter_on_opencl() {
    if common::opencl_available() {
        common::suppression_matches("opencl");
    }
}

#[test]
fn byte_inputs_match_the_interpreter_on_opencl() {
    if common::opencl_available() {
        common::byte_inputs_match("opencl");
    }
}

#[test]
fn vector_loads_and_stores_match_the_interpreter_on_opencl() {
    if !common::opencl_available() {
        eprintln!("0 passed, 0 failed, 1 skipped (no OpenCL device)");
        return;
    }
    let args = ["--pipeline", "none", "--backend", "opencl"];
    for case in [&common::VECTOR_LOAD, &common::VECTOR_STORE] {
        let diff = common::template_difference(case, &args);
        assert!(diff <= 1e-6, "{}: {diff:e}", case.file);
    }
}

#[test]
fn nan_and_infinities_give_onnx_answers_on_opencl() {
    if common::opencl_available() {
        common::special::special_values_match("opencl");
    }
}

/// Row kernels (held in registers, or read in a loop, or writing texels,
/// or column reductions) beside the interpreter, at f32 and f16.
#[test]
fn row_kernels_match_the_interpreter_on_opencl() {
    if !common::opencl_available() {
        eprintln!("0 passed, 0 failed, 6 skipped (no OpenCL device)");
        return;
    }
    for case in [&common::ROWS, &common::ROW_TEXELS, &common::ROW_COLUMNS] {
        common::assert_lowered_matches(
            case,
            &["--backend", "opencl", "--cl-options", "-cl-opt-disable"],
        );
    }
}
