//! The reference interpreter against values computed independently: the
//! examples of ONNX's operator documentation, and naive loop nests.

mod common;

use ircc_core::interp::NoWeights;
use ircc_core::{ElemType, Tensor, parse_module};
use ndarray::{ArrayD, IxDyn};

fn tensor(shape: &[usize], values: Vec<f64>) -> Tensor {
    Tensor::float(
        ElemType::F32,
        ArrayD::from_shape_vec(IxDyn(shape), values).unwrap(),
    )
}

/// Deterministic pseudo-random values in [-1, 1).
fn random(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let values = (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect();
    tensor(shape, values)
}

fn eval(ir: &str, inputs: Vec<Tensor>) -> Vec<Tensor> {
    let registry = ircc_dialects::registry().unwrap();
    let module = parse_module(ir, Some("test.ir")).unwrap_or_else(|e| panic!("{e}"));
    ircc_core::verify::verify(&module, &registry, Default::default())
        .unwrap_or_else(|e| panic!("{e}"));
    ircc_reference::run_function(&module, &registry, "main", inputs, &mut NoWeights)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn assert_close(got: &Tensor, want: &[f64], tol: f64) {
    let got = got.to_f64();
    assert_eq!(got.len(), want.len(), "element count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: got {g}, want {w}"
        );
    }
}

#[test]
fn every_spec_op_has_its_hooks_and_a_shape_filetest() {
    let registry = ircc_dialects::registry().expect("specs and hooks agree");
    let mut filetests = String::new();
    for f in common::ir_files("tests/ir/graph") {
        filetests += &std::fs::read_to_string(f).unwrap();
    }
    for (name, def) in &registry.ops {
        if !name.starts_with("graph.") {
            continue;
        }
        // Terminators are not interpreted: the block that ends in one is.
        assert!(
            def.hooks.interpret.is_some() || def.spec.results.is_empty(),
            "{name} cannot be interpreted"
        );
        assert!(
            def.hooks.infer.is_some() || def.hooks.verify.is_some(),
            "{name} has no shape check"
        );
        assert!(
            filetests.contains(&format!("{name} ")),
            "{name} has no shape-inference case in tests/ir/graph"
        );
    }
    // A spec op without hooks, or hooks without a spec op, is refused.
    let mut r = ircc_core::Registry::new();
    let spec = "dialect = \"t\"\nsummary = \"s\"\n[[op]]\nname = \"a\"\nsummary = \"a\"\n";
    let err = r.add_dialect(spec, &[]).unwrap_err();
    assert!(
        err.message
            .contains("'t.a' is declared in the spec but has no hooks"),
        "{err}"
    );
    let err = r
        .add_dialect(
            spec,
            &[("t.a", Default::default()), ("t.b", Default::default())],
        )
        .unwrap_err();
    assert!(
        err.message.contains("'t.b' has hooks but no spec entry"),
        "{err}"
    );
}

#[test]
fn conv_matches_a_direct_loop_nest() {
    struct Case {
        x: &'static [usize],
        w: &'static [usize],
        group: usize,
        strides: [usize; 2],
        pads: [usize; 4],
        dilations: [usize; 2],
    }
    let case = |x, w, group, strides, pads, dilations| Case {
        x,
        w,
        group,
        strides,
        pads,
        dilations,
    };
    let cases = [
        case(
            &[1, 3, 7, 6],
            &[4, 3, 3, 3],
            1,
            [1, 1],
            [1, 1, 1, 1],
            [1, 1],
        ),
        case(
            &[2, 4, 9, 9],
            &[6, 2, 3, 2],
            2,
            [2, 1],
            [0, 1, 2, 0],
            [1, 2],
        ),
        case(
            &[1, 4, 8, 8],
            &[4, 1, 3, 3],
            4,
            [2, 2],
            [1, 1, 1, 1],
            [2, 2],
        ),
        case(
            &[1, 2, 5, 5],
            &[3, 2, 1, 1],
            1,
            [1, 1],
            [0, 0, 0, 0],
            [1, 1],
        ),
    ];
    for (
        k,
        Case {
            x: xs,
            w: ws,
            group: g,
            strides: st,
            pads: pd,
            dilations: dl,
        },
    ) in cases.into_iter().enumerate()
    {
        let x = random(xs, 2 * k as u64);
        let w = random(ws, 2 * k as u64 + 1);
        let oh = (xs[2] + pd[0] + pd[2] - ((ws[2] - 1) * dl[0] + 1)) / st[0] + 1;
        let ow = (xs[3] + pd[1] + pd[3] - ((ws[3] - 1) * dl[1] + 1)) / st[1] + 1;
        let (xa, wa) = (x.to_f64(), w.to_f64());
        let (cg, mg) = (xs[1] / g, ws[0] / g);
        let mut want = vec![0.0; xs[0] * ws[0] * oh * ow];
        for n in 0..xs[0] {
            for m in 0..ws[0] {
                for i in 0..oh {
                    for j in 0..ow {
                        let mut acc = 0.0;
                        for c in 0..cg {
                            for u in 0..ws[2] {
                                for v in 0..ws[3] {
                                    let y = (i * st[0] + u * dl[0]) as i64 - pd[0] as i64;
                                    let z = (j * st[1] + v * dl[1]) as i64 - pd[1] as i64;
                                    if y >= 0
                                        && z >= 0
                                        && (y as usize) < xs[2]
                                        && (z as usize) < xs[3]
                                    {
                                        acc += xa[[n, (m / mg) * cg + c, y as usize, z as usize]]
                                            * wa[[m, c, u, v]];
                                    }
                                }
                            }
                        }
                        want[((n * ws[0] + m) * oh + i) * ow + j] = acc;
                    }
                }
            }
        }
        let t = |s: &[usize]| {
            format!(
                "tensor<{}xf32>",
                s.iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join("x")
            )
        };
        let ys = [xs[0], ws[0], oh, ow];
        let ir = format!(
            "func.func @main(%x: {tx}, %w: {tw}) -> {ty} {{\n  %y = graph.conv %x, %w {{group = {g}, strides = array<i64: {}, {}>, pads = array<i64: {}, {}, {}, {}>, dilations = array<i64: {}, {}>}} : {tx}, {tw} -> {ty}\n  func.return %y : {ty}\n}}",
            st[0],
            st[1],
            pd[0],
            pd[1],
            pd[2],
            pd[3],
            dl[0],
            dl[1],
            tx = t(xs),
            tw = t(ws),
            ty = t(&ys)
        );
        assert_close(&eval(&ir, vec![x, w])[0], &want, 1e-5);
    }
}

#[test]
fn matmul_broadcasts_batches_like_numpy() {
    let a = random(&[2, 1, 3, 4], 7);
    let b = random(&[3, 4, 5], 8);
    let (aa, ba) = (a.to_f64(), b.to_f64());
    let mut want = Vec::new();
    for i in 0..2 {
        for j in 0..3 {
            for r in 0..3 {
                for c in 0..5 {
                    want.push(
                        (0..4)
                            .map(|k| aa[[i, 0, r, k]] * ba[[j, k, c]])
                            .sum::<f64>(),
                    );
                }
            }
        }
    }
    let ir =
        "func.func @main(%a: tensor<2x1x3x4xf32>, %b: tensor<3x4x5xf32>) -> tensor<2x3x3x5xf32> {
  %y = graph.matmul %a, %b : tensor<2x1x3x4xf32>, tensor<3x4x5xf32> -> tensor<2x3x3x5xf32>
  func.return %y : tensor<2x3x3x5xf32>
}";
    assert_close(&eval(ir, vec![a, b])[0], &want, 1e-5);
}

