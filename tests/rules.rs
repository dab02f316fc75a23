//! Rule files (spec/rules.md): every rule of the built-in
//! spec/rules/dnnfusion.rules fires where it pays and nowhere else, and
//! the interpreter finds no counterexample (`ircc check`); the rules run
//! on the shared networks; a bad file is an error with its line and
//! column; a rule that can never fire, or that overlaps another, is a
//! warning; `--spec-dir` and `graph.math-rewrite{rules=...}` read rule
//! files at run time.

mod common;

use common::{Output, ircc, root, scratch_dir, shared_models};

const TY: &str = "tensor<8x16xf32>";

/// (rule, IR body over %a, %b, %c: tensor<8x16xf32> ending in %y, the
/// result's type, what the output contains once the rule fired)
const CASES: &[(&str, &str, &str, &str)] = &[
    (
        "exp-product",
        "%ea = graph.exp %a : T -> T
  %eb = graph.exp %b : T -> T
  %y = graph.mul %ea, %eb : T, T -> T",
        "T",
        "graph.add %a, %b",
    ),
    (
        "exp-quotient",
        "%ea = graph.exp %a : T -> T
  %eb = graph.exp %b : T -> T
  %y = graph.div %ea, %eb : T, T -> T",
        "T",
        "graph.sub %a, %b",
    ),
    (
        "abs-product",
        "%aa = graph.abs %a : T -> T
  %ab = graph.abs %b : T -> T
  %y = graph.mul %aa, %ab : T, T -> T",
        "T",
        "graph.mul %a, %b",
    ),
    (
        "neg-product",
        "%na = graph.neg %a : T -> T
  %nb = graph.neg %b : T -> T
  %y = graph.mul %na, %nb : T, T -> T",
        "T",
        "graph.mul %a, %b",
    ),
    (
        "div-by-reciprocal",
        "%rb = graph.reciprocal %b : T -> T
  %y = graph.div %a, %rb : T, T -> T",
        "T",
        "graph.mul %a, %b",
    ),
    (
        "factor-sub",
        "%ab = graph.mul %a, %b : T, T -> T
  %ac = graph.mul %a, %c : T, T -> T
  %y = graph.sub %ab, %ac : T, T -> T",
        "T",
        "graph.sub %b, %c",
    ),
    (
        "common-divisor",
        "%ac = graph.div %a, %c : T, T -> T
  %bc = graph.div %b, %c : T, T -> T
  %y = graph.add %ac, %bc : T, T -> T",
        "T",
        "graph.add %a, %b",
    ),
    (
        "reduce-prod-of-exp",
        "%ea = graph.exp %a : T -> T
  %y = graph.reduce_prod %ea {axes = array<i64: 1>, keepdims = 0} : T -> tensor<8xf32>",
        "tensor<8xf32>",
        "graph.reduce_sum %a",
    ),
    (
        "reduce-sum-of-neg",
        "%na = graph.neg %a : T -> T
  %y = graph.reduce_sum %na {axes = array<i64: 0>} : T -> tensor<1x16xf32>",
        "tensor<1x16xf32>",
        "graph.reduce_sum %a",
    ),
    (
        "sqrt-of-square",
        "%aa = graph.mul %a, %a : T, T -> T
  %y = graph.sqrt %aa : T -> T",
        "T",
        "graph.abs %a",
    ),
    (
        "double-neg",
        "%na = graph.neg %a : T -> T
  %y = graph.neg %na : T -> T",
        "T",
        "func.return %a",
    ),
    (
        "mul-one",
        "%one = graph.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %y = graph.mul %a, %one : T, tensor<f32> -> T",
        "T",
        "func.return %a",
    ),
    (
        "add-zero",
        "%zero = graph.constant {value = dense<0.0> : tensor<1x16xf32>} : () -> tensor<1x16xf32>
  %y = graph.add %a, %zero : T, tensor<1x16xf32> -> T",
        "T",
        "func.return %a",
    ),
];

