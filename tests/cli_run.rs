//! `ircc run`: a module with weights in .safetensors, inputs and outputs
//! as .npy, and the errors a user can make.

mod common;

use common::{ircc, scratch_dir};
use ircc_core::{ElemType, Tensor};
use ndarray::{ArrayD, IxDyn};
use safetensors::{Dtype, tensor::TensorView};

const MODEL: &str = r#"module attributes {ircc.weights = "w.safetensors"} {
  func.func @main(%x: tensor<1x2xf32>) -> (tensor<1x2xf32> {ircc.name = "logits"}, tensor<1x2xf32>) {
    %w = graph.param {name = "layer.weight"} : () -> tensor<2x2xf32>
    %b = graph.param {name = "layer.bias"} : () -> tensor<2xf32>
    %h = graph.matmul %x, %w : tensor<1x2xf32>, tensor<2x2xf32> -> tensor<1x2xf32>
    %y = graph.add %h, %b : tensor<1x2xf32>, tensor<2xf32> -> tensor<1x2xf32>
    %r = graph.relu %y : tensor<1x2xf32> -> tensor<1x2xf32>
    func.return %y, %r : tensor<1x2xf32>, tensor<1x2xf32>
  }
}
"#;

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn setup(name: &str) -> common::Scratch {
    let dir = scratch_dir(name);
    std::fs::write(dir.join("model.ir"), MODEL).unwrap();
    let w = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
    let b = f32_bytes(&[0.5, -100.0]);
    let tensors = vec![
        (
            "layer.weight",
            TensorView::new(Dtype::F32, vec![2, 2], &w).unwrap(),
        ),
        (
            "layer.bias",
            TensorView::new(Dtype::F32, vec![2], &b).unwrap(),
        ),
    ];
    safetensors::serialize_to_file(tensors, None, &dir.join("w.safetensors")).unwrap();
    let x = Tensor::float(
        ElemType::F32,
        ArrayD::from_shape_vec(IxDyn(&[1, 2]), vec![1.0, -1.0]).unwrap(),
    );
    ircc_reference::write_npy(&dir.join("x.npy"), &x).unwrap();
    dir
}

fn path(dir: &std::path::Path, f: &str) -> String {
    dir.join(f).display().to_string()
}

