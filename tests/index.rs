//! The tensor-index level: layout ops become views whose composed,
//! simplified maps compute exactly what the ops did.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use ircc_core::interp::NoWeights;
use ircc_core::pass::{PassManager, PassRegistry, RunOptions, parse_pipeline};
use ircc_core::{AffineMap, Attribute, ElemType, Module, Tensor, parse_module};
use ndarray::{ArrayD, IxDyn};
use proptest::prelude::*;

const PIPELINE: &str = "index.lower-layout-ops,index.simplify,canonicalize";
const LAYOUT_OPS: [&str; 5] = [
    "graph.reshape",
    "graph.transpose",
    "graph.squeeze",
    "graph.unsqueeze",
    "graph.flatten",
];

fn run_pipeline(m: &mut Module, text: &str) {
    let registry = ircc_dialects::registry().unwrap();
    let mut passes = PassRegistry::new();
    ircc_passes::register_all(&mut passes);
    let mut pm = PassManager::from_specs(&passes, &parse_pipeline(text).unwrap()).unwrap();
    pm.run(m, &registry, &RunOptions::default(), &mut std::io::sink())
        .unwrap_or_else(|e| panic!("{e}"));
}

fn count(m: &Module, names: &[&str]) -> usize {
    let mut n = 0;
    m.walk(|op| n += names.contains(&m.op(op).name.as_str()) as usize);
    n
}

#[test]
fn shared_models_lose_their_layout_ops_but_not_their_results() {
    let registry = ircc_dialects::registry().unwrap();
    let root = common::root();
    let mut checked = 0;
    for name in [
        "bert_l2_w64",
        "vit_l4_w64",
        "swin_t_w24_dynamo",
        "convnext_w16_dynamo",
        "swin_t_w24",
        "convnext_w16",
    ] {
        let path = root.join("tests/models").join(format!("{name}.onnx"));
        let imported = ircc_onnx::import_file(&path, &registry, &Default::default()).unwrap();
        let input = ircc_reference::read_npy(&path.with_extension("input.npy")).unwrap();
        let weights: std::collections::HashMap<_, _> = imported.weights.into_iter().collect();
        let run = |m: &Module| {
            let mut env = ircc_reference::MemoryWeights(weights.clone());
            ircc_reference::run_function(m, &registry, "main", vec![input.clone()], &mut env)
                .unwrap_or_else(|e| panic!("{name}: {e}"))
        };
        let mut module = imported.module;
        let before = run(&module);
        let layout_before = count(&module, &LAYOUT_OPS);
        run_pipeline(&mut module, PIPELINE);
        assert_eq!(count(&module, &LAYOUT_OPS), 0, "{name} keeps layout ops");
        let after = run(&module);
        // Views move no data and compute no values: the results are bit-identical.
        assert_eq!(before, after, "{name} changed its results");
        eprintln!(
            "{name}: {layout_before} layout ops -> {} views",
            count(&module, &["index.view"])
        );
        checked += 1;
    }
    assert!(checked >= 4, "only {checked} models found");
}

/// One random layout step on a shape.
#[derive(Debug, Clone)]
enum Step {
    Reshape(Vec<prop::sample::Index>),
    Transpose(Vec<prop::sample::Index>),
    Slice(prop::sample::Index, prop::sample::Index, i64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        proptest::collection::vec(any::<prop::sample::Index>(), 0..4).prop_map(Step::Reshape),
        proptest::collection::vec(any::<prop::sample::Index>(), 6).prop_map(Step::Transpose),
        (
            any::<prop::sample::Index>(),
            any::<prop::sample::Index>(),
            prop_oneof![Just(1i64), Just(2), Just(-1), Just(3)]
        )
            .prop_map(|(a, s, k)| Step::Slice(a, s, k)),
    ]
}

fn factors(mut n: i64) -> Vec<i64> {
    let mut f = Vec::new();
    let mut p = 2;
    while n > 1 {
        while n % p == 0 {
            f.push(p);
            n /= p;
        }
        p += 1;
    }
    f
}