#[test]
fn conv_transpose_matches_the_onnx_example() {
    let x = tensor(&[1, 1, 3, 3], (0..9).map(f64::from).collect());
    let w = tensor(&[1, 2, 3, 3], vec![1.0; 18]);
    let ir =
        "func.func @main(%x: tensor<1x1x3x3xf32>, %w: tensor<1x2x3x3xf32>) -> tensor<1x2x5x5xf32> {
  %y = graph.conv_transpose %x, %w : tensor<1x1x3x3xf32>, tensor<1x2x3x3xf32> -> tensor<1x2x5x5xf32>
  func.return %y : tensor<1x2x5x5xf32>
}";
    let plane = [
        0., 1., 3., 3., 2., 3., 8., 15., 12., 7., 9., 21., 36., 27., 15., 9., 20., 33., 24., 13.,
        6., 13., 21., 15., 8.,
    ];
    let want: Vec<f64> = plane.iter().chain(plane.iter()).copied().collect();
    assert_close(&eval(ir, vec![x, w])[0], &want, 0.0);
}

#[test]
fn pooling_matches_the_onnx_examples() {
    // MaxPool 2x2, stride 2, on 1..16 (4x4) -> [6, 8, 14, 16]; AveragePool with
    // pads 1 excluding padding: ONNX test_averagepool_2d_pads style check.
    let x = tensor(&[1, 1, 4, 4], (1..=16).map(f64::from).collect());
    let ir = "func.func @main(%x: tensor<1x1x4x4xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x1x3x3xf32>, tensor<1x1x3x3xf32>) {
  %m = graph.max_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<1x1x4x4xf32> -> tensor<1x1x2x2xf32>
  %a = graph.average_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>} : tensor<1x1x4x4xf32> -> tensor<1x1x3x3xf32>
  %b = graph.average_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, count_include_pad = 1} : tensor<1x1x4x4xf32> -> tensor<1x1x3x3xf32>
  func.return %m, %a, %b : tensor<1x1x2x2xf32>, tensor<1x1x3x3xf32>, tensor<1x1x3x3xf32>
}";
    let out = eval(ir, vec![x]);
    assert_close(&out[0], &[6., 8., 14., 16.], 0.0);
    assert_close(&out[1], &[1., 2.5, 4., 7., 8.5, 10., 13., 14.5, 16.], 1e-7);
    assert_close(
        &out[2],
        &[0.25, 1.25, 1., 3.5, 8.5, 5., 3.25, 7.25, 4.],
        1e-7,
    );
}

