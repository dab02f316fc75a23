//! The wider model suite of `tests/models/` (`scripts/export_models.py
//! --suite wider`, exported with reference outputs from onnxruntime): a
//! Llama decoder (rotary embedding, RMSNorm, grouped-query attention, gated
//! SiLU MLP), a GPT-NeoX decoder from both exporters (rotary embedding on
//! part of each head through slices and concatenations, attention and MLP
//! in parallel), a Conformer speech encoder (conv1d, GLU, depthwise conv),
//! MobileNetV3 (hard-swish, squeeze-excite), EfficientNet (depthwise, SiLU),
//! RegNetX (grouped convolutions), a detection head ending in
//! NonMaxSuppression and Whisper's log-mel front end exported from PyTorch
//! (STFT, the mel filter bank, log). Each runs through every pipeline on
//! the interpreter and on wgpu, as a user runs it (`ircc run`), and matches
//! onnxruntime: f32 within 1e-4 and f16 within 1e-2 of the output's scale.
//!
//! Where a model has an exact output too (`NAME.exact.npy`: the front end,
//! PyTorch in f64, `scripts/export_log_mel.py`), ircc is held to it within
//! those bounds, and to onnxruntime's within them plus onnxruntime's own
//! distance from it (its STFT is an f32 FFT, 1.7e-4 of the scale off).
//!
//! The detection head's output is the boxes NonMaxSuppression keeps, with
//! rows of -1 after each class's kept boxes (`graph.non_max_suppression`):
//! without them it must equal onnxruntime's exactly. Which boxes are kept
//! is not continuous in the scores, and f16 rounding reorders scores that
//! lie within it of each other, so its f16 runs are compared before the
//! NonMaxSuppression: the boxes and scores it reads, against
//! onnxruntime's (`NAME.boxes.npy`, `NAME.scores.npy`).

mod common;

use std::path::Path;

use common::{find_model, gpu_available, max_relative, run, scratch_dir};
use ircc_reference::read_npy;

const WIDER_MODELS: [&str; 9] = [
    "llama_block_w64",
    "gpt_neox_l2_w64",
    "gpt_neox_l2_w64_dynamo",
    "conformer_l2_w64",
    "mobilenet_v3_w05",
    "efficientnet_b0_w025",
    "regnet_x_w8",
    DETECTION,
    "log_mel_whisper",
];

/// The model whose output is box indices, compared exactly.
const DETECTION: &str = "detection_nms";

/// The larger difference of the detection head's boxes and scores, run
/// without its NonMaxSuppression on `backend` at f16, from onnxruntime's.
fn head_difference(path: &Path, input: &Path, pipeline: &str, backend: &str) -> f64 {
    use ircc_onnx::proto::{ModelProto, ValueInfoProto};
    use prost::Message;
    let mut m = ModelProto::decode(&std::fs::read(path).unwrap()[..]).unwrap();
    let g = m.graph.as_mut().unwrap();
    let nms = g
        .node
        .iter()
        .position(|n| n.op_type == "NonMaxSuppression")
        .expect("the detection head ends in NonMaxSuppression");
    let read = g.node.remove(nms).input;
    g.output = read[..2]
        .iter()
        .map(|name| ValueInfoProto {
            name: name.clone(),
            ..Default::default()
        })
        .collect();
    let scratch = scratch_dir("head");
    let head = scratch.join("head.onnx");
    std::fs::write(&head, m.encode_to_vec()).unwrap();
    let out = scratch.join("o");
    let args = [
        "--pipeline",
        pipeline,
        "--backend",
        backend,
        "--precision",
        "f16",
    ];
    let r = run(&head, input, &out, &args);
    assert_eq!(r.code, 0, "{pipeline} {backend}: {}", r.stderr);
    read[..2]
        .iter()
        .map(|name| {
            max_relative(
                &out.join(format!("{name}.npy")),
                &path.with_extension(format!("{name}.npy")),
            )
        })
        .fold(0.0, f64::max)
}

