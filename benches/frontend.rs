//! Parses, verifies and prints a 1,000-op module of transformer-like graph
//! ops, and reports the median time of each phase.
//! `cargo bench -p ircc-tests --bench frontend`

use std::time::{Duration, Instant};

use ircc_core::verify::{VerifyOptions, verify};
use ircc_core::{Form, parse_module, print_module};

/// A chain of 100 blocks of 10 ops: matmul, add, layer_norm, reshape,
/// transpose, softmax, gelu, mul, sub, relu.
fn module_text(blocks: usize) -> String {
    let t = "tensor<8x64x64xf32>";
    let mut s = String::from(
        "module {\n  func.func @main(%x: tensor<8x64x64xf32>, %w: tensor<64x64xf32>, %g: tensor<64xf32>) -> tensor<8x64x64xf32> {\n",
    );
    let mut prev = "%x".to_string();
    for b in 0..blocks {
        let n = |i: usize| format!("%v{}", b * 10 + i);
        s += &format!(
            "    {} = graph.matmul {prev}, %w : {t}, tensor<64x64xf32> -> {t}\n",
            n(0)
        );
        s += &format!(
            "    {} = graph.add {}, {prev} : {t}, {t} -> {t}\n",
            n(1),
            n(0)
        );
        s += &format!(
            "    {} = graph.layer_norm {}, %g, %g {{axis = -1, epsilon = 1.0e-5 : f32}} : {t}, tensor<64xf32>, tensor<64xf32> -> {t}\n",
            n(2),
            n(1)
        );
        s += &format!(
            "    {} = graph.reshape {} {{shape = array<i64: 8, 64, 8, 8>}} : {t} -> tensor<8x64x8x8xf32>\n",
            n(3),
            n(2)
        );
        s += &format!(
            "    {} = graph.transpose {} {{perm = array<i64: 0, 2, 1, 3>}} : tensor<8x64x8x8xf32> -> tensor<8x8x64x8xf32>\n",
            n(4),
            n(3)
        );
        s += &format!(
            "    {} = graph.softmax {} {{axis = -1}} : tensor<8x8x64x8xf32> -> tensor<8x8x64x8xf32>\n",
            n(5),
            n(4)
        );
        s += &format!(
            "    {} = graph.reshape {} {{shape = array<i64: 8, 64, 64>}} : tensor<8x8x64x8xf32> -> {t}\n",
            n(6),
            n(5)
        );
        s += &format!("    {} = graph.gelu {} : {t} -> {t}\n", n(7), n(6));
        s += &format!(
            "    {} = graph.mul {}, {} : {t}, {t} -> {t}\n",
            n(8),
            n(7),
            n(1)
        );
        s += &format!("    {} = graph.relu {} : {t} -> {t}\n", n(9), n(8));
        prev = n(9);
    }
    s += &format!("    func.return {prev} : {t}\n  }}\n}}\n");
    s
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let text = module_text(100);
    let registry = ircc_dialects::registry().expect("registry");
    let runs = 30;
    let (mut parse, mut check, mut print, mut total) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut ops = 0;
    for _ in 0..runs {
        let t0 = Instant::now();
        let m = parse_module(&text, None).expect("parses");
        let t1 = Instant::now();
        verify(&m, &registry, VerifyOptions::default()).expect("verifies");
        let t2 = Instant::now();
        let out = print_module(&m, Form::Pretty);
        let t3 = Instant::now();
        std::hint::black_box(out);
        ops = m.op_count();
        parse.push(t1 - t0);
        check.push(t2 - t1);
        print.push(t3 - t2);
        total.push(t3 - t0);
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "frontend: {ops}-op module, {} bytes, median of {runs} runs",
        text.len()
    );
    println!("  parse   {:8.3} ms", ms(median(parse)));
    println!("  verify  {:8.3} ms", ms(median(check)));
    println!("  print   {:8.3} ms", ms(median(print)));
    println!("  total   {:8.3} ms", ms(median(total)));
}