#[test]
fn resize_linear_align_corners_matches_the_onnx_example() {
    let x = tensor(&[1, 1, 2, 2], vec![1., 2., 3., 4.]);
    let ir = "func.func @main(%x: tensor<1x1x2x2xf32>) -> tensor<1x1x4x4xf32> {
  %y = graph.resize %x {mode = \"linear\", scales = array<f32: 1.0, 1.0, 2.0, 2.0>, coordinate_transformation_mode = \"align_corners\"} : tensor<1x1x2x2xf32> -> tensor<1x1x4x4xf32>
  func.return %y : tensor<1x1x4x4xf32>
}";
    // ONNX's documented output for test_resize_upsample_scales_linear_align_corners.
    let want = [
        1.0, 1.33333333, 1.66666667, 2.0, 1.66666667, 2.0, 2.33333333, 2.66666667, 2.33333333,
        2.66666667, 3.0, 3.33333333, 3.0, 3.33333333, 3.66666667, 4.0,
    ];
    assert_close(&eval(ir, vec![x])[0], &want, 1e-6);
}

#[test]
fn depth_to_space_dcr_matches_the_onnx_example() {
    let x = tensor(&[1, 8, 2, 3], (0..48).map(f64::from).collect());
    let ir = "func.func @main(%x: tensor<1x8x2x3xf32>) -> tensor<1x2x4x6xf32> {
  %y = graph.depth_to_space %x {blocksize = 2} : tensor<1x8x2x3xf32> -> tensor<1x2x4x6xf32>
  func.return %y : tensor<1x2x4x6xf32>
}";
    let want = [
        0., 12., 1., 13., 2., 14., 24., 36., 25., 37., 26., 38., 3., 15., 4., 16., 5., 17., 27.,
        39., 28., 40., 29., 41., 6., 18., 7., 19., 8., 20., 30., 42., 31., 43., 32., 44., 9., 21.,
        10., 22., 11., 23., 33., 45., 34., 46., 35., 47.,
    ];
    assert_close(&eval(ir, vec![x])[0], &want, 0.0);
}

#[test]
fn data_movement_ops_pick_the_right_elements() {
    let x = tensor(&[3, 4], (0..12).map(f64::from).collect());
    let ir = "func.func @main(%x: tensor<3x4xf32>) -> (tensor<2x4xf32>, tensor<5x6xf32>, tensor<2x2xf32>, tensor<4x3xf32>) {
  %i = graph.constant {value = dense<[-1, 0]> : tensor<2xi64>} : () -> tensor<2xi64>
  %g = graph.gather %x, %i : tensor<3x4xf32>, tensor<2xi64> -> tensor<2x4xf32>
  %p = graph.pad %x {pads = array<i64: 1, 1, 1, 1>, mode = \"reflect\"} : tensor<3x4xf32> -> tensor<5x6xf32>
  %s = graph.slice %x {starts = array<i64: -1, 3>, ends = array<i64: -4, 0>, steps = array<i64: -2, -2>} : tensor<3x4xf32> -> tensor<2x2xf32>
  %t = graph.transpose %x : tensor<3x4xf32> -> tensor<4x3xf32>
  func.return %g, %p, %s, %t : tensor<2x4xf32>, tensor<5x6xf32>, tensor<2x2xf32>, tensor<4x3xf32>
}";
    let out = eval(ir, vec![x]);
    assert_close(&out[0], &[8., 9., 10., 11., 0., 1., 2., 3.], 0.0);
    assert_close(
        &out[1],
        &[
            5., 4., 5., 6., 7., 6., 1., 0., 1., 2., 3., 2., 5., 4., 5., 6., 7., 6., 9., 8., 9.,
            10., 11., 10., 5., 4., 5., 6., 7., 6.,
        ],
        0.0,
    );
    assert_close(&out[2], &[11., 9., 3., 1.], 0.0);
    assert_close(
        &out[3],
        &[0., 4., 8., 1., 5., 9., 2., 6., 10., 3., 7., 11.],
        0.0,
    );
}