#[test]
fn run_reads_weights_and_names_outputs() {
    let dir = setup("run-ok");
    let out = ircc(&[
        "run",
        &path(&dir, "model.ir"),
        "--backend",
        "reference",
        "--input",
        &format!("x={}", path(&dir, "x.npy")),
        "--output-dir",
        &path(&dir, "out"),
        "--pipeline",
        "canonicalize",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // x·W + b = [1-3, 2-4] + [0.5, -100] = [-1.5, -102]
    let logits = ircc_reference::read_npy(&dir.join("out/logits.npy")).unwrap();
    assert_eq!(
        logits.to_f64().iter().copied().collect::<Vec<_>>(),
        vec![-1.5, -102.0]
    );
    let relu = ircc_reference::read_npy(&dir.join("out/result1.npy")).unwrap();
    assert_eq!(
        relu.to_f64().iter().copied().collect::<Vec<_>>(),
        vec![0.0, 0.0]
    );
    assert!(out.stdout.contains("logits.npy"), "{}", out.stdout);
}

#[test]
fn run_errors_are_clear() {
    let dir = setup("run-errors");
    let model = path(&dir, "model.ir");
    let outdir = path(&dir, "out");
    let run = |extra: &[&str]| {
        let mut args = vec!["run", model.as_str(), "--output-dir", outdir.as_str()];
        args.extend_from_slice(extra);
        ircc(&args)
    };

    let missing = run(&[]);
    assert_eq!(missing.code, 1);
    assert!(
        missing.stderr.contains("missing input 'x'"),
        "{}",
        missing.stderr
    );

    let unknown = run(&["--input", "y=whatever.npy"]);
    assert!(
        unknown.stderr.contains("no input named 'y' (inputs: x)"),
        "{}",
        unknown.stderr
    );

    let bad = Tensor::float(ElemType::F32, ArrayD::zeros(IxDyn(&[2, 2])));
    ircc_reference::write_npy(&dir.join("bad.npy"), &bad).unwrap();
    let shape = run(&["--input", &format!("x={}", path(&dir, "bad.npy"))]);
    assert!(
        shape
            .stderr
            .contains("bad.npy holds an array of shape [2, 2], but input 'x' is tensor<1x2xf32>"),
        "{}",
        shape.stderr
    );

    std::fs::write(
        dir.join("model.ir"),
        MODEL.replace("layer.bias", "layer.missing"),
    )
    .unwrap();
    let weight = run(&["--input", &path(&dir, "x.npy")]);
    assert_eq!(weight.code, 1);
    assert!(weight.stderr.contains("model.ir:4:10: error: while interpreting 'graph.param': weight 'layer.missing' is not in"), "{}", weight.stderr);

    std::fs::write(dir.join("w.safetensors"), b"not a safetensors file").unwrap();
    let corrupt = run(&["--input", &path(&dir, "x.npy")]);
    assert!(
        corrupt.stderr.contains("not a valid safetensors file"),
        "{}",
        corrupt.stderr
    );
}

/// A Fortran-order `.npy` (numpy's `asfortranarray`) is read in its own
/// order: the results equal those of the same values in C order (it used to
/// fail with "incompatible memory layout", blamed on the model).
#[test]
fn fortran_order_inputs_read_correctly() {
    let dir = scratch_dir("fortran");
    let mlp = common::root().join("examples/mlp.ir");
    let data = common::root().join("tests/data");
    let mut outputs = Vec::new();
    for (input, out) in [("mlp_x.npy", "c"), ("mlp_x_fortran.npy", "f")] {
        let r = ircc(&[
            "run",
            mlp.to_str().unwrap(),
            "--input",
            &format!("x={}", data.join(input).display()),
            "--output-dir",
            &path(&dir, out),
        ]);
        assert_eq!(r.code, 0, "{input}: {}", r.stderr);
        outputs.push(std::fs::read(dir.join(out).join("probs.npy")).unwrap());
    }
    assert_eq!(outputs[0], outputs[1]);
}

#[test]
fn ir_saved_or_dumped_from_an_onnx_model_runs() {
    let dir = scratch_dir("saved-ir");
    let model = common::root().join("tests/models/bert_l2_w64.onnx");
    let input = common::root().join("tests/models/bert_l2_w64.input.npy");
    let (model, input) = (model.to_str().unwrap(), input.to_str().unwrap());
    let (saved, dumps) = (path(&dir, "m.ir"), path(&dir, "dumps"));
    let out = ircc(&[
        model,
        "--pipeline",
        "smartmem",
        "-o",
        &saved,
        "--dump-dir",
        &dumps,
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(dir.join("m.safetensors").is_file());
    assert!(dir.join("dumps/weights.safetensors").is_file());
    let text = std::fs::read_to_string(dir.join("m.ir")).unwrap();
    assert!(
        text.starts_with("module attributes {ircc.target = {device = \"adreno740\"")
            && text.contains("ircc.weights = \"m.safetensors\"}"),
        "{text}"
    );
    let last_dump = common::files_under(&dir.join("dumps"))
        .into_iter()
        .rfind(|f| f.ends_with(".ir"))
        .expect("dumped IR");
    let last_dump = path(&dir, &format!("dumps/{last_dump}"));
    // The saved IR, the last dump and the model under the same pipeline
    // give one output.
    let mut outputs = Vec::new();
    let runs: [&[&str]; 3] = [&[&saved], &[&last_dump], &[model, "--pipeline", "smartmem"]];
    for (i, file) in runs.iter().enumerate() {
        let out_dir = path(&dir, &format!("out{i}"));
        let mut args = vec!["run", "--input", input, "--output-dir", &out_dir];
        args.extend_from_slice(file);
        let out = ircc(&args);
        assert_eq!(out.code, 0, "{file:?}: {}", out.stderr);
        outputs.push(std::fs::read(dir.join(format!("out{i}/output.npy"))).unwrap());
    }
    assert!(outputs[0] == outputs[2] && outputs[1] == outputs[2]);
    // Printed to stdout, the IR names no weights file, only its target.
    let out = ircc(&[model, "--pipeline", "smartmem"]);
    let header = out.stdout.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("module attributes {ircc.target = "),
        "{header}"
    );
    assert!(!header.contains("ircc.weights"), "{header}");
}

/// IR that names a weights file, saved in another folder or dumped, takes
/// a copy of its weights along, so it still runs.
#[test]
fn ir_with_a_weights_file_saved_elsewhere_runs() {
    let dir = setup("saved-elsewhere");
    std::fs::create_dir(dir.join("sub")).unwrap();
    let out = ircc(&[
        &path(&dir, "model.ir"),
        "--pipeline",
        "canonicalize",
        "-o",
        &path(&dir, "sub/out.ir"),
        "--dump-dir",
        &path(&dir, "dumps"),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    for (i, ir) in ["sub/out.ir", "dumps/01-canonicalize.ir"]
        .iter()
        .enumerate()
    {
        let out_dir = path(&dir, &format!("out{i}"));
        let out = ircc(&[
            "run",
            &path(&dir, ir),
            "--input",
            &format!("x={}", path(&dir, "x.npy")),
            "--output-dir",
            &out_dir,
        ]);
        assert_eq!(out.code, 0, "{ir}: {}", out.stderr);
        let logits = ircc_reference::read_npy(&dir.join(format!("out{i}/logits.npy"))).unwrap();
        assert_eq!(
            logits.to_f64().iter().copied().collect::<Vec<_>>(),
            vec![-1.5, -102.0]
        );
    }
}

/// A `.npy` file as `np.save` writes it: the header's dict padded to a
/// multiple of 64 bytes, then the data.
fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let padded = (10 + h.len() + 1).div_ceil(64) * 64;
    h.push_str(&" ".repeat(padded - 10 - h.len() - 1));
    h.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend((h.len() as u16).to_le_bytes());
    b.extend(h.as_bytes());
    b.extend(data);
    b
}

/// The descr and data of a `.npy` file ircc wrote.
fn npy_payload(path: &std::path::Path) -> (String, Vec<u8>) {
    let b = std::fs::read(path).unwrap();
    let len = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = String::from_utf8_lossy(&b[10..10 + len]).into_owned();
    let descr = header.split('\'').nth(3).unwrap().to_string();
    (descr, b[10 + len..].to_vec())
}

/// Inputs and outputs in the model's own types: f16 as numpy's float16,
/// bfloat16 and int4 in the form ml_dtypes saves (untyped bytes read as
/// the input's declared type), several inputs from one safetensors file,
/// and outputs written back in those types, as .npy or safetensors.
#[test]
fn inputs_and_outputs_keep_their_types() {
    let dir = scratch_dir("run-typed");
    let model = r#"func.func @main(%h: tensor<3xf16>, %b: tensor<3xbf16>, %q: tensor<3xi4>) -> (tensor<3xf16> {ircc.name = "h2"}, tensor<3xbf16> {ircc.name = "b2"}, tensor<3xi4> {ircc.name = "q2"}) {
  %h2 = graph.add %h, %h : tensor<3xf16>, tensor<3xf16> -> tensor<3xf16>
  %b2 = graph.neg %b : tensor<3xbf16> -> tensor<3xbf16>
  %q2 = graph.neg %q : tensor<3xi4> -> tensor<3xi4>
  func.return %h2, %b2, %q2 : tensor<3xf16>, tensor<3xbf16>, tensor<3xi4>
}
"#;
    std::fs::write(dir.join("m.ir"), model).unwrap();
    let f16: Vec<u8> = [1.5f32, -2.0, 0.25]
        .iter()
        .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
        .collect();
    let bf16: Vec<u8> = [1.0f32, -1.0, 0.5]
        .iter()
        .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
        .collect();
    // ml_dtypes' int4: the value in the low four bits (-1 is 0x0F).
    let int4 = [0x01u8, 0x0F, 0x07];
    std::fs::write(dir.join("h.npy"), npy("<f2", "(3,)", &f16)).unwrap();
    std::fs::write(dir.join("b.npy"), npy("<V2", "(3,)", &bf16)).unwrap();
    std::fs::write(dir.join("q.npy"), npy("<V1", "(3,)", &int4)).unwrap();
    let m = path(&dir, "m.ir");
    let out = path(&dir, "out");
    let r = ircc(&[
        "run",
        &m,
        "--input",
        &format!("h={}", path(&dir, "h.npy")),
        "--input",
        &format!("b={}", path(&dir, "b.npy")),
        "--input",
        &format!("q={}", path(&dir, "q.npy")),
        "--output-dir",
        &out,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (descr, data) = npy_payload(&dir.join("out/h2.npy"));
    assert_eq!(descr, "<f2");
    let want: Vec<u8> = [3.0f32, -4.0, 0.5]
        .iter()
        .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
        .collect();
    assert_eq!(data, want);
    let (descr, data) = npy_payload(&dir.join("out/b2.npy"));
    assert_eq!(descr, "<V2");
    let want: Vec<u8> = [-1.0f32, 1.0, -0.5]
        .iter()
        .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
        .collect();
    assert_eq!(data, want);
    let (descr, data) = npy_payload(&dir.join("out/q2.npy"));
    assert_eq!(descr, "<V1");
    assert_eq!(data, vec![0x0F, 0x01, 0x09]); // -1, 1, -7

    // The same inputs from one safetensors file, by name; the outputs
    // into one safetensors file.
    let views = vec![
        ("h", TensorView::new(Dtype::F16, vec![3], &f16).unwrap()),
        ("b", TensorView::new(Dtype::BF16, vec![3], &bf16).unwrap()),
        (
            "q",
            TensorView::new(Dtype::I8, vec![3], &[1u8, 0xFF, 7]).unwrap(),
        ),
    ];
    safetensors::serialize_to_file(views, None, &dir.join("in.safetensors")).unwrap();
    let r = ircc(&[
        "run",
        &m,
        "--input",
        &path(&dir, "in.safetensors"),
        "--output-dir",
        &path(&dir, "out2"),
        "--output-format",
        "safetensors",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let bytes = std::fs::read(dir.join("out2/outputs.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.tensor("h2").unwrap().dtype(), Dtype::F16);
    assert_eq!(st.tensor("b2").unwrap().dtype(), Dtype::BF16);
    assert_eq!(st.tensor("q2").unwrap().data(), &[0xFF, 1, 0xF9]);

    // A file of another type or shape is named, not converted.
    std::fs::write(dir.join("f32.npy"), npy("<f4", "(3,)", &[0; 12])).unwrap();
    std::fs::write(dir.join("long.npy"), npy("<f2", "(4,)", &[0; 8])).unwrap();
    for (spec, says) in [
        (
            "h=f32.npy",
            "f32.npy holds f32 values, but input 'h' is tensor<3xf16>",
        ),
        (
            "h=long.npy",
            "long.npy holds an array of shape [4], but input 'h' is tensor<3xf16>",
        ),
        ("b=f32.npy", "ml_dtypes.bfloat16"),
        ("h=q.npy", "holds untyped V1 values"),
    ] {
        let (name, file) = spec.split_once('=').unwrap();
        let r = ircc(&[
            "run",
            &m,
            "--input",
            &format!("{name}={}", path(&dir, file)),
            "--input",
            &format!("b={}", path(&dir, "b.npy")),
            "--input",
            &format!("q={}", path(&dir, "q.npy")),
            "--output-dir",
            &out,
        ]);
        assert_eq!(r.code, 1, "{spec}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{spec}: {}", r.stderr);
    }
}