/// How far `got` is from `want`: for the detection head, 0 where its rows
/// other than -1 equal onnxruntime's, else infinity; for a model with an
/// exact output beside onnxruntime's, the larger of its distance from the
/// exact one and its distance from onnxruntime's less onnxruntime's own.
fn difference(name: &str, got: &Path, want: &Path) -> f64 {
    let exact = want.with_extension("").with_extension("exact.npy");
    if exact.exists() {
        let off = max_relative(want, &exact);
        return max_relative(got, &exact).max(max_relative(got, want) - off);
    }
    if name != DETECTION {
        return max_relative(got, want);
    }
    let (got, want) = (read_npy(got).unwrap(), read_npy(want).unwrap());
    let kept: Vec<i64> = got
        .to_f64()
        .rows()
        .into_iter()
        .filter(|r| r[0] >= 0.0)
        .flat_map(|r| r.iter().map(|&v| v as i64).collect::<Vec<_>>())
        .collect();
    let want: Vec<i64> = want.to_f64().iter().map(|&v| v as i64).collect();
    if kept == want { 0.0 } else { f64::INFINITY }
}

const PIPELINES: [&str; 3] = ["none", "dnnfusion", "smartmem"];

#[test]
fn wider_suite_matches_onnxruntime_on_every_pipeline() {
    let gpu = gpu_available();
    // The interpreter computes in the graph's own types (f32).
    let mut backends = vec![("reference", None, 1e-4)];
    if gpu {
        backends.extend([("wgpu", Some("f32"), 1e-4), ("wgpu", Some("f16"), 1e-2)]);
    }
    let (mut passed, mut failed, mut skipped) = (0, Vec::new(), 0);
    for name in WIDER_MODELS {
        let path =
            find_model(name).unwrap_or_else(|| panic!("tests/models/{name}.onnx is missing"));
        let input = path.with_extension("input.npy");
        let want = path.with_extension("output.npy");
        for pipeline in PIPELINES {
            for &(backend, precision, tolerance) in &backends {
                if name == DETECTION && precision == Some("f16") {
                    let case = format!("{name} before NonMaxSuppression {pipeline} {backend} f16");
                    let diff = head_difference(&path, &input, pipeline, backend);
                    eprintln!("{case}: {diff:.1e}");
                    if diff <= tolerance {
                        passed += 1;
                    } else {
                        failed.push(format!("{case}: {diff:e}"));
                    }
                    continue;
                }
                let scratch = scratch_dir("wider");
                let out = scratch.join("o");
                let mut args = vec!["--pipeline", pipeline, "--backend", backend];
                args.extend(precision.iter().flat_map(|&p| ["--precision", p]));
                let r = run(&path, &input, &out, &args);
                let case = format!("{name} {pipeline} {backend} {}", precision.unwrap_or("f32"));
                assert_eq!(r.code, 0, "{case}: {}", r.stderr);
                let diff = difference(name, &out.join("output.npy"), &want);
                eprintln!("{case}: {diff:.1e}");
                if diff <= tolerance {
                    passed += 1;
                } else {
                    failed.push(format!("{case}: {diff:e}"));
                }
            }
        }
    }
    if !gpu {
        skipped += WIDER_MODELS.len() * PIPELINES.len() * 2;
    }
    eprintln!(
        "{passed} passed, {} failed, {skipped} skipped",
        failed.len()
    );
    assert!(failed.is_empty(), "{failed:#?}");
}

/// `ircc check` — the interpreter before and after every pass, on random
/// inputs — passes on every model of the wider suite under `smartmem`.
#[test]
fn wider_suite_checks_through_smartmem() {
    for name in WIDER_MODELS {
        let path =
            find_model(name).unwrap_or_else(|| panic!("tests/models/{name}.onnx is missing"));
        let r = common::ircc(&[
            "check",
            path.to_str().unwrap(),
            "--pipeline",
            "smartmem",
            "--quiet",
        ]);
        assert_eq!(r.code, 0, "{name}: {}", r.stderr);
    }
}