fn module(body: &str, ty: &str) -> String {
    let body = body.replace("T", TY);
    let ty = ty.replace("T", TY);
    format!(
        "func.func @main(%a: {TY}, %b: {TY}, %c: {TY}) -> {ty} {{
  {body}
  func.return %y : {ty}
}}
"
    )
}

#[test]
fn every_builtin_rule_fires_where_it_pays_and_keeps_the_results() {
    let rules = std::fs::read_to_string(root().join("spec/rules/dnnfusion.rules")).unwrap();
    let dir = scratch_dir("rules");
    for (name, body, ty, expect) in CASES {
        assert!(
            rules.contains(&format!("(rule {name}")),
            "{name} is built in"
        );
        let path = dir.join(format!("{name}.ir"));
        std::fs::write(&path, module(body, ty)).unwrap();
        let file = path.to_str().unwrap();
        let out = ircc(&[file, "--passes", "rules", "--remarks"]);
        assert_eq!(out.code, 0, "{name}: {}", out.stderr);
        assert!(out.stdout.contains(expect), "{name}:\n{}", out.stdout);
        assert!(
            out.stderr.contains(&format!("rule '{name}' saves")),
            "{name} is the rule that fired: {}",
            out.stderr
        );
        for seed in ["0", "1", "2"] {
            let check = ircc(&["check", file, "--passes", "rules", "--seed", seed]);
            assert_eq!(
                check.code, 0,
                "{name}: counterexample with seed {seed}:\n{}{}",
                check.stdout, check.stderr
            );
        }
    }
    // Every rule of the file has a case.
    let cased = rules.matches("(rule ").count();
    assert_eq!(cased, CASES.len(), "a case per built-in rule");
}

#[test]
fn a_rewrite_that_saves_nothing_is_not_made() {
    // exp(a) is read twice: exp(a + b) would not remove it, so the rule
    // would trade a multiplication for an addition and gain nothing.
    let dir = scratch_dir("rules");
    let path = dir.join("shared.ir");
    std::fs::write(
        &path,
        format!(
            "func.func @main(%a: {TY}, %b: {TY}) -> ({TY}, {TY}) {{
  %ea = graph.exp %a : {TY} -> {TY}
  %eb = graph.exp %b : {TY} -> {TY}
  %eb2 = graph.exp %b : {TY} -> {TY}
  %y = graph.mul %ea, %eb : {TY}, {TY} -> {TY}
  %z = graph.add %ea, %eb2 : {TY}, {TY} -> {TY}
  func.return %y, %z : {TY}, {TY}
}}
"
        ),
    )
    .unwrap();
    let out = ircc(&[path.to_str().unwrap(), "--passes", "rules", "--remarks"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("graph.mul %ea, %eb"), "{}", out.stdout);
    assert!(!out.stderr.contains("saves"), "{}", out.stderr);
}

#[test]
fn the_builtin_rules_run_on_the_shared_networks() {
    let mut rewrites = 0;
    for (name, model) in shared_models() {
        let model = model.to_str().unwrap();
        let rules = root().join("spec/rules/dnnfusion.rules");
        let args = [
            model,
            "--load-rules",
            rules.to_str().unwrap(),
            "--passes",
            "canonicalize",
        ];
        let check = ircc(&[&["check"][..], &args].concat());
        assert_eq!(check.code, 0, "{name}: {}{}", check.stdout, check.stderr);
        assert!(
            check.stdout.contains(" 1. rules "),
            "{name}: {}",
            check.stdout
        );
        let out = ircc(&[&args[..], &["--remarks"]].concat());
        assert_eq!(out.code, 0, "{name}: {}", out.stderr);
        assert!(!out.stderr.contains("warning"), "{name}: {}", out.stderr);
        rewrites += out.stderr.matches(" saves ").count();
    }
    // The dynamo exports add zero biases, which add-zero removes.
    if !shared_models().is_empty() {
        assert!(rewrites > 0, "no rule fired on any shared network");
    }
}

