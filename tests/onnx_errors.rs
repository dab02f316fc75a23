//! Bad ONNX input gets a clear error naming the node and operator, never a
//! panic: truncated or corrupted protobuf, missing external data, unknown
//! operators, unsupported attribute values, mismatched shapes. The importer
//! is also fuzzed with mutations of a real model.

mod common;

use common::onnx::{float_scalar, int64s, model, node, value_info, with_initializers};
use common::{ircc, root, scratch_dir};
use ircc_dialects::graph::GraphOp;
use ircc_onnx::proto::*;
use proptest::prelude::*;
use prost::Message;

fn import_error(bytes: &[u8], file: &str) -> String {
    let dir = scratch_dir(file);
    let path = dir.join(file);
    std::fs::write(&path, bytes).unwrap();
    let out = ircc(&[path.to_str().unwrap()]);
    assert_eq!(out.code, 1, "expected an error, got: {}", out.stdout);
    out.stderr
}

#[test]
fn corrupt_and_truncated_models_are_rejected() {
    let good = std::fs::read(root().join("tests/models/bert_l2_w64.onnx")).unwrap();
    let err = import_error(&good[..good.len() / 2], "truncated.onnx");
    assert!(
        err.contains("truncated.onnx: not a valid ONNX model"),
        "{err}"
    );
    let err = import_error(b"\xff\xff\xff\xff garbage", "garbage.onnx");
    assert!(err.contains("not a valid ONNX model"), "{err}");
}

#[test]
fn missing_external_data_is_named() {
    let dir = scratch_dir("no-data");
    std::fs::copy(
        root().join("tests/models/bert_l2_w64_dynamo.onnx"),
        dir.join("m.onnx"),
    )
    .unwrap();
    let out = ircc(&[dir.join("m.onnx").to_str().unwrap()]);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("cannot read external data")
            && out.stderr.contains("bert_l2_w64_dynamo.onnx.data"),
        "{}",
        out.stderr
    );
}

#[test]
fn unknown_operators_and_attributes_name_the_node() {
    let x = value_info("x", &[2, 3]);
    let err = import_error(
        &model(
            vec![node("mystery", "FooBar", &["x"], "y", vec![])],
            vec![x.clone()],
            "y",
        ),
        "unknown.onnx",
    );
    assert!(
        err.contains("node 'mystery' (FooBar): operator 'FooBar' is not supported"),
        "{err}"
    );

    let mirror = AttributeProto {
        name: "mode".into(),
        r#type: attr_type::STRING,
        s: b"mirror".to_vec(),
        ..Default::default()
    };
    let pads = NodeProto {
        input: vec!["x".into(), "p".into()],
        ..node("pad0", "Pad", &[], "y", vec![mirror])
    };
    let mut bytes = ModelProto::decode(&model(vec![pads], vec![x.clone()], "y")[..]).unwrap();
    bytes.graph.as_mut().unwrap().initializer.push(TensorProto {
        dims: vec![4],
        data_type: data_type::INT64,
        int64_data: vec![0, 1, 0, 1],
        name: "p".into(),
        ..Default::default()
    });
    let err = import_error(&bytes.encode_to_vec(), "mirror.onnx");
    assert!(
        err.contains(
            "node 'pad0' (Pad): Pad mode 'mirror' is none of constant, reflect, edge and wrap"
        ),
        "{err}"
    );

    let odd = AttributeProto {
        name: "frobnication".into(),
        r#type: attr_type::INT,
        i: 1,
        ..Default::default()
    };
    let err = import_error(
        &model(
            vec![node("r", "Relu", &["x"], "y", vec![odd])],
            vec![x],
            "y",
        ),
        "attr.onnx",
    );
    assert!(
        err.contains("node 'r' (Relu): attribute 'frobnication' is not supported"),
        "{err}"
    );
}

