//! Structure-aware generators for the classes of hostile input (the corpus
//! in `tests/hostile/` holds one example of each): deep nesting, huge
//! shapes, attributes of the wrong type, duplicate names and hostile paths.
//! Each property says "a clear error or the correct result": a crash (a
//! stack overflow aborts the test binary), a hang or a silent wrong answer
//! fails it. Run longer with `PROPTEST_CASES=2000 cargo test --test
//! hostile_gen`.

mod common;

use std::path::Path;

use common::onnx::{model, node, value_info};
use common::{files_under, ircc, scratch_dir};
use ircc_core::verify::{VerifyOptions, verify};
use ircc_core::{Form, parse_module, print_module};
use ircc_onnx::proto::*;
use ircc_onnx::{ImportOptions, import_model};
use proptest::prelude::*;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(cases),
        ..ProptestConfig::default()
    }
}

/// One construct nested `depth` times.
#[derive(Clone, Copy, Debug)]
enum Nesting {
    Regions,
    DenseBrackets,
    AffineParens,
    ListAttrs,
    AffineSum,
}

fn nested(kind: Nesting, depth: usize) -> String {
    let view = |expr: String| {
        format!(
            "func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {{\n  %0 = index.view %x by affine_map<(d0) -> ({expr})> : tensor<8xf32> to tensor<8xf32>\n  func.return %0 : tensor<8xf32>\n}}\n"
        )
    };
    match kind {
        Nesting::Regions => format!(
            "{}\"test.leaf\"() : () -> ()\n{}",
            "\"test.nest\"() ({\n".repeat(depth),
            "}) : () -> ()\n".repeat(depth)
        ),
        Nesting::DenseBrackets => {
            let t = format!("tensor<{}f32>", "1x".repeat(depth));
            format!(
                "func.func @main() -> {t} {{\n  %0 = graph.constant {{value = dense<{}1.0{}> : {t}}} : () -> {t}\n  func.return %0 : {t}\n}}\n",
                "[".repeat(depth),
                "]".repeat(depth)
            )
        }
        Nesting::AffineParens => view(format!("{}d0{}", "(".repeat(depth), ")".repeat(depth))),
        Nesting::ListAttrs => format!(
            "\"test.op\"() {{a = {}1{}}} : () -> ()\n",
            "[".repeat(depth),
            "]".repeat(depth)
        ),
        // d0 + d0 - d0 + ... - d0: d0 again whatever the depth, if parsed.
        Nesting::AffineSum => view(
            std::iter::once("d0".to_string())
                .chain((0..depth).map(|i| if i % 2 == 0 { "+ d0" } else { "- d0" }.into()))
                .collect::<Vec<_>>()
                .join(" "),
        ),
    }
}

/// The deepest bracket nesting of generated text (no strings hold
/// brackets there, and `->` is an arrow).
fn bracket_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut prev = ' ';
    for c in text.chars() {
        match c {
            '(' | '[' | '{' | '<' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            '>' if prev == '-' => {}
            ')' | ']' | '}' | '>' => depth -= 1,
            _ => {}
        }
        prev = c;
    }
    deepest
}

fn nesting() -> impl Strategy<Value = Nesting> {
    prop_oneof![
        Just(Nesting::Regions),
        Just(Nesting::DenseBrackets),
        Just(Nesting::AffineParens),
        Just(Nesting::ListAttrs),
        Just(Nesting::AffineSum),
    ]
}

/// Depths around the limits and far beyond them, where the stack used to
/// overflow (3,000 regions, 5,000 brackets, 100,000 terms).
fn depth() -> impl Strategy<Value = usize> {
    prop_oneof![1usize..300, 300usize..12_000, Just(100_000)]
}

/// Shapes from the small to the absurd: 2^31 is the largest extent, 2^40
/// the most elements.
fn extent() -> impl Strategy<Value = i64> {
    prop_oneof![
        0i64..9,
        Just(65536),
        Just(1 << 31),
        Just((1 << 31) + 1),
        Just(1 << 40),
        Just(i64::MAX),
    ]
}