/// Runs the rules pass with the rule file `text` over a small module.
fn run_rules(text: &str) -> (Output, String) {
    let dir = scratch_dir("rules");
    let rules = dir.join("my.rules");
    std::fs::write(&rules, text).unwrap();
    let ir = dir.join("in.ir");
    std::fs::write(&ir, module(CASES[0].1, "T")).unwrap();
    let rules = rules.to_str().unwrap().to_string();
    let out = ircc(&[ir.to_str().unwrap(), "--load-rules", &rules]);
    (out, rules)
}

#[test]
fn errors_in_a_rule_file_name_line_and_column() {
    let cases: &[(&str, &str)] = &[
        (
            "(rule r\n  (graph.mul ?a ?b)\n  (graph.mul ?b ?a))",
            "3:4: syntax error: expected '=>' before the replacement",
        ),
        (
            "(rule r (graph.mul ?a ?b) => ?c)",
            "1:30: ?c is not bound by the rule's pattern",
        ),
        (
            "(rule r ?a => ?a)",
            "1:9: rule 'r': a pattern's root must be an op",
        ),
        (
            "(rule r (graph.mul ?a ?b) (if (even ?a)) => ?a)",
            "1:32: unknown condition 'even'",
        ),
        (
            "(rule r (graph.mul ?a ?b) (if (rank ?a)) => ?a)",
            "1:31: (rank) takes 2 arguments, not 1",
        ),
        (
            "(rule r (graph.reduce_sum ?a {axes = ?a}) => ?a)",
            "1:38: ?a is an attribute here but a value where it is bound",
        ),
        (
            "(rule r (graph.reduce_sum ?a {axes = array<i64: x>}) => ?a)",
            "1:38: attribute 'axes': 'array<i64: x>' is not an attribute",
        ),
        (
            "(rule r (graph.neg (graph.neg ?a)) => ?a)\n(rule r (graph.abs (graph.abs ?a)) => ?a)",
            "2:1: a second rule named 'r'",
        ),
    ];
    for (text, expect) in cases {
        let (out, rules) = run_rules(text);
        assert_eq!(out.code, 1, "{text}");
        assert!(
            out.stderr.contains(&format!("error: {rules}:{expect}")),
            "{text}:\n{}",
            out.stderr
        );
    }
    let deep = format!(
        "(rule r {}?a{} => ?a)",
        "(graph.neg ".repeat(200),
        ")".repeat(200)
    );
    let (out, _) = run_rules(&deep);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("brackets nest deeper than"),
        "{}",
        out.stderr
    );
    let dir = scratch_dir("rules");
    let out = ircc(&[
        "--passes",
        &format!("rules{{file={}}}", dir.to_str().unwrap()),
        root().join("examples/mlp.ir").to_str().unwrap(),
    ]);
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("not a regular file"), "{}", out.stderr);
}

#[test]
fn rules_that_can_never_fire_or_overlap_are_warnings() {
    let (out, rules) = run_rules(
        "(rule typo (graph.exponent ?a) => ?a)
(rule arity (graph.neg ?a ?b) => ?a)
(rule attr (graph.neg ?a {axis = 1}) => ?a)
(rule rank (graph.neg ?a) (if (rank ?a -1)) => ?a)
(rule first (graph.mul (graph.exp ?a) ?b) => (graph.mul ?b (graph.exp ?a)))
(rule second (graph.mul ?a (graph.exp ?b)) => (graph.mul (graph.exp ?b) ?a))
",
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    for expect in [
        ":1:12: warning: rule 'typo' can never fire: 'graph.exponent' is not a registered op",
        ":2:13: warning: rule 'arity' can never fire: 'graph.neg' takes 1 operand, not 2",
        ":3:12: warning: rule 'attr' can never fire: 'graph.neg' has no attribute 'axis'",
        ":4:1: warning: rule 'rank' can never fire: (rank ?a -1)",
        ":6:1: warning: rules 'first' and 'second' can match the same ops",
    ] {
        assert!(
            out.stderr.contains(&format!("{rules}{expect}")),
            "{expect}:\n{}",
            out.stderr
        );
    }
    // The built-in files are clean.
    let (out, _) =
        run_rules(&std::fs::read_to_string(root().join("spec/rules/dnnfusion.rules")).unwrap());
    assert_eq!(out.code, 0);
    assert_eq!(out.stderr, "");
}

/// Many rules alike warn once a rule, each counting the rules before it
/// that match the same ops, not once a pair.
#[test]
fn many_overlapping_rules_warn_once_a_rule() {
    let text: String = (0..50)
        .map(|i| {
            format!("(rule r{i} (graph.mul (graph.exp ?a) ?b) => (graph.mul ?b (graph.exp ?a)))\n")
        })
        .collect();
    let (out, _) = run_rules(&text);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stderr.matches("warning:").count(), 49, "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "rules 'r0' and 'r49' can match the same ops (as can 48 more rules before 'r49')"
        ),
        "{}",
        out.stderr
    );
}

