//! Every rule of `graph.math-rewrite` on a graph where it pays: the rule
//! fires (the IR changes as the rule says), and the interpreter finds no
//! counterexample on random data (`ircc check`).

mod common;

use common::{ircc, scratch_dir};

/// (rule, IR body over %a, %b, %c: tensor<8x16xf32>, %d: 8x64, %m: 64x4, what the result contains)
const CASES: &[(&str, &str, &str, &str)] = &[
    (
        "factor",
        "%ab = graph.mul %a, %b : tensor<8x16xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
  %ac = graph.mul %a, %c : tensor<8x16xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
  %y = graph.add %ab, %ac : tensor<8x16xf32>, tensor<8x16xf32> -> tensor<8x16xf32>",
        "tensor<8x16xf32>",
        "graph.add %b, %c",
    ),
    (
        "recip-product",
        "%ra = graph.reciprocal %a : tensor<8x16xf32> -> tensor<8x16xf32>
  %rb = graph.reciprocal %b : tensor<8x16xf32> -> tensor<8x16xf32>
  %y = graph.mul %ra, %rb : tensor<8x16xf32>, tensor<8x16xf32> -> tensor<8x16xf32>",
        "tensor<8x16xf32>",
        "graph.mul %a, %b",
    ),
    (
        "matmul-scalar",
        "%ds = graph.mul %d, %s : tensor<8x64xf32>, tensor<f32> -> tensor<8x64xf32>
  %y = graph.matmul %ds, %m : tensor<8x64xf32>, tensor<64x4xf32> -> tensor<8x4xf32>",
        "tensor<8x4xf32>",
        "graph.matmul %d, %m",
    ),
    (
        "reduce-scalar",
        "%bs = graph.mul %b, %s : tensor<8x16xf32>, tensor<f32> -> tensor<8x16xf32>
  %y = graph.reduce_sum %bs {axes = array<i64: 1>, keepdims = 0} : tensor<8x16xf32> -> tensor<8xf32>",
        "tensor<8xf32>",
        "graph.reduce_sum %b",
    ),
    (
        "fold-scalar-chain",
        "%t = graph.constant {value = dense<3.0> : tensor<f32>} : () -> tensor<f32>
  %c1 = graph.mul %c, %s : tensor<8x16xf32>, tensor<f32> -> tensor<8x16xf32>
  %y = graph.mul %c1, %t : tensor<8x16xf32>, tensor<f32> -> tensor<8x16xf32>",
        "tensor<8x16xf32>",
        "dense<1.5>",
    ),
];

#[test]
fn every_rule_fires_and_keeps_the_results() {
    let dir = scratch_dir("math");
    for (name, body, ty, expect) in CASES {
        let ir = format!(
            "func.func @main(%a: tensor<8x16xf32>, %b: tensor<8x16xf32>, %c: tensor<8x16xf32>, %d: tensor<8x64xf32>, %m: tensor<64x4xf32>) -> {ty} {{
  %s = graph.constant {{value = dense<0.5> : tensor<f32>}} : () -> tensor<f32>
  {body}
  func.return %y : {ty}
}}
"
        );
        let path = dir.join(format!("{name}.ir"));
        std::fs::write(&path, &ir).unwrap();
        let file = path.to_str().unwrap();
        let out = ircc(&[file, "--passes", "graph.math-rewrite,canonicalize"]);
        assert_eq!(out.code, 0, "{name}: {}", out.stderr);
        assert!(
            out.stdout.contains(expect),
            "{name} did not fire:\n{}",
            out.stdout
        );
        for seed in ["0", "1", "2"] {
            let check = ircc(&[
                "check",
                file,
                "--passes",
                "graph.math-rewrite",
                "--seed",
                seed,
            ]);
            assert_eq!(
                check.code, 0,
                "{name}: counterexample with seed {seed}:\n{}{}",
                check.stdout, check.stderr
            );
        }
    }
}