#[test]
fn normalizations_normalize() {
    let x = random(&[2, 3, 8], 11);
    let ir = "func.func @main(%x: tensor<2x3x8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x8xf32>) {
  %g = graph.constant {value = dense<1.0> : tensor<8xf32>} : () -> tensor<8xf32>
  %n = graph.layer_norm %x, %g {epsilon = 0.0 : f32} : tensor<2x3x8xf32>, tensor<8xf32> -> tensor<2x3x8xf32>
  %s = graph.softmax %x {axis = 1} : tensor<2x3x8xf32> -> tensor<2x3x8xf32>
  func.return %n, %s : tensor<2x3x8xf32>, tensor<2x3x8xf32>
}";
    let out = eval(ir, vec![x]);
    let n = out[0].to_f64();
    for row in n.to_shape((6, 8)).unwrap().rows() {
        let mean = row.sum() / 8.0;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 8.0;
        assert!(
            mean.abs() < 1e-6 && (var - 1.0).abs() < 1e-5,
            "mean {mean} var {var}"
        );
    }
    let s = out[1].to_f64();
    for b in 0..2 {
        for k in 0..8 {
            let total: f64 = (0..3).map(|c| s[[b, c, k]]).sum();
            assert!((total - 1.0).abs() < 1e-6, "softmax column sums to {total}");
        }
    }
}

#[test]
fn f16_results_are_rounded_to_f16() {
    let x = Tensor::float(
        ElemType::F16,
        ArrayD::from_shape_vec(IxDyn(&[2]), vec![1.0, 3.0]).unwrap(),
    );
    let ir = "func.func @main(%x: tensor<2xf16>) -> tensor<2xf16> {
  %c = graph.constant {value = dense<3.0> : tensor<2xf16>} : () -> tensor<2xf16>
  %y = graph.div %x, %c : tensor<2xf16>, tensor<2xf16> -> tensor<2xf16>
  func.return %y : tensor<2xf16>
}";
    let y = eval(ir, vec![x]);
    // 1/3 in f16 is 0.333251953125, not f32's 0.3333333.
    assert_close(&y[0], &[0.333251953125, 1.0], 0.0);
}

/// safetensors has no 4- or 2-bit types: their weights are stored a byte
/// each (i8, u8, f8E4M3FN) and read back as the type the IR declares,
/// refused where a stored value is not one of that type.
#[test]
fn narrow_weights_round_trip_through_safetensors() {
    use ircc_core::TensorType;
    use ircc_core::interp::Env;
    let dir = common::scratch_dir("narrow-weights");
    let ints = |elem, v: Vec<i64>| {
        Tensor::int(elem, ArrayD::from_shape_vec(IxDyn(&[v.len()]), v).unwrap())
    };
    let floats = |elem, v: Vec<f64>| {
        Tensor::float(elem, ArrayD::from_shape_vec(IxDyn(&[v.len()]), v).unwrap())
    };
    let weights = [
        ("a".to_string(), ints(ElemType::I4, vec![-8, -1, 0, 7])),
        ("b".to_string(), ints(ElemType::U2, vec![0, 1, 2, 3])),
        (
            "c".to_string(),
            floats(ElemType::F4E2M1FN, vec![-6.0, 0.5, 1.5, 4.0]),
        ),
        ("d".to_string(), ints(ElemType::I8, vec![-9, 0, 1, 2])),
    ];
    let path = dir.join("w.safetensors");
    let stored: Vec<_> = weights
        .iter()
        .map(|(n, t)| (n.clone(), ircc_core::StoredTensor::from_tensor(t)))
        .collect();
    ircc_reference::write_safetensors(&path, &stored).unwrap();
    let mut env = ircc_reference::SafetensorsWeights::open(&path).unwrap();
    for (name, want) in &weights[..3] {
        let got = env.param(name, &want.ty()).unwrap();
        assert_eq!(&got, want, "{name}");
    }
    let err = env
        .param("d", &TensorType::new(vec![4], ElemType::I4))
        .unwrap_err();
    assert!(err.contains("-9 is not a value of i4"), "{err}");
}