/// An ONNX attribute of the given type holding "one" in that type.
fn attribute(name: &str, ty: i32) -> AttributeProto {
    let mut a = AttributeProto {
        name: name.into(),
        r#type: ty,
        ..Default::default()
    };
    match ty {
        attr_type::INT => a.i = 1,
        attr_type::FLOAT => a.f = 1.0,
        attr_type::STRING => a.s = b"1".to_vec(),
        attr_type::INTS => a.ints = vec![1, 0],
        _ => a.floats = vec![1.0],
    }
    a
}

/// Operators with an attribute and the type ONNX gives it (each takes a
/// 2x3 input `x`).
const TYPED_ATTRIBUTES: [(&str, &str, i32); 7] = [
    ("Softmax", "axis", attr_type::INT),
    ("LeakyRelu", "alpha", attr_type::FLOAT),
    ("Elu", "alpha", attr_type::FLOAT),
    ("Flatten", "axis", attr_type::INT),
    ("Transpose", "perm", attr_type::INTS),
    ("HardSigmoid", "beta", attr_type::FLOAT),
    ("ReduceSum", "keepdims", attr_type::INT),
];

fn import(bytes: &[u8]) -> Result<ircc_onnx::Imported, String> {
    let registry = ircc_dialects::registry().unwrap();
    import_model(bytes, Path::new("."), &registry, &ImportOptions::default())
        .map_err(|e| e.to_string())
}

