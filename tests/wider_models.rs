//! The wider model suite of `tests/models/` (`scripts/export_models.py
//! --suite wider`, exported with reference outputs from onnxruntime): a
//! Llama decoder (rotary embedding, RMSNorm, grouped-query attention, gated
//! SiLU MLP), a Conformer speech encoder (conv1d, GLU, depthwise conv),
//! MobileNetV3 (hard-swish, squeeze-excite), EfficientNet (depthwise, SiLU)
//! and RegNetX (grouped convolutions). Each runs through every pipeline on
//! the interpreter and on wgpu, as a user runs it (`ircc run`), and matches
//! onnxruntime: f32 within 1e-4 and f16 within 1e-2 of the output's scale.

mod common;

use common::{find_model, gpu_available, max_relative, run, scratch_dir};

const WIDER_MODELS: [&str; 5] = [
    "llama_block_w64",
    "conformer_l2_w64",
    "mobilenet_v3_w05",
    "efficientnet_b0_w025",
    "regnet_x_w8",
];

const PIPELINES: [&str; 3] = ["none", "dnnfusion", "smartmem"];

#[test]
fn wider_suite_matches_onnxruntime_on_every_pipeline() {
    let gpu = gpu_available();
    // The interpreter computes in the graph's own types (f32).
    let mut backends = vec![("reference", None, 1e-4)];
    if gpu {
        backends.extend([("wgpu", Some("f32"), 1e-4), ("wgpu", Some("f16"), 1e-2)]);
    }
    let (mut passed, mut failed) = (0, Vec::new());
    for name in WIDER_MODELS {
        let path =
            find_model(name).unwrap_or_else(|| panic!("tests/models/{name}.onnx is missing"));
        let input = path.with_extension("input.npy");
        let want = path.with_extension("output.npy");
        for pipeline in PIPELINES {
            for &(backend, precision, tolerance) in &backends {
                let scratch = scratch_dir("wider");
                let out = scratch.join("o");
                let mut args = vec!["--pipeline", pipeline, "--backend", backend];
                args.extend(precision.iter().flat_map(|&p| ["--precision", p]));
                let r = run(&path, &input, &out, &args);
                let case = format!("{name} {pipeline} {backend} {}", precision.unwrap_or("f32"));
                assert_eq!(r.code, 0, "{case}: {}", r.stderr);
                let diff = max_relative(&out.join("output.npy"), &want);
                eprintln!("{case}: {diff:.1e}");
                if diff <= tolerance {
                    passed += 1;
                } else {
                    failed.push(format!("{case}: {diff:e}"));
                }
            }
        }
    }
    let skipped = if gpu {
        0
    } else {
        WIDER_MODELS.len() * PIPELINES.len() * 2
    };
    eprintln!(
        "{passed} passed, {} failed, {skipped} skipped",
        failed.len()
    );
    assert!(failed.is_empty(), "{failed:#?}");
}
