//! NaN, ±inf and ±0 through every element-wise op and reduction: what
//! ONNX gives (numpy's and IEEE 754's answers; onnxruntime's too, but for
//! its max pools, which drop a NaN), as tables a reader checks at a
//! glance, and one module that computes every op at once on the
//! interpreter or a GPU.

use std::f64::consts::FRAC_PI_2;

use ircc_dialects::graph::GraphOp as G;

pub const NAN: f64 = f64::NAN;
pub const INF: f64 = f64::INFINITY;

/// Every float unary op (with its attributes) and its value at NaN, +inf
/// and -inf.
pub const UNARY: &[(G, &str, [f64; 3])] = &[
    // op, attributes, then its value at [NaN, +inf, -inf]
    (G::Neg, "", [NAN, -INF, INF]),
    (G::Abs, "", [NAN, INF, INF]),
    (G::Exp, "", [NAN, INF, 0.0]),
    (G::Log, "", [NAN, INF, NAN]),
    (G::Sqrt, "", [NAN, INF, NAN]),
    (G::Reciprocal, "", [NAN, 0.0, 0.0]),
    (G::Erf, "", [NAN, 1.0, -1.0]),
    (G::Tanh, "", [NAN, 1.0, -1.0]),
    (G::Sigmoid, "", [NAN, 1.0, 0.0]),
    (G::Relu, "", [NAN, INF, 0.0]),
    (G::Sin, "", [NAN, NAN, NAN]),
    (G::Cos, "", [NAN, NAN, NAN]),
    (G::Tan, "", [NAN, NAN, NAN]),
    (G::Asin, "", [NAN, NAN, NAN]),
    (G::Acos, "", [NAN, NAN, NAN]),
    (G::Atan, "", [NAN, FRAC_PI_2, -FRAC_PI_2]),
    (G::Sinh, "", [NAN, INF, -INF]),
    (G::Cosh, "", [NAN, INF, INF]),
    (G::Asinh, "", [NAN, INF, -INF]),
    (G::Acosh, "", [NAN, INF, NAN]),
    (G::Atanh, "", [NAN, NAN, NAN]),
    (G::Sign, "", [NAN, 1.0, -1.0]),
    (G::Floor, "", [NAN, INF, -INF]),
    (G::Ceil, "", [NAN, INF, -INF]),
    (G::Round, "", [NAN, INF, -INF]),
    // -inf · 0: x times a clamp (or an erf) that has reached 0.
    (G::HardSwish, "", [NAN, INF, NAN]),
    (G::Gelu, "", [NAN, INF, NAN]),
    (G::Gelu, "{approximate = \"tanh\"}", [NAN, INF, NAN]),
    (G::LeakyRelu, "{alpha = 0.1 : f32}", [NAN, INF, -INF]),
    (G::HardSigmoid, "", [NAN, 1.0, 0.0]),
    (
        G::Clip,
        "{min = 0.0 : f32, max = 6.0 : f32}",
        [NAN, 6.0, 0.0],
    ),
];

/// What an op makes of two values, or of a row.
pub type Binary = fn(f64, f64) -> f64;
pub type Reduction = fn(&[f64]) -> f64;

/// Every float binary op and what IEEE 754 (C's `pow`, numpy's
/// `maximum` and `minimum`) makes of two values.
pub const BINARY: &[(G, Binary)] = &[
    (G::Add, |a, b| a + b),
    (G::Sub, |a, b| a - b),
    (G::Mul, |a, b| a * b),
    (G::Div, |a, b| a / b),
    // pow(NaN, 0) and pow(1, NaN) are 1.
    (G::Pow, f64::powf),
    (G::Max, |a, b| {
        if a.is_nan() || b.is_nan() {
            NAN
        } else {
            a.max(b)
        }
    }),
    (G::Min, |a, b| {
        if a.is_nan() || b.is_nan() {
            NAN
        } else {
            a.min(b)
        }
    }),
];

/// Every reduction along the last axis (with its attributes) and its
/// value on one row.
pub const REDUCTIONS: &[(G, &str, Reduction)] = &[
    (G::ReduceSum, "{axes = array<i64: 1>}", |r| r.iter().sum()),
    (G::ReduceMean, "{axes = array<i64: 1>}", |r| {
        r.iter().sum::<f64>() / r.len() as f64
    }),
    (G::ReduceProd, "{axes = array<i64: 1>}", |r| {
        r.iter().product()
    }),
    (G::ReduceMax, "{axes = array<i64: 1>}", |r| {
        let m = r.iter().copied().fold(-INF, f64::max);
        if r.iter().any(|x| x.is_nan()) { NAN } else { m }
    }),
    (G::ReduceMin, "{axes = array<i64: 1>}", |r| {
        let m = r.iter().copied().fold(INF, f64::min);
        if r.iter().any(|x| x.is_nan()) { NAN } else { m }
    }),
    // The first NaN (or the last), as numpy's argmax and argmin; else the
    // first (or last) best.
    (G::ArgMax, "{axis = 1}", |r| best(r, |a, b| a > b, false)),
    (G::ArgMax, "{axis = 1, select_last_index = 1}", |r| {
        best(r, |a, b| a > b, true)
    }),
    (G::ArgMin, "{axis = 1}", |r| best(r, |a, b| a < b, false)),
    (G::ArgMin, "{axis = 1, select_last_index = 1}", |r| {
        best(r, |a, b| a < b, true)
    }),
];