#[test]
fn the_algebra_is_a_rule_file_read_at_run_time() {
    let dir = scratch_dir("rules");
    let ir = dir.join("factor.ir");
    std::fs::write(
        &ir,
        module(
            "%ab = graph.mul %a, %b : T, T -> T
  %ac = graph.mul %a, %c : T, T -> T
  %y = graph.add %ab, %ac : T, T -> T",
            "T",
        ),
    )
    .unwrap();
    let ir = ir.to_str().unwrap();
    let out = ircc(&[ir, "--passes", "graph.math-rewrite"]);
    assert!(
        out.stdout.contains("graph.add %b, %c"),
        "built in: {}",
        out.stdout
    );

    // A spec folder whose algebra lacks the distributive rule.
    let spec = dir.join("spec");
    std::fs::create_dir_all(spec.join("rules")).unwrap();
    std::fs::write(
        spec.join("rules/algebra.rules"),
        "(rule mul-comm (graph.mul ?a ?b) => (graph.mul ?b ?a))\n",
    )
    .unwrap();
    let out = ircc(&[
        ir,
        "--passes",
        "graph.math-rewrite",
        "--spec-dir",
        spec.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!out.stdout.contains("graph.add %b, %c"), "{}", out.stdout);

    // An op outside the algebra is an error naming it and where.
    let bad = dir.join("bad.rules");
    std::fs::write(
        &bad,
        "(rule e (graph.exp (graph.neg ?a)) => (graph.neg ?a))\n",
    )
    .unwrap();
    let out = ircc(&[
        ir,
        "--passes",
        &format!("graph.math-rewrite{{rules={}}}", bad.display()),
    ]);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains(&format!(
            "error: {}:1:9: 'graph.exp' is outside the algebra",
            bad.display()
        )),
        "{}",
        out.stderr
    );
}

#[test]
fn the_readme_rule_file_runs_as_shown() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let rules = std::fs::read_to_string(root().join("examples/exp_product.rules")).unwrap();
    let rule = &rules[rules.find("(rule").unwrap()..];
    assert!(
        readme.contains(rule.trim()),
        "README shows examples/exp_product.rules"
    );
    let ir = root().join("examples/exp_product.ir");
    let rules = root().join("examples/exp_product.rules");
    let (ir, rules) = (ir.to_str().unwrap(), rules.to_str().unwrap());
    let out = ircc(&[ir, "--load-rules", rules, "--remarks"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("graph.exp %0"), "{}", out.stdout);
    let remark = "rule 'exp-product' saves 16 FLOPs and 1 ops";
    assert!(out.stderr.contains(remark), "{}", out.stderr);
    assert!(readme.contains(&remark.replace("16 FLOPs", "16\nFLOPs")));
    let check = ircc(&["check", ir, "--load-rules", rules]);
    assert_eq!(check.code, 0, "{}{}", check.stdout, check.stderr);
}