fn tensor_type(shape: &[i64]) -> String {
    let dims: String = shape.iter().map(|d| format!("{d}x")).collect();
    format!("tensor<{dims}f32>")
}

/// Builds `func.func @main(%x) { chain; relu; return }` as IR text.
fn chain_ir(start: &[i64], steps: &[Step]) -> String {
    let mut shape = start.to_vec();
    let mut body = String::new();
    let mut prev = "%x".to_string();
    for (i, s) in steps.iter().enumerate() {
        let (attrs, next, op) = match s {
            Step::Reshape(picks) => {
                // Regroup the prime factors of the element count into new extents.
                let mut f = factors(shape.iter().product());
                let mut next = Vec::new();
                for p in picks {
                    if f.is_empty() {
                        break;
                    }
                    let k = p.index(f.len()) + 1;
                    next.push(f.drain(..k).product());
                }
                next.push(f.iter().product());
                let list: Vec<String> = next.iter().map(i64::to_string).collect();
                (
                    format!("{{shape = array<i64: {}>}}", list.join(", ")),
                    next,
                    "graph.reshape",
                )
            }
            Step::Transpose(picks) => {
                let mut perm: Vec<usize> = (0..shape.len()).collect();
                for (k, p) in picks.iter().enumerate().take(shape.len()) {
                    let j = k + p.index(shape.len() - k);
                    perm.swap(k, j);
                }
                let next = perm.iter().map(|&p| shape[p]).collect();
                let list: Vec<String> = perm.iter().map(usize::to_string).collect();
                (
                    format!("{{perm = array<i64: {}>}}", list.join(", ")),
                    next,
                    "graph.transpose",
                )
            }
            Step::Slice(a, s, k) => {
                let axis = a.index(shape.len());
                let n = shape[axis];
                let start = s.index(n as usize) as i64;
                let (end, count) = if *k > 0 {
                    (n, (n - start + k - 1) / k)
                } else {
                    (-n - 1, start + 1)
                };
                let mut next = shape.clone();
                next[axis] = count;
                (
                    format!(
                        "{{starts = array<i64: {start}>, ends = array<i64: {end}>, axes = array<i64: {axis}>, steps = array<i64: {k}>}}"
                    ),
                    next,
                    "graph.slice",
                )
            }
        };
        body += &format!(
            "  %v{i} = {op} {prev} {attrs} : {} -> {}\n",
            tensor_type(&shape),
            tensor_type(&next)
        );
        prev = format!("%v{i}");
        shape = next;
    }
    format!(
        "func.func @main(%x: {}) -> {} {{\n{body}  %y = graph.relu {prev} : {} -> {}\n  func.return %y : {}\n}}\n",
        tensor_type(start),
        tensor_type(&shape),
        tensor_type(&shape),
        tensor_type(&shape),
        tensor_type(&shape)
    )
}

fn view_maps(m: &Module) -> Vec<AffineMap> {
    let mut maps = Vec::new();
    m.walk(|op| {
        if let Some(Attribute::AffineMap(map)) = m.op(op).attr("map") {
            maps.push(map.clone());
        }
    });
    maps
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn simplified_views_compute_what_the_layout_ops_did(
        start in proptest::collection::vec(prop_oneof![Just(1i64), Just(2), Just(3), Just(4), Just(6)], 1..5),
        steps in proptest::collection::vec(step(), 1..6),
    ) {
        let registry = ircc_dialects::registry().unwrap();
        let text = chain_ir(&start, &steps);
        let reference = parse_module(&text, None).unwrap();
        let n: i64 = start.iter().product();
        let x = Tensor::float(ElemType::F32, ArrayD::from_shape_vec(IxDyn(&start.iter().map(|&d| d as usize).collect::<Vec<_>>()), (0..n).map(|v| v as f64).collect()).unwrap());
        let run = |m: &Module| ircc_reference::run_function(m, &registry, "main", vec![x.clone()], &mut NoWeights).unwrap();
        let want = run(&reference);

        let mut lowered = reference.clone();
        run_pipeline(&mut lowered, "index.lower-layout-ops");
        prop_assert_eq!(count(&lowered, &LAYOUT_OPS), 0);
        prop_assert_eq!(&run(&lowered), &want, "composed view differs from the chain:\n{}", text);

        let mut simplified = lowered.clone();
        run_pipeline(&mut simplified, "index.simplify");
        prop_assert_eq!(&run(&simplified), &want, "simplified view differs:\n{}", text);
        // The maps themselves agree at every index of the result.
        if let (Some(a), Some(b)) = (view_maps(&lowered).first(), view_maps(&simplified).first()) {
            let shape: Vec<usize> = want[0].shape().to_vec();
            ircc_dialects::graph::for_each_index(&shape, |o| {
                let p: Vec<i64> = o.iter().map(|&v| v as i64).collect();
                assert_eq!(a.eval(&p, &[]), b.eval(&p, &[]), "at {p:?}: {a} vs {b}");
            });
            prop_assert!(b.div_mod_count() <= a.div_mod_count());
        }
    }
}