/// The index of the best of `row` by `better`, or of a NaN where there is
/// one; the first of equals, or the last.
fn best(row: &[f64], better: fn(f64, f64) -> bool, last: bool) -> f64 {
    let order: Vec<usize> = if last {
        (0..row.len()).rev().collect()
    } else {
        (0..row.len()).collect()
    };
    if let Some(&i) = order.iter().find(|&&i| row[i].is_nan()) {
        return i as f64;
    }
    let mut best = order[0];
    for &i in &order {
        if better(row[i], row[best]) {
            best = i;
        }
    }
    best as f64
}

/// A row's softmax: NaN throughout where a NaN or +inf is in it (+inf
/// less +inf, as numpy's and onnxruntime's max-subtracting softmax).
pub fn softmax(row: &[f64]) -> Vec<f64> {
    if row.iter().any(|x| x.is_nan() || *x == INF) {
        return vec![NAN; row.len()];
    }
    let m = row.iter().copied().fold(-INF, f64::max);
    let e: Vec<f64> = row.iter().map(|x| (x - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|x| x / s).collect()
}

/// Rows of the inputs: `ROWS` rows of `COLUMNS`.
pub const ROWS: usize = 8;
pub const COLUMNS: usize = 16;

/// The module computing every op of the tables on `x` and `y` (both
/// `ROWS`x`COLUMNS` of `elem`), its results in the tables' order: the
/// unary ops, the binary ops, the reductions along the last axis, softmax
/// along it, and a 1x2 max pool.
pub fn module(elem: &str) -> String {
    let t = format!("tensor<{ROWS}x{COLUMNS}x{elem}>");
    let row = format!("tensor<{ROWS}x1x{elem}>");
    let index = format!("tensor<{ROWS}x1xi64>");
    let pooled = format!("tensor<1x1x{ROWS}x{}x{elem}>", COLUMNS / 2);
    let mut body = String::new();
    let mut results: Vec<(String, String)> = Vec::new();
    let mut add = |body: &mut String, line: String, ty: &str| {
        let name = format!("%r{}", results.len());
        body.push_str(&format!("    {name} = {line}\n"));
        results.push((name, ty.to_string()));
    };
    for (op, attrs, _) in UNARY {
        let op = op.name();
        add(&mut body, format!("{op} %x {attrs} : {t} -> {t}"), &t);
    }
    for (op, _) in BINARY {
        let op = op.name();
        add(&mut body, format!("{op} %x, %y : {t}, {t} -> {t}"), &t);
    }
    for (op, attrs, _) in REDUCTIONS {
        let ty = if matches!(op, G::ArgMax | G::ArgMin) {
            &index
        } else {
            &row
        };
        let op = op.name();
        add(&mut body, format!("{op} %x {attrs} : {t} -> {ty}"), ty);
    }
    let softmax = G::Softmax.name();
    add(
        &mut body,
        format!("{softmax} %x {{axis = 1}} : {t} -> {t}"),
        &t,
    );
    let image = format!("tensor<1x1x{ROWS}x{COLUMNS}x{elem}>");
    body.push_str(&format!(
        "    %image = {} %x {{shape = array<i64: 1, 1, {ROWS}, {COLUMNS}>}} : {t} -> {image}\n",
        G::Reshape.name()
    ));
    add(
        &mut body,
        format!(
            "{} %image {{kernel_shape = array<i64: 1, 2>, strides = array<i64: 1, 2>}} : {image} -> {pooled}",
            G::MaxPool.name()
        ),
        &pooled,
    );
    let names: Vec<&str> = results.iter().map(|(n, _)| n.as_str()).collect();
    let types: Vec<&str> = results.iter().map(|(_, t)| t.as_str()).collect();
    format!(
        "module {{\n  func.func @main(%x: {t}, %y: {t}) -> ({}) {{\n{body}    func.return {} : {}\n  }}\n}}\n",
        types.join(", "),
        names.join(", "),
        types.join(", ")
    )
}

/// Inputs holding every special value, each beside every other in `y`,
/// and ordinary values in [-3, 3] around them (some outside the domains
/// of log, sqrt, asin, acos, acosh and atanh).
pub fn inputs() -> (Vec<f64>, Vec<f64>) {
    let specials = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0];
    let n = ROWS * COLUMNS;
    let ordinary = |i: usize| ((i * 37 % 61) as f64 / 10.0) - 3.0;
    let mut x: Vec<f64> = (0..n).map(ordinary).collect();
    let mut y: Vec<f64> = (0..n).map(|i| ordinary(i + 7)).collect();
    // Every pair of specials, seven to a row in the first seven rows;
    // the rest of those rows and the last row ordinary.
    let mut k = 0;
    for a in specials {
        for b in specials {
            let at = (k / 7) * COLUMNS + k % 7;
            x[at] = a;
            y[at] = b;
            k += 1;
        }
    }
    (x, y)
}