#[test]
fn shape_mismatches_and_symbolic_dimensions_are_explained() {
    let err = import_error(
        &model(
            vec![node("mm", "MatMul", &["a", "b"], "y", vec![])],
            vec![value_info("a", &[2, 3]), value_info("b", &[4, 5])],
            "y",
        ),
        "matmul.onnx",
    );
    assert!(
        err.contains("node 'mm' (MatMul): contracting dimensions differ"),
        "{err}"
    );

    let mut sym = value_info("x", &[1, 3]);
    sym.r#type
        .as_mut()
        .unwrap()
        .tensor_type
        .as_mut()
        .unwrap()
        .shape
        .as_mut()
        .unwrap()
        .dim[0] = Dimension {
        dim_value: None,
        dim_param: Some("batch".into()),
    };
    let bytes = model(vec![node("r", "Relu", &["x"], "y", vec![])], vec![sym], "y");
    let err = import_error(&bytes, "sym.onnx");
    assert!(
        err.contains(
            "input 'x' has the symbolic dimension 'batch': give its shape with --input-shape x=..."
        ),
        "{err}"
    );
    let dir = scratch_dir("sym-ok");
    std::fs::write(dir.join("sym.onnx"), &bytes).unwrap();
    let out = ircc(&[
        dir.join("sym.onnx").to_str().unwrap(),
        "--input-shape",
        "x=4x3",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout
            .contains("graph.relu %x : tensor<4x3xf32> -> tensor<4x3xf32>"),
        "{}",
        out.stdout
    );
}

#[test]
fn import_writes_ir_and_weights_that_run() {
    let dir = scratch_dir("import");
    let ir = dir.join("vit.ir");
    let out = ircc(&[
        "import",
        root()
            .join("tests/models/vit_l4_w64_dynamo.onnx")
            .to_str()
            .unwrap(),
        "-o",
        ir.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(dir.join("vit.safetensors").exists());
    let text = std::fs::read_to_string(&ir).unwrap();
    assert!(
        text.starts_with("module attributes {ircc.weights = \"vit.safetensors\"}"),
        "{}",
        &text[..100]
    );
    let run = ircc(&[
        "run",
        ir.to_str().unwrap(),
        "--input",
        root()
            .join("tests/models/vit_l4_w64_dynamo.input.npy")
            .to_str()
            .unwrap(),
        "--output-dir",
        dir.join("out").to_str().unwrap(),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let got = std::fs::read_dir(dir.join("out"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let got = ircc_reference::read_npy(&got).unwrap().to_f64();
    let want = ircc_reference::read_npy(&root().join("tests/models/vit_l4_w64_dynamo.output.npy"))
        .unwrap()
        .to_f64();
    let diff = got
        .iter()
        .zip(want.iter())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(diff < 1e-4, "{diff}");
    let stats = ircc(&[
        "stats",
        root()
            .join("tests/models/vit_l4_w64_dynamo.onnx")
            .to_str()
            .unwrap(),
        "--pipeline",
        "none",
        "--json",
    ]);
    assert!(
        stats.stdout.contains("\"graph_ops\":180"),
        "{}",
        stats.stdout
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Byte flips, truncations and splices of a real model never panic.
    #[test]
    fn mutated_models_never_panic(edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6)) {
        let mut bytes = std::fs::read(root().join("tests/models/bert_l2_w64.onnx")).unwrap();
        for (at, byte, kind) in edits {
            let i = at.index(bytes.len());
            match kind {
                0 => bytes[i] = byte,
                1 => bytes.truncate(i.max(1)),
                _ => { let piece = bytes[i..(i + 16).min(bytes.len())].to_vec(); bytes.splice(i..i, piece); }
            }
        }
        let registry = ircc_dialects::registry().unwrap();
        let _ = ircc_onnx::import_model(&bytes, &root().join("tests/models"), &registry, &Default::default());
    }
}

/// `--input-shape` may only fill in what the model leaves open: a static
/// dimension it contradicts, another rank or an unknown input name is an
/// error, and so are two inputs of one name and an input with no shape.
#[test]
fn input_shapes_and_duplicate_inputs_are_checked() {
    let relu = || vec![node("r", "Relu", &["x"], "y", vec![])];
    let dir = scratch_dir("input-shape");
    let path = dir.join("m.onnx");
    std::fs::write(&path, model(relu(), vec![value_info("x", &[2, 3])], "y")).unwrap();
    let p = path.to_str().unwrap();
    for (shape, want) in [
        ("x=4x3", "fixes it at 2"),
        ("x=2x3x1", "rank 3, but the model declares rank 2"),
        ("z=2x3", "'z', which is not an input"),
    ] {
        let r = ircc(&[p, "--input-shape", shape]);
        assert_eq!(r.code, 1, "{shape}: {}", r.stdout);
        assert!(r.stderr.contains(want), "{shape}: {}", r.stderr);
    }
    assert_eq!(ircc(&[p, "--input-shape", "x=2x3"]).code, 0);
    let twice = model(
        relu(),
        vec![value_info("x", &[2, 3]), value_info("x", &[2, 3])],
        "y",
    );
    assert!(import_error(&twice, "twice.onnx").contains("two inputs named 'x'"));
    let mut shapeless = value_info("x", &[]);
    if let Some(t) = shapeless
        .r#type
        .as_mut()
        .and_then(|t| t.tensor_type.as_mut())
    {
        t.shape = None;
    }
    let err = import_error(&model(relu(), vec![shapeless], "y"), "shapeless.onnx");
    assert!(err.contains("input 'x' has no shape"), "{err}");
}

/// Attributes of another type than the operator takes are refused, naming
/// the node and the attribute (they used to read as 0).
#[test]
fn attributes_of_the_wrong_type_are_refused() {
    let x = value_info("x", &[2, 3]);
    let float_axis = AttributeProto {
        name: "axis".into(),
        r#type: attr_type::FLOAT,
        f: -1.0,
        ..Default::default()
    };
    let err = import_error(
        &model(
            vec![node("sm", "Softmax", &["x"], "y", vec![float_axis])],
            vec![x.clone()],
            "y",
        ),
        "axis.onnx",
    );
    assert!(
        err.contains(
            "node 'sm' (Softmax): attribute 'axis' is a float, but Softmax takes an integer"
        ),
        "{err}"
    );
    let int_alpha = AttributeProto {
        name: "alpha".into(),
        r#type: attr_type::INT,
        i: 1,
        ..Default::default()
    };
    let err = import_error(
        &model(
            vec![node("lr", "LeakyRelu", &["x"], "y", vec![int_alpha])],
            vec![x],
            "y",
        ),
        "alpha.onnx",
    );
    assert!(err.contains("attribute 'alpha' is an integer"), "{err}");
}

/// Two nodes writing one name, or a node writing over an input, are
/// refused as ONNX's checker refuses them (the last one used to win).
#[test]
fn duplicate_definitions_are_refused() {
    let x = value_info("x", &[2, 3]);
    let twice = vec![
        node("a", "Relu", &["x"], "y", vec![]),
        node("b", "Neg", &["x"], "y", vec![]),
    ];
    let err = import_error(&model(twice, vec![x.clone()], "y"), "twice.onnx");
    assert!(
        err.contains("node 'b' (Neg): output 'y' is already defined"),
        "{err}"
    );
    let shadow = vec![node("c", "Relu", &["x"], "x", vec![])];
    let err = import_error(&model(shadow, vec![x], "x"), "shadow.onnx");
    assert!(err.contains("output 'x' is already defined"), "{err}");
}

/// External data must be a regular file inside the model's folder: a link
/// out of it, or a FIFO (which used to block the import forever), is
/// refused.
#[cfg(unix)]
#[test]
fn external_data_stays_in_the_model_folder() {
    for kind in ["link", "fifo"] {
        let dir = scratch_dir("external");
        let model = dir.join("m.onnx");
        std::fs::copy(root().join("tests/models/bert_l2_w64_dynamo.onnx"), &model).unwrap();
        let data = dir.join("bert_l2_w64_dynamo.onnx.data");
        if kind == "link" {
            std::os::unix::fs::symlink("/etc/hostname", &data).unwrap();
        } else {
            let made = std::process::Command::new("mkfifo")
                .arg(&data)
                .status()
                .unwrap();
            assert!(made.success());
        }
        let out = ircc(&[model.to_str().unwrap()]);
        assert_eq!(out.code, 1, "{kind}");
        let want = if kind == "link" {
            "outside the folder"
        } else {
            "not a regular file"
        };
        assert!(out.stderr.contains(want), "{kind}: {}", out.stderr);
    }
}

/// Shape folding checks every size before allocating: these used to ask
/// for terabytes (or overflow a capacity) and abort. A constant too large
/// to fold stays an op, a `ConstantOfShape` of any size is a splat, and
/// the rest are refused naming the node.
#[test]
fn shape_folding_checks_sizes_before_allocating() {
    let dir = scratch_dir("folding");
    let run = |name: &str, bytes: Vec<u8>| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        ircc(&[path.to_str().unwrap()])
    };
    let fill = |shape: &[i64]| {
        with_initializers(
            vec![node("fill", "ConstantOfShape", &["s"], "y", vec![])],
            vec![int64s("s", shape)],
        )
    };
    let big = run("fill.onnx", fill(&[65536, 65536]));
    assert_eq!(big.code, 0, "{}", big.stderr);
    assert!(
        big.stdout.contains("dense<0.0> : tensor<65536x65536xf32>"),
        "{}",
        big.stdout
    );
    let err = run("fill_huge.onnx", fill(&[65536, 65536, 65536])).stderr;
    assert!(
        err.contains(
            "node 'fill' (ConstantOfShape): shape [65536, 65536, 65536] has more than the supported"
        ),
        "{err}"
    );
    let err = run("fill_negative.onnx", fill(&[4, -1])).stderr;
    assert!(err.contains("has the extent -1"), "{err}");

    let range = |limit: f32| {
        with_initializers(
            vec![node("r", "Range", &["a", "b", "c"], "y", vec![])],
            vec![
                float_scalar("a", 0.0),
                float_scalar("b", limit),
                float_scalar("c", 1.0),
            ],
        )
    };
    let err = run("range_inf.onnx", range(f32::INFINITY)).stderr;
    assert!(
        err.contains("node 'r' (Range): Range from 0 to inf by 1 has no finite length"),
        "{err}"
    );
    let err = run("range_huge.onnx", range(1e18)).stderr;
    assert!(
        err.contains("more than the 16777216 a constant folded at import may have"),
        "{err}"
    );

    let expand = |shape: &[i64]| {
        with_initializers(
            vec![node("e", "Expand", &["a", "s"], "y", vec![])],
            vec![float_scalar("a", 1.0), int64s("s", shape)],
        )
    };
    let kept = run("expand.onnx", expand(&[32768, 32768]));
    assert_eq!(kept.code, 0, "{}", kept.stderr);
    assert!(
        kept.stdout.contains(GraphOp::Expand.name()),
        "{}",
        kept.stdout
    );
    // A product of constants whose result fits the budget but whose work
    // (2^31 multiply-adds) does not stays a matmul instead of folding.
    let matrix = |name: &str, dims: [i64; 2]| TensorProto {
        dims: dims.to_vec(),
        data_type: data_type::FLOAT,
        float_data: vec![1.0; (dims[0] * dims[1]) as usize],
        name: name.into(),
        ..Default::default()
    };
    let product = run(
        "matmul.onnx",
        with_initializers(
            vec![node("mm", "MatMul", &["a", "b"], "y", vec![])],
            vec![matrix("a", [1024, 2048]), matrix("b", [2048, 1024])],
        ),
    );
    assert_eq!(product.code, 0, "{}", product.stderr);
    assert!(
        product.stdout.contains(GraphOp::Matmul.name()),
        "{}",
        product.stdout
    );
    let err = run("expand_huge.onnx", expand(&[1 << 21, 1 << 21])).stderr;
    assert!(
        err.contains(
            "node 'e' (Expand): the result tensor<2097152x2097152xf32> has more than the supported"
        ),
        "{err}"
    );
}

/// An input that feeds an operand which must be known when compiling
/// (Reshape's shape) is bound to its value: `ircc run` binds the inputs it
/// is given, `--bind` binds one ahead of time; both say so in a remark.
/// Without a value the error names the operand; two values for one input
/// are refused.
#[test]
fn inputs_feeding_shapes_are_bound_to_their_values() {
    let reshape = vec![node("r", "Reshape", &["x", "shape"], "y", vec![])];
    let mut shape = value_info("shape", &[2]);
    if let Some(t) = shape.r#type.as_mut().and_then(|t| t.tensor_type.as_mut()) {
        t.elem_type = data_type::INT64;
    }
    let dir = scratch_dir("bind");
    let path = dir.join("m.onnx");
    std::fs::write(
        &path,
        model(reshape, vec![value_info("x", &[2, 3]), shape], "y"),
    )
    .unwrap();
    let npy = |name: &str, t: ircc_core::Tensor| {
        let p = dir.join(name);
        ircc_reference::write_npy(&p, &t).unwrap();
        p.to_str().unwrap().to_string()
    };
    let x = npy(
        "x.npy",
        ircc_core::Tensor::float(
            ircc_core::ElemType::F32,
            ndarray::ArrayD::from_shape_vec(
                ndarray::IxDyn(&[2, 3]),
                (0..6).map(f64::from).collect(),
            )
            .unwrap(),
        ),
    );
    let ints = |v: Vec<i64>| {
        ircc_core::Tensor::int(
            ircc_core::ElemType::I64,
            ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[v.len()]), v).unwrap(),
        )
    };
    let s32 = npy("s32.npy", ints(vec![3, 2]));
    let s61 = npy("s61.npy", ints(vec![6, 1]));
    let p = path.to_str().unwrap();
    // Compiling alone cannot know the shape.
    let r = ircc(&[p]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stderr.contains("must be a constant"), "{}", r.stderr);
    // Running binds the inputs given, by name or in order.
    for inputs in [
        [format!("x={x}"), format!("shape={s32}")],
        [x.clone(), s32.clone()],
    ] {
        let out = dir.join("out");
        let mut args = vec!["run", p, "--output-dir", out.to_str().unwrap()];
        for i in &inputs {
            args.extend(["--input", i.as_str()]);
        }
        let r = ircc(&args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(
            r.stderr.contains(
                "remark: input 'shape' is bound to the value given for it: it feeds Reshape's shape"
            ),
            "{}",
            r.stderr
        );
        let y = ircc_reference::read_npy(&out.join("y.npy")).unwrap();
        assert_eq!(y.shape(), &[3, 2]);
    }
    // Compiling ahead of time with --bind specializes the model.
    let r = ircc(&[p, "--bind", &format!("shape={s61}")]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("tensor<6x1xf32>"), "{}", r.stdout);
    assert!(r.stderr.contains("remark: input 'shape'"), "{}", r.stderr);
    // One input, two values.
    let out = dir.join("out2");
    let r = ircc(&[
        "run",
        p,
        "--bind",
        &format!("shape={s61}"),
        "--input",
        &format!("x={x}"),
        "--input",
        &format!("shape={s32}"),
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stderr.contains("another value"), "{}", r.stderr);
    let r = ircc(&[
        "run",
        p,
        "--input",
        &format!("x={x}"),
        "--input",
        &format!("shape={s32}"),
        "--input",
        &format!("shape={s61}"),
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        r.stderr.contains("input 'shape' is given twice"),
        "{}",
        r.stderr
    );
    let floats = npy(
        "floats.npy",
        ircc_core::Tensor::float(
            ircc_core::ElemType::F32,
            ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[2]), vec![6.0, 1.0]).unwrap(),
        ),
    );
    for (bind, says) in [
        ("shape".to_string(), "must be NAME=FILE.npy"),
        (
            "shape=/nonexistent.npy".to_string(),
            "--bind shape=/nonexistent.npy: cannot read /nonexistent.npy",
        ),
        (
            format!("shap={s61}"),
            "a value is bound to 'shap', which is not an input",
        ),
        (
            format!("shape={floats}"),
            "input 'shape' is tensor<2xi64>, but the value bound to it is tensor<2xf32>",
        ),
    ] {
        let bind = bind.as_str();
        let r = ircc(&[p, "--bind", bind]);
        assert_eq!(r.code, 1, "{bind}: {}", r.stdout);
        assert!(r.stderr.contains(says), "{bind}: {}", r.stderr);
    }
}

/// A Loop node running `body` at most `trips` times over the carried `v`.
fn looped(name: &str, trips: &str, v: &str, out: &str, body: GraphProto) -> NodeProto {
    node(
        name,
        "Loop",
        &[trips, "", v],
        out,
        vec![AttributeProto {
            name: "body".into(),
            r#type: attr_type::GRAPH,
            g: Some(body),
            ..Default::default()
        }],
    )
}

/// A Loop body over (i, cond, v) made of `nodes`, ending in (cond, `v_out`).
fn loop_body(nodes: Vec<NodeProto>, v_out: &str) -> GraphProto {
    GraphProto {
        node: nodes,
        name: "body".into(),
        initializer: vec![],
        input: vec![
            value_info("i", &[]),
            value_info("c", &[]),
            value_info("v", &[]),
        ],
        output: vec![value_info("c", &[]), value_info(v_out, &[])],
    }
}

#[test]
fn unrolling_is_bounded() {
    let dir = scratch_dir("unroll");
    let run = |name: &str, bytes: Vec<u8>| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        ircc(&[path.to_str().unwrap()])
    };
    let identity = || loop_body(vec![node("copy", "Identity", &["v"], "w", vec![])], "w");
    let short = with_initializers(
        vec![looped("l", "m", "v0", "y", identity())],
        vec![int64s("m", &[3]), float_scalar("v0", 2.0)],
    );
    let ok = run("short.onnx", short);
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    let long = with_initializers(
        vec![looped("l", "m", "v0", "y", identity())],
        vec![int64s("m", &[1_000_000_000]), float_scalar("v0", 2.0)],
    );
    let err = run("long.onnx", long).stderr;
    assert!(
        err.contains("node 'l' (Loop): a Loop of more than 4096 iterations is not unrolled"),
        "{err}"
    );
    // 4000 x 4000 iterations: each fits, together they would not.
    let inner = looped("inner", "m", "v", "w", identity());
    let nested = with_initializers(
        vec![looped("outer", "m", "v0", "y", loop_body(vec![inner], "w"))],
        vec![int64s("m", &[4000]), float_scalar("v0", 2.0)],
    );
    let err = run("nested.onnx", nested).stderr;
    assert!(
        err.contains("unrolling adds more than 1048576 nodes"),
        "{err}"
    );
}

/// ONNX packs 4- and 2-bit values, a byte (or an int32_data entry holding
/// one) for several: a byte count that does not match the shape, or an
/// int32_data entry that is not a byte, is refused by name.
#[test]
fn packed_tensors_are_checked() {
    let packed = |name: &str, data_type, dims: &[i64], raw: Vec<u8>, ints: Vec<i32>| TensorProto {
        dims: dims.to_vec(),
        data_type,
        raw_data: raw.into(),
        int32_data: ints,
        name: name.into(),
        ..Default::default()
    };
    let to_float = AttributeProto {
        name: "to".into(),
        r#type: attr_type::INT,
        i: i64::from(data_type::FLOAT),
        ..Default::default()
    };
    let cast = || vec![node("c", "Cast", &["w"], "y", vec![to_float.clone()])];
    let err = import_error(
        &with_initializers(
            cast(),
            vec![packed("w", data_type::INT4, &[5], vec![0x21, 0x43], vec![])],
        ),
        "short_int4.onnx",
    );
    assert!(
        err.contains("holds 2 bytes but its shape [5] needs 3"),
        "{err}"
    );
    let err = import_error(
        &with_initializers(
            cast(),
            vec![packed(
                "w",
                data_type::UINT2,
                &[5],
                vec![],
                vec![0x1B, 0x183],
            )],
        ),
        "wide_uint2.onnx",
    );
    assert!(
        err.contains("int32_data entry 387 is not a packed byte"),
        "{err}"
    );
}

/// A value computed from bound inputs and constants alone is known too:
/// a Reshape's shape that is the Abs of an input is bound through it, and
/// the remark names the input.
#[test]
fn values_computed_from_bound_inputs_are_known() {
    let nodes = vec![
        node("a", "Abs", &["shape"], "d", vec![]),
        node("r", "Reshape", &["x", "d"], "y", vec![]),
    ];
    let mut shape = value_info("shape", &[2]);
    if let Some(t) = shape.r#type.as_mut().and_then(|t| t.tensor_type.as_mut()) {
        t.elem_type = data_type::INT64;
    }
    let dir = scratch_dir("bind-through");
    let path = dir.join("m.onnx");
    std::fs::write(
        &path,
        model(nodes, vec![value_info("x", &[2, 3]), shape], "y"),
    )
    .unwrap();
    let x = dir.join("x.npy");
    ircc_reference::write_npy(
        &x,
        &ircc_core::Tensor::float(
            ircc_core::ElemType::F32,
            ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[2, 3]), vec![0.0; 6]).unwrap(),
        ),
    )
    .unwrap();
    let s = dir.join("s.npy");
    ircc_reference::write_npy(
        &s,
        &ircc_core::Tensor::int(
            ircc_core::ElemType::I64,
            ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[2]), vec![-3, -2]).unwrap(),
        ),
    )
    .unwrap();
    let out = dir.join("out");
    let r = ircc(&[
        "run",
        path.to_str().unwrap(),
        "--input",
        &format!("x={}", x.display()),
        "--input",
        &format!("shape={}", s.display()),
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "remark: input 'shape' is bound to the value given for it: it feeds Reshape's shape"
        ),
        "{}",
        r.stderr
    );
    let y = ircc_reference::read_npy(&out.join("y.npy")).unwrap();
    assert_eq!(y.shape(), &[3, 2]);
}