/// The chains of Swin and ViT/BERT that the issue names, as (source
/// shape, IR of the chain).
fn named_chains() -> Vec<(&'static str, String)> {
    let swin = |reverse: bool, both: bool| {
        let fwd = "  %1 = graph.reshape %x {shape = array<i64: 1, 8, 7, 8, 7, 96>} : tensor<1x56x56x96xf32> -> tensor<1x8x7x8x7x96xf32>
  %2 = graph.transpose %1 {perm = array<i64: 0, 1, 3, 2, 4, 5>} : tensor<1x8x7x8x7x96xf32> -> tensor<1x8x8x7x7x96xf32>
  %3 = graph.reshape %2 {shape = array<i64: 64, 49, 96>} : tensor<1x8x8x7x7x96xf32> -> tensor<64x49x96xf32>\n";
        let back = |src: &str| {
            format!("  %4 = graph.reshape {src} {{shape = array<i64: 1, 8, 8, 7, 7, 96>}} : tensor<64x49x96xf32> -> tensor<1x8x8x7x7x96xf32>
  %5 = graph.transpose %4 {{perm = array<i64: 0, 1, 3, 2, 4, 5>}} : tensor<1x8x8x7x7x96xf32> -> tensor<1x8x7x8x7x96xf32>
  %6 = graph.reshape %5 {{shape = array<i64: 1, 56, 56, 96>}} : tensor<1x8x7x8x7x96xf32> -> tensor<1x56x56x96xf32>\n")
        };
        match (reverse, both) {
            (false, _) => (
                "tensor<1x56x56x96xf32>",
                fwd.to_string(),
                "%3",
                "tensor<64x49x96xf32>",
            ),
            (true, false) => (
                "tensor<64x49x96xf32>",
                back("%x"),
                "%6",
                "tensor<1x56x56x96xf32>",
            ),
            (true, true) => (
                "tensor<1x56x56x96xf32>",
                format!("{fwd}{}", back("%3")),
                "%6",
                "tensor<1x56x56x96xf32>",
            ),
        }
    };
    let heads = |merge: bool| {
        if merge {
            ("tensor<1x12x197x64xf32>", "  %1 = graph.transpose %x {perm = array<i64: 0, 2, 1, 3>} : tensor<1x12x197x64xf32> -> tensor<1x197x12x64xf32>
  %2 = graph.reshape %1 {shape = array<i64: 1, 197, 768>} : tensor<1x197x12x64xf32> -> tensor<1x197x768xf32>\n".to_string(), "%2", "tensor<1x197x768xf32>")
        } else {
            ("tensor<1x197x768xf32>", "  %1 = graph.reshape %x {shape = array<i64: 1, 197, 12, 64>} : tensor<1x197x768xf32> -> tensor<1x197x12x64xf32>
  %2 = graph.transpose %1 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x197x12x64xf32> -> tensor<1x12x197x64xf32>\n".to_string(), "%2", "tensor<1x12x197x64xf32>")
        }
    };
    let wrap = |(src, body, last, ty): (&str, String, &str, &str)| {
        format!(
            "func.func @main(%x: {src}) -> {ty} {{\n{body}  %y = graph.relu {last} : {ty} -> {ty}\n  func.return %y : {ty}\n}}\n"
        )
    };
    vec![
        ("swin window partition", wrap(swin(false, false))),
        ("swin window reverse", wrap(swin(true, false))),
        ("swin partition then reverse", wrap(swin(true, true))),
        ("vit/bert head split", wrap(heads(false))),
        ("vit/bert head merge", wrap(heads(true))),
    ]
}

fn mlir_div_mods(map: &AffineMap, extents: &[i64]) -> Option<usize> {
    // MLIR sees the same map in loops over the result's extents, so it may
    // use their bounds, and simplifies it with its own passes.
    let mut text = String::from("func.func @f() {\n");
    let ivs: Vec<String> = (0..extents.len()).map(|i| format!("%i{i}")).collect();
    for (i, n) in extents.iter().enumerate() {
        text += &format!("affine.for %i{i} = 0 to {n} {{\n");
    }
    for (k, e) in map.results.iter().enumerate() {
        let one = AffineMap::new(map.num_dims, 0, vec![e.clone()]);
        text += &format!(
            "%r{k} = affine.apply affine_map<{one}>({})\n\"ext.use\"(%r{k}) : (index) -> ()\n",
            ivs.join(", ")
        );
    }
    text += &"}\n".repeat(extents.len());
    text += "return\n}\n";
    let mut child = Command::new("mlir-opt-22")
        .args([
            "--allow-unregistered-dialect",
            "--affine-simplify-structures",
            "--canonicalize",
            "--mlir-print-local-scope",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(text.as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    assert!(
        out.status.success(),
        "mlir-opt failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    Some(
        printed.matches("floordiv").count()
            + printed.matches("ceildiv").count()
            + printed.matches(" mod ").count(),
    )
}

#[test]
fn ircc_never_leaves_more_div_mod_than_mlir() {
    let have_mlir = Command::new("mlir-opt-22")
        .arg("--version")
        .output()
        .is_ok();
    if !have_mlir {
        assert!(
            std::env::var_os("IRCC_REQUIRE_MLIR").is_none(),
            "mlir-opt-22 is required but not on PATH"
        );
    }
    println!(
        "{:<30} {:>8} {:>8} {:>8}",
        "chain", "before", "ircc", "mlir"
    );
    for (name, text) in named_chains() {
        let mut lowered = parse_module(&text, None).unwrap();
        run_pipeline(&mut lowered, "index.lower-layout-ops");
        let before = view_maps(&lowered);
        let mut simplified = lowered.clone();
        run_pipeline(&mut simplified, "index.simplify");
        let after = view_maps(&simplified);
        let count = |maps: &[AffineMap]| maps.iter().map(AffineMap::div_mod_count).sum::<usize>();
        let extents: Vec<i64> = simplified
            .op(simplified.functions()[0])
            .attr("function_type")
            .and_then(|a| {
                if let Attribute::Type(ircc_core::Type::Function { results, .. }) = a {
                    results[0].as_tensor().map(|t| t.shape.clone())
                } else {
                    None
                }
            })
            .unwrap();
        let mlir = if have_mlir {
            before
                .first()
                .and_then(|m| mlir_div_mods(m, &extents))
                .or(Some(0))
        } else {
            None
        };
        println!(
            "{name:<30} {:>8} {:>8} {:>8}",
            count(&before),
            count(&after),
            mlir.map_or("-".to_string(), |c| c.to_string())
        );
        if let Some(m) = mlir {
            assert!(
                count(&after) <= m,
                "{name}: ircc leaves {} div/mod, MLIR {m}",
                count(&after)
            );
        }
        // Partition∘reverse is the identity; splitting heads is pure
        // regrouping. (Merging heads back must split the 768 axis.)
        if name.contains("then reverse") || name.contains("head split") {
            assert_eq!(count(&after), 0, "{name} should be div/mod-free");
        }
    }
}
