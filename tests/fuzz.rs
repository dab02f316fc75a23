//! Fuzzing the front end: random bytes and mutations of the corpus in
//! `tests/fuzz/corpus` go through the parser, the verifier, canonicalize
//! and (for small functions) the interpreter. Any input may be rejected;
//! none may panic. Run longer with `PROPTEST_CASES=100000 cargo test
//! -p ircc-tests --test fuzz`.

mod common;

use ircc_core::interp::NoWeights;
use ircc_core::pass::{Pass, PassContext};
use ircc_core::verify::{VerifyOptions, verify};
use ircc_core::{Form, Tensor, Type, parse_module, print_module};
use proptest::prelude::*;

const TOKENS: &[&str] = &[
    "%0",
    "%x",
    "%0#1",
    "%a:2",
    ":",
    "->",
    "(",
    ")",
    "{",
    "}",
    "<",
    ">",
    "<{",
    "}>",
    "[",
    "]",
    ",",
    "=",
    "@main",
    "^bb0:",
    "tensor<",
    "tensor<2x3xf32>",
    "tensor<0xf32>",
    "tensor<f32>",
    "xf32",
    "x",
    "i1",
    "f16",
    "index",
    "func.func",
    "func.return",
    "graph.add",
    "graph.conv",
    "graph.reshape",
    "graph.slice",
    "graph.gather",
    "graph.pad",
    "graph.resize",
    "graph.split",
    "graph.concat",
    "graph.constant",
    "module",
    "attributes",
    "dense<",
    "dense<[1.0, 2.0]>",
    "array<i64: ",
    "affine_map<(d0) -> (d0 floordiv 0)>",
    "floordiv",
    "mod",
    "\"",
    "\\",
    "-",
    "0",
    "-1",
    "9223372036854775807",
    "99999999999999999999",
    "1.0e400",
    "0x7FC00000",
    "#map",
    "!t",
    "unit",
    "true",
    "// c\n",
    "\n",
    " ",
];

fn corpus() -> Vec<String> {
    let dir = common::root().join("tests/fuzz/corpus");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

#[derive(Debug, Clone)]
enum Mutation {
    Delete(prop::sample::Index, usize),
    Insert(prop::sample::Index, usize),
    Duplicate(prop::sample::Index, usize),
    ReplaceDigit(prop::sample::Index, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<prop::sample::Index>(), 1usize..20).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (any::<prop::sample::Index>(), 0..TOKENS.len()).prop_map(|(i, t)| Mutation::Insert(i, t)),
        (any::<prop::sample::Index>(), 1usize..40).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
        (any::<prop::sample::Index>(), 0u8..10).prop_map(|(i, d)| Mutation::ReplaceDigit(i, d)),
    ]
}

fn floor_char(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn apply(mut s: String, m: &Mutation) -> String {
    if s.is_empty() {
        return s;
    }
    match m {
        Mutation::Delete(i, n) => {
            let a = floor_char(&s, i.index(s.len()));
            let b = floor_char(&s, a + n);
            s.replace_range(a..b, "");
        }
        Mutation::Insert(i, t) => {
            let a = floor_char(&s, i.index(s.len()));
            s.insert_str(a, TOKENS[*t]);
        }
        Mutation::Duplicate(i, n) => {
            let a = floor_char(&s, i.index(s.len()));
            let b = floor_char(&s, a + n);
            let piece = s[a..b].to_string();
            s.insert_str(b, &piece);
        }
        Mutation::ReplaceDigit(i, d) => {
            let digits: Vec<usize> = s
                .char_indices()
                .filter(|(_, c)| c.is_ascii_digit())
                .map(|(p, _)| p)
                .collect();
            if !digits.is_empty() {
                let p = digits[i.index(digits.len())];
                s.replace_range(p..p + 1, &d.to_string());
            }
        }
    }
    s
}

/// Everything a user's input can reach; returns normally whatever happens.
fn exercise(text: &str) {
    let registry = ircc_dialects::registry().unwrap();
    let Ok(mut module) = parse_module(text, Some("fuzz.ir")) else {
        return;
    };
    let _ = print_module(&module, Form::Pretty);
    let _ = print_module(&module, Form::Generic);
    if verify(&module, &registry, VerifyOptions::default()).is_err() {
        return;
    }
    let mut canon = ircc_passes::graph::canonicalize::Canonicalize {
        max_elements: 1 << 12,
    };
    let _ = canon.run(&mut module, &PassContext::new(&registry));
    // Valid but huge computations (a mutated resize to 99999x99999) are
    // slow, not wrong; the interpreter is exercised on small modules only.
    let mut largest = 0;
    module.walk(|op| {
        for &r in &module.op(op).results {
            if let Type::Tensor(t) = module.value_type(r) {
                largest = largest.max(t.num_elements());
            }
        }
    });
    if largest > 1 << 16 {
        return;
    }
    let Some(f) = module.lookup_symbol("main") else {
        return;
    };
    let Some(entry) = module.entry_block(f) else {
        return;
    };
    let mut inputs = Vec::new();
    for &a in &module.blocks[entry].args {
        match module.value_type(a) {
            Type::Tensor(t) if t.num_elements() <= 4096 => inputs.push(Tensor::zeros(t)),
            _ => return,
        }
    }
    let _ = ircc_reference::run_function(&module, &registry, "main", inputs, &mut NoWeights);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        exercise(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn mutated_files_never_panic(file in any::<prop::sample::Index>(), mutations in proptest::collection::vec(mutation(), 1..4)) {
        let files = corpus();
        let mut text = files[file.index(files.len())].clone();
        for m in &mutations {
            text = apply(text, m);
        }
        exercise(&text);
    }
}

#[test]
fn the_corpus_itself_is_exercised() {
    let files = corpus();
    assert!(files.len() >= 40);
    for f in files {
        exercise(&f);
    }
}