proptest! {
    #![proptest_config(config(48))]

    /// Nesting within the limits parses (and prints, and verifies where the
    /// ops are known); one level deeper is an error naming where.
    #[test]
    fn deep_nesting_is_refused_with_a_location(kind in nesting(), depth in depth()) {
        let text = nested(kind, depth);
        let too_deep = match kind {
            Nesting::AffineSum => depth > 256,
            _ => bracket_depth(&text) > 128,
        };
        match parse_module(&text, Some("deep.ir")) {
            Ok(m) => {
                let registry = ircc_dialects::registry().unwrap();
                let _ = verify(&m, &registry, VerifyOptions { allow_unregistered: true });
                prop_assert!(!print_module(&m, Form::Generic).is_empty());
                prop_assert!(!too_deep, "{kind:?} at depth {depth} parsed");
            }
            Err(d) => {
                prop_assert!(d.loc.line > 0, "{kind:?} {depth}: no location in {d}");
                let said = d.to_string();
                prop_assert!(said.contains("deeper than"), "{kind:?} {depth}: {said}");
                prop_assert!(too_deep, "{kind:?} refused at depth {depth}: {said}");
            }
        }
    }

    /// A weights path of a single stray closer per level (`loc(x>>>>)`)
    /// cannot hide the depth of the brackets around it.
    #[test]
    fn stray_closers_do_not_hide_depth(depth in 60usize..400, closers in 1usize..8) {
        let stray = ">".repeat(closers) + &"]".repeat(closers);
        let text = format!(
            "{}\"test.leaf\"() : () -> ()\n{}",
            format!("\"test.nest\"() ({{ \"test.x\"() : () -> () loc(\"a\" {stray})\n").repeat(depth),
            "}) : () -> ()\n".repeat(depth)
        );
        let refused = parse_module(&text, Some("stray.ir"))
            .err()
            .is_some_and(|d| d.to_string().contains("deeper than"));
        prop_assert_eq!(refused, 2 * depth + 1 > 128, "depth {}", depth);
    }

    /// A constant of any shape, folded or run: an error naming the limit or
    /// the right answer, never an allocation of its size.
    #[test]
    fn huge_shapes_are_checked_before_allocating(dims in proptest::collection::vec(extent(), 1..4)) {
        let shape = dims.iter().map(i64::to_string).collect::<Vec<_>>().join("x");
        let t = format!("tensor<{shape}xf32>");
        let text = format!(
            "func.func @main() -> {t} {{\n  %c = graph.constant {{value = dense<2.0> : {t}}} : () -> {t}\n  %0 = graph.relu %c : {t} -> {t}\n  func.return %0 : {t}\n}}\n"
        );
        let dir = scratch_dir("huge");
        let file = dir.join("huge.ir");
        std::fs::write(&file, &text).unwrap();
        let out = dir.join("out");
        let r = ircc(&["run", file.to_str().unwrap(), "--pipeline", "canonicalize", "--output-dir", out.to_str().unwrap()]);
        let elements = dims.iter().try_fold(1i64, |n, &d| n.checked_mul(d));
        if r.code == 0 {
            prop_assert!(elements.is_some_and(|n| n <= 1 << 28), "{shape} ran");
            let result = ircc_reference::read_npy(&out.join("result0.npy")).unwrap();
            let want: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
            prop_assert_eq!(result.shape(), want.as_slice());
            prop_assert!(result.to_f64().iter().all(|&x| x == 2.0));
        } else {
            prop_assert_eq!(r.code, 1, "{}", r.stderr);
            prop_assert!(
                ["larger than", "more than", "supported maximum", "outside"].iter().any(|w| r.stderr.contains(w)),
                "{shape}: {}", r.stderr
            );
        }
    }

    /// An attribute of any type: accepted when it is the type ONNX gives
    /// it, refused naming node and attribute otherwise.
    #[test]
    fn attributes_of_any_type_are_checked(
        which in 0..TYPED_ATTRIBUTES.len(),
        ty in prop_oneof![Just(attr_type::INT), Just(attr_type::FLOAT), Just(attr_type::STRING), Just(attr_type::INTS), Just(attr_type::FLOATS)],
    ) {
        let (op, name, right) = TYPED_ATTRIBUTES[which];
        let bytes = model(
            vec![node("n0", op, &["x"], "y", vec![attribute(name, ty)])],
            vec![value_info("x", &[2, 3])],
            "y",
        );
        match import(&bytes) {
            Ok(_) => prop_assert_eq!(ty, right, "{} accepted '{}' of type {}", op, name, ty),
            Err(e) if ty == right => prop_assert!(false, "{op} refused the right type: {e}"),
            Err(e) => prop_assert!(
                e.contains("node 'n0'") && e.contains(&format!("attribute '{name}'")),
                "{e}"
            ),
        }
    }

    /// Nodes writing names from a small pool (which holds the graph's
    /// input): imported exactly when every name is defined once.
    #[test]
    fn duplicate_definitions_are_refused(outputs in proptest::collection::vec(0usize..4, 1..5)) {
        let pool = ["x", "a", "b", "c"];
        let mut nodes = Vec::new();
        let mut input = "x";
        for (i, &o) in outputs.iter().enumerate() {
            nodes.push(node(&format!("n{i}"), "Relu", &[input], pool[o], vec![]));
            input = pool[o];
        }
        let bytes = model(nodes, vec![value_info("x", &[2, 3])], input);
        let mut seen = vec!["x"];
        let unique = outputs.iter().all(|&o| {
            let fresh = !seen.contains(&pool[o]);
            seen.push(pool[o]);
            fresh
        });
        match import(&bytes) {
            Ok(_) => prop_assert!(unique, "{outputs:?} imported"),
            Err(e) => {
                prop_assert!(!unique, "{outputs:?}: {e}");
                prop_assert!(e.contains("is already defined"), "{e}");
            }
        }
    }

    /// `ircc.weights` made of hostile pieces: read only when it names a
    /// regular file inside the IR file's folder, symlinks resolved, and
    /// refused with the reason otherwise.
    #[test]
    fn weights_paths_stay_in_the_folder(pieces in proptest::collection::vec(0usize..7, 1..4)) {
        let parts = ["..", "/", "etc", "in.safetensors", "sub", ".", "link.safetensors"];
        let weights: String = pieces.iter().map(|&p| parts[p]).collect::<Vec<_>>().join("/");
        let dir = scratch_dir("paths");
        let model_dir = dir.join("model");
        std::fs::create_dir_all(model_dir.join("sub")).unwrap();
        // The same valid weights inside the folder and outside it, so only
        // the path rule decides which may be read.
        let bytes: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        for file in [dir.join("w.safetensors"), model_dir.join("in.safetensors")] {
            let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2], &bytes).unwrap();
            safetensors::serialize_to_file([("w", view)], None, &file).unwrap();
        }
        #[cfg(unix)]
        std::os::unix::fs::symlink(dir.join("w.safetensors"), model_dir.join("link.safetensors")).unwrap();
        let text = format!(
            "module attributes {{ircc.weights = \"{weights}\"}} {{\n  func.func @main() -> tensor<2xf32> {{\n    %w = graph.param {{name = \"w\"}} : () -> tensor<2xf32>\n    func.return %w : tensor<2xf32>\n  }}\n}}\n"
        );
        let file = model_dir.join("m.ir");
        std::fs::write(&file, text).unwrap();
        let r = ircc(&["run", file.to_str().unwrap(), "--output-dir", dir.join("out").to_str().unwrap()]);
        let names: Vec<&str> = weights.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
        let escapes = weights.starts_with('/') || names.contains(&"..");
        // `in.safetensors/.` names a directory, which a file cannot be.
        let as_dir = weights.ends_with('/') || weights.ends_with("/.");
        let readable = names.as_slice() == ["in.safetensors"] && !as_dir;
        match names.as_slice() {
            _ if escapes => prop_assert!(r.stderr.contains("leaves the folder"), "{}: {}", weights, r.stderr),
            _ if readable => prop_assert_eq!(r.code, 0, "{}: {}", weights, r.stderr),
            ["link.safetensors"] if !as_dir => prop_assert!(r.stderr.contains("outside the folder"), "{}: {}", weights, r.stderr),
            [] | ["sub"] => prop_assert!(r.stderr.contains("is not a regular file"), "{}: {}", weights, r.stderr),
            _ => prop_assert!(r.stderr.contains("cannot read") || r.stderr.contains("is not a regular file"), "{}: {}", weights, r.stderr),
        }
        if !readable || escapes {
            prop_assert_eq!(r.code, 1, "{} was read", weights);
        }
    }

    /// Kernel symbols and result names made of hostile pieces: `--emit
    /// wgsl -o DIR` (a shader, plan.json and weights.safetensors) and `run
    /// --output-dir DIR` write only inside DIR.
    #[test]
    fn output_files_stay_in_the_output_folder(
        symbol in proptest::collection::vec(0usize..6, 1..4),
        result in proptest::collection::vec(0usize..6, 1..4),
    ) {
        let parts = ["..", "/", "abs", "k", ".", "a b"];
        let join = |p: &[usize]| p.iter().map(|&i| parts[i]).collect::<Vec<_>>().join("/");
        let (symbol, result) = (join(&symbol), join(&result));
        let dir = scratch_dir("outputs");
        let text = format!(
            r#"module {{
  func.func @main() -> (tensor<4xf32> {{ircc.name = "{result}"}}) {{
    %c = graph.constant {{value = dense<2.0> : tensor<4xf32>}} : () -> tensor<4xf32>
    %0 = kernel.launch %c {{kernel = @"{symbol}"}} : tensor<4xf32> -> tensor<4xf32>
    func.return %0 : tensor<4xf32>
  }}
  kernel.func {{sym_name = "{symbol}", function_type = (tensor<4xf32>, tensor<4xf32>) -> (), outputs = 1, workgroup_size = array<i64: 4, 1, 1>, grid = array<i64: 1, 1, 1>, template = "elementwise"}} ({{
  ^bb0(%in: tensor<4xf32>, %out: tensor<4xf32>):
    %i = kernel.id {{kind = "global", axis = 0}} : () -> index
    %v = kernel.load %in, %i {{map = affine_map<(d0) -> (d0)>}} : tensor<4xf32>, index -> f32
    kernel.store %v, %out, %i {{map = affine_map<(d0) -> (d0)>}} : f32, tensor<4xf32>, index -> ()
    kernel.return : () -> ()
  }}) : () -> ()
}}
"#
        );
        let file = dir.join("m.ir");
        std::fs::write(&file, text).unwrap();
        let (wgsl, npy) = (dir.join("a/wgsl"), dir.join("a/npy"));
        let emitted = ircc(&[file.to_str().unwrap(), "--emit", "wgsl", "-o", wgsl.to_str().unwrap()]);
        prop_assert_eq!(emitted.code, 0, "{}", emitted.stderr);
        let ran = ircc(&["run", file.to_str().unwrap(), "--output-dir", npy.to_str().unwrap()]);
        prop_assert_eq!(ran.code, 0, "{}", ran.stderr);
        let written = files_under(&dir);
        prop_assert_eq!(written.len(), 5, "{:?}", written);
        for w in &written {
            let folder = w.rsplit_once('/').map(|(folder, _)| folder);
            prop_assert!(
                w == "m.ir" || folder == Some("a/wgsl") || folder == Some("a/npy"),
                "{} / {}: wrote {}", symbol, result, w
            );
        }
    }
}