/// Two shared networks quantized by onnxruntime's tool
/// (`scripts/export_models.py --quantize`): ConvNeXt static QDQ
/// (QuantizeLinear/DequantizeLinear around every convolution and product,
/// weights int8 per channel) and BERT dynamic (DynamicQuantizeLinear,
/// MatMulInteger). They match onnxruntime within the tolerance its own
/// quantization tests use (`check_model_correctness`: atol 0.05, rtol
/// 0.01), through every pipeline on the interpreter and on wgpu (f32).
#[test]
fn quantized_models_match_onnxruntime_within_its_tolerance() {
    let gpu = gpu_available();
    let backends: &[&str] = if gpu {
        &["reference", "wgpu"]
    } else {
        &["reference"]
    };
    let (mut passed, mut failed) = (0, Vec::new());
    for name in ["convnext_w16_qdq", "bert_l2_w64_int8"] {
        let path =
            find_model(name).unwrap_or_else(|| panic!("tests/models/{name}.onnx is missing"));
        let input = path.with_extension("input.npy");
        let want = ircc_reference::read_npy(&path.with_extension("output.npy")).unwrap();
        for pipeline in PIPELINES {
            for &backend in backends {
                let scratch = scratch_dir("quantized");
                let out = scratch.join("o");
                let r = run(
                    &path,
                    &input,
                    &out,
                    &["--pipeline", pipeline, "--backend", backend],
                );
                let case = format!("{name} {pipeline} {backend}");
                assert_eq!(r.code, 0, "{case}: {}", r.stderr);
                let got = ircc_reference::read_npy(&out.join("output.npy")).unwrap();
                assert_eq!(got.shape(), want.shape(), "{case}");
                let (g, w) = (got.to_f64(), want.to_f64());
                let worst = g
                    .iter()
                    .zip(w.iter())
                    .map(|(g, w)| (g - w).abs() - (0.05 + 0.01 * w.abs()))
                    .fold(f64::NEG_INFINITY, f64::max);
                let max_abs = g
                    .iter()
                    .zip(w.iter())
                    .map(|(g, w)| (g - w).abs())
                    .fold(0.0, f64::max);
                eprintln!("{case}: max abs difference {max_abs:.1e}");
                if worst <= 0.0 {
                    passed += 1;
                } else {
                    failed.push(format!("{case}: max abs difference {max_abs:e}"));
                }
            }
        }
    }
    let skipped = if gpu { 0 } else { 6 };
    eprintln!(
        "{passed} passed, {} failed, {skipped} skipped",
        failed.len()
    );
    assert!(failed.is_empty(), "{failed:#?}");
}

/// A QDQ model's weights stay int8 through import: each DequantizeLinear of
/// a weight is graph ops over an i8 `graph.param`, which fuse into the
/// kernel reading it, rather than an f32 copy folded at import.
#[test]
fn qdq_weights_stay_int8() {
    let path = find_model("convnext_w16_qdq").expect("tests/models/convnext_w16_qdq.onnx");
    let registry = ircc_dialects::registry().unwrap();
    let imported = ircc_onnx::import_file(&path, &registry, &Default::default()).unwrap();
    let count = |int8: bool| -> usize {
        imported
            .weights
            .iter()
            .filter(|(_, t)| (t.ty().elem == ircc_core::ElemType::I8) == int8)
            .map(|(_, t)| t.ty().num_elements() as usize)
            .sum()
    };
    let (int8, other) = (count(true), count(false));
    eprintln!("{int8} int8 weight elements, {other} others");
    assert!(
        int8 > 9 * other,
        "{int8} int8 weight elements against {other} others"
    );
}