/// Whether `got` is `want`: both NaN, the same infinity, or numbers
/// within `tol` of each other relative to `want`.
pub fn same(got: f64, want: f64, tol: f64) -> bool {
    if want.is_nan() || want.is_infinite() {
        return got.is_nan() == want.is_nan() && (want.is_nan() || got == want);
    }
    got.is_finite() && (got - want).abs() <= tol * (1.0 + want.abs())
}

/// Where the module's `results` (in its order, each flattened) differ
/// from the tables on inputs `x` and `y`: the unary ops where `x` is NaN
/// or infinite, everything else everywhere.
pub fn wrong_values(results: &[Vec<f64>], x: &[f64], y: &[f64], tol: f64) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut expect = |op: &str, at: usize, got: f64, want: f64, args: String| {
        if !same(got, want, tol) {
            wrong.push(format!("{op}({args}) at {at}: got {got}, want {want}"));
        }
    };
    let mut results = results.iter();
    for (op, _, at) in UNARY {
        let (op, r) = (op.name(), results.next().expect("a result per unary op"));
        for (i, &v) in x.iter().enumerate() {
            let special = if v.is_nan() {
                Some(at[0])
            } else if v == INF {
                Some(at[1])
            } else if v == -INF {
                Some(at[2])
            } else {
                None
            };
            if let Some(want) = special {
                expect(op, i, r[i], want, format!("{v}"));
            }
        }
    }
    for (op, f) in BINARY {
        let (op, r) = (op.name(), results.next().expect("a result per binary op"));
        for i in 0..x.len() {
            expect(op, i, r[i], f(x[i], y[i]), format!("{}, {}", x[i], y[i]));
        }
    }
    let rows: Vec<&[f64]> = x.chunks(COLUMNS).collect();
    for (op, _, f) in REDUCTIONS {
        let (op, r) = (op.name(), results.next().expect("a result per reduction"));
        for (i, row) in rows.iter().enumerate() {
            expect(op, i, r[i], f(row), format!("row {i}"));
        }
    }
    let r = results.next().expect("softmax's result");
    for (i, row) in rows.iter().enumerate() {
        for (j, want) in softmax(row).into_iter().enumerate() {
            expect(
                G::Softmax.name(),
                i * COLUMNS + j,
                r[i * COLUMNS + j],
                want,
                format!("row {i}"),
            );
        }
    }
    let r = results.next().expect("max_pool's result");
    let max = BINARY.iter().find(|(op, _)| *op == G::Max).expect("max").1;
    for (i, pair) in x.chunks(2).enumerate() {
        expect(
            G::MaxPool.name(),
            i,
            r[i],
            max(pair[0], pair[1]),
            format!("{}, {}", pair[0], pair[1]),
        );
    }
    wrong
}

/// How many results [`module`] has.
pub fn result_count() -> usize {
    UNARY.len() + BINARY.len() + REDUCTIONS.len() + 2
}

/// The module on `backend`, in f32 and f16, against the interpreter
/// (every value) and, in f32, against the tables.
pub fn special_values_match(backend: &str) {
    let dir = super::scratch_dir(&format!("special-{backend}"));
    let (x, y) = inputs();
    for (elem, ty, tol) in [
        (ircc_core::ElemType::F32, "f32", 1e-3),
        (ircc_core::ElemType::F16, "f16", 1e-2),
    ] {
        let file = dir.join(format!("special_{ty}.ir"));
        std::fs::write(&file, module(ty)).unwrap();
        let mut paths = Vec::new();
        for (name, v) in [("x", &x), ("y", &y)] {
            let t = ircc_core::Tensor::float(
                elem,
                ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[ROWS, COLUMNS]), v.clone())
                    .unwrap(),
            );
            let path = dir.join(format!("{name}_{ty}.npy"));
            ircc_reference::write_npy(&path, &t).unwrap();
            paths.push((name, path));
        }
        let inputs: Vec<(&str, &std::path::Path)> =
            paths.iter().map(|(n, p)| (*n, p.as_path())).collect();
        let results = |out: &str, extra: &[&str]| -> Vec<Vec<f64>> {
            super::run_named(&file, &inputs, &dir.join(out), extra, result_count())
                .iter()
                .map(|t| t.to_f64().iter().copied().collect())
                .collect()
        };
        let want = results(&format!("want_{ty}"), &[]);
        let got = results(
            &format!("got_{ty}"),
            &["--pipeline", "smartmem", "--backend", backend],
        );
        let mut wrong = Vec::new();
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            for (i, (&a, &b)) in g.iter().zip(w).enumerate() {
                if !same(a, b, tol) {
                    wrong.push(format!("result {k} at {i}: {backend} {a}, interpreter {b}"));
                }
            }
        }
        if ty == "f32" {
            wrong.extend(wrong_values(&got, &x, &y, tol));
        }
        assert!(wrong.is_empty(), "{backend} {ty}:\n{}", wrong.join("\n"));
    }
}
