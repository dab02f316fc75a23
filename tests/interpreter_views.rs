//! Views feeding every op class: a random chain of layout ops (transpose,
//! slice with steps of either sign, expand, reshape, concatenation along
//! any axis) ends in a matmul, a reduction, a softmax, a layer norm, an
//! element-wise op or a gather. The interpreter runs the chain and the op
//! as one function; the oracle computes the chain with naive index loops
//! here, copies it into a fresh row-major tensor and runs the op alone on
//! that. The two must agree bit for bit: an op must not depend on how its
//! operand's array happens to be laid out (ndarray's concatenation along
//! the last axis once gave a matmul an array it could not reshape).

use ircc_core::interp::NoWeights;
use ircc_core::{ElemType, Tensor, parse_module};
use ndarray::{ArrayD, IxDyn};
use proptest::prelude::*;

/// A row-major tensor of the naive oracle.
#[derive(Clone, Debug)]
struct Naive {
    shape: Vec<usize>,
    values: Vec<f64>,
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Every index of `shape` in row-major order.
fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let n: usize = shape.iter().product();
    let st = strides(shape);
    (0..n)
        .map(|flat| st.iter().zip(shape).map(|(s, d)| flat / s % d).collect())
        .collect()
}

impl Naive {
    fn at(&self, index: &[usize]) -> f64 {
        let flat: usize = index
            .iter()
            .zip(strides(&self.shape))
            .map(|(i, s)| i * s)
            .sum();
        self.values[flat]
    }

    fn build(shape: Vec<usize>, mut f: impl FnMut(&[usize]) -> f64) -> Naive {
        let values = indices(&shape).iter().map(|i| f(i)).collect();
        Naive { shape, values }
    }

    fn tensor(&self) -> Tensor {
        Tensor::float(
            ElemType::F32,
            ArrayD::from_shape_vec(IxDyn(&self.shape), self.values.clone()).unwrap(),
        )
    }
}

fn ty(shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("tensor<{}xf32>", dims.join("x"))
}

fn ints(v: &[i64]) -> String {
    let v: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("array<i64: {}>", v.join(", "))
}

/// One layout op of the chain, its parameters drawn from `seed`.
#[derive(Clone, Debug)]
enum Step {
    Transpose(u64),
    Slice(u64),
    Expand(u64),
    Reshape(u64),
    Concat(u64),
}

/// The op the chain feeds.
#[derive(Clone, Copy, Debug)]
enum Consumer {
    Matmul,
    ReduceSum,
    Softmax,
    LayerNorm,
    Elementwise,
    Gather,
}

fn step() -> impl Strategy<Value = Step> {
    (0..5u8, any::<u64>()).prop_map(|(k, s)| match k {
        0 => Step::Transpose(s),
        1 => Step::Slice(s),
        2 => Step::Expand(s),
        3 => Step::Reshape(s),
        _ => Step::Concat(s),
    })
}

fn consumer() -> impl Strategy<Value = Consumer> {
    prop_oneof![
        Just(Consumer::Matmul),
        Just(Consumer::ReduceSum),
        Just(Consumer::Softmax),
        Just(Consumer::LayerNorm),
        Just(Consumer::Elementwise),
        Just(Consumer::Gather),
    ]
}

/// Applies `step` to `x` (named `%{at}`): the op's IR line defining
/// `%{at+1}` and the naive result.
fn apply(step: &Step, x: &Naive, at: usize) -> (String, Naive) {
    let rank = x.shape.len();
    let (src, dst) = (format!("%v{at}"), format!("%v{}", at + 1));
    let line = |op: &str, attrs: String, y: &Naive| {
        format!(
            "  {dst} = graph.{op} {src} {attrs} : {} -> {}\n",
            ty(&x.shape),
            ty(&y.shape)
        )
    };
    match *step {
        Step::Transpose(s) => {
            let mut perm: Vec<usize> = (0..rank).collect();
            let mut s = s;
            for i in (1..rank).rev() {
                perm.swap(i, (s % (i as u64 + 1)) as usize);
                s /= i as u64 + 1;
            }
            let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
            let y = Naive::build(shape, |o| {
                let mut i = vec![0; rank];
                for (k, &p) in perm.iter().enumerate() {
                    i[p] = o[k];
                }
                x.at(&i)
            });
            let perm: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
            (
                line("transpose", format!("{{perm = {}}}", ints(&perm)), &y),
                y,
            )
        }
        Step::Slice(s) => {
            let axis = (s % rank as u64) as usize;
            let d = x.shape[axis] as i64;
            let step = [1i64, 2, -1, -2][(s / 7 % 4) as usize];
            let start = (s / 31 % d as u64) as i64;
            let (first, count) = if step > 0 {
                (start, (d - start + step - 1) / step)
            } else {
                (d - 1 - start, (d - start + (-step) - 1) / -step)
            };
            let end = if step > 0 { d } else { -d - 1 };
            let mut shape = x.shape.clone();
            shape[axis] = count as usize;
            let y = Naive::build(shape, |o| {
                let mut i = o.to_vec();
                i[axis] = (first + o[axis] as i64 * step) as usize;
                x.at(&i)
            });
            let attrs = format!(
                "{{starts = {}, ends = {}, axes = {}, steps = {}}}",
                ints(&[first]),
                ints(&[end]),
                ints(&[axis as i64]),
                ints(&[step])
            );
            (line("slice", attrs, &y), y)
        }
        Step::Expand(s) => {
            // A new leading axis of 2, and every axis of 1 grown to 3.
            let lead = s % 2 == 0;
            let mut shape: Vec<usize> = x
                .shape
                .iter()
                .map(|&d| if d == 1 { 3 } else { d })
                .collect();
            let mut target: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
            if lead && rank < 5 {
                shape.insert(0, 2);
                target.insert(0, 2);
            }
            let extra = shape.len() - rank;
            let y = Naive::build(shape, |o| {
                let i: Vec<usize> = o[extra..]
                    .iter()
                    .zip(&x.shape)
                    .map(|(&i, &d)| if d == 1 { 0 } else { i })
                    .collect();
                x.at(&i)
            });
            (
                line("expand", format!("{{shape = {}}}", ints(&target)), &y),
                y,
            )
        }
        Step::Reshape(s) => {
            // Merge two neighbouring axes, or split one of even extent.
            let mut shape = x.shape.clone();
            let axis = (s % rank as u64) as usize;
            if s / 5 % 2 == 0 && axis + 1 < rank {
                let merged = shape.remove(axis + 1);
                shape[axis] *= merged;
            } else if shape[axis].is_multiple_of(2) && rank < 5 {
                shape[axis] /= 2;
                shape.insert(axis, 2);
            } else {
                shape.insert(axis, 1);
            }
            let y = Naive {
                shape: shape.clone(),
                values: x.values.clone(),
            };
            let target: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
            (
                line("reshape", format!("{{shape = {}}}", ints(&target)), &y),
                y,
            )
        }
        Step::Concat(s) => {
            // The tensor beside itself along any axis.
            let axis = (s % rank as u64) as usize;
            let mut shape = x.shape.clone();
            let d = shape[axis];
            shape[axis] *= 2;
            let y = Naive::build(shape, |o| {
                let mut i = o.to_vec();
                i[axis] %= d;
                x.at(&i)
            });
            let line = format!(
                "  {dst} = graph.concat {src}, {src} {{axis = {axis}}} : {}, {} -> {}\n",
                ty(&x.shape),
                ty(&x.shape),
                ty(&y.shape)
            );
            (line, y)
        }
    }
}

/// The consumer's IR, reading `%{v}` of `x`'s shape; returns the lines,
/// the result's type and the weight input's shape, if it takes one.
fn consume(c: Consumer, v: &str, x: &[usize]) -> (String, String, Option<Vec<usize>>) {
    let t = ty(x);
    let last = *x.last().unwrap();
    match c {
        Consumer::Matmul => {
            let mut out = x.to_vec();
            *out.last_mut().unwrap() = 3;
            let body = format!(
                "  %y = graph.matmul {v}, %w : {t}, {} -> {}\n",
                ty(&[last, 3]),
                ty(&out)
            );
            (body, ty(&out), Some(vec![last, 3]))
        }
        Consumer::ReduceSum => {
            let mut out = x.to_vec();
            out[0] = 1;
            let body = format!(
                "  %y = graph.reduce_sum {v} {{axes = array<i64: 0>}} : {t} -> {}\n",
                ty(&out)
            );
            (body, ty(&out), None)
        }
        Consumer::Softmax => (
            format!("  %y = graph.softmax {v} {{axis = -1}} : {t} -> {t}\n"),
            t.clone(),
            None,
        ),
        Consumer::LayerNorm => (
            format!(
                "  %y = graph.layer_norm {v}, %w {{axis = -1}} : {t}, {} -> {t}\n",
                ty(&[last])
            ),
            t.clone(),
            Some(vec![last]),
        ),
        Consumer::Elementwise => (
            format!(
                "  %e = graph.exp {v} : {t} -> {t}\n  %y = graph.add %e, %w : {t}, {} -> {t}\n",
                ty(&[last])
            ),
            t.clone(),
            Some(vec![last]),
        ),
        Consumer::Gather => {
            let mut out = x.to_vec();
            out[0] = 2;
            let body = format!(
                "  %i = graph.constant {{value = dense<[0, -1]> : tensor<2xi64>}} : () -> tensor<2xi64>\n  %y = graph.gather {v}, %i {{axis = 0}} : {t}, tensor<2xi64> -> {}\n",
                ty(&out)
            );
            (body, ty(&out), None)
        }
    }
}

fn eval(ir: &str, inputs: Vec<Tensor>) -> Vec<Tensor> {
    let registry = ircc_dialects::registry().unwrap();
    let module = parse_module(ir, Some("views.ir")).unwrap_or_else(|e| panic!("{e}\n{ir}"));
    ircc_core::verify::verify(&module, &registry, Default::default())
        .unwrap_or_else(|e| panic!("{e}\n{ir}"));
    ircc_reference::run_function(&module, &registry, "main", inputs, &mut NoWeights)
        .unwrap_or_else(|e| panic!("{e}\n{ir}"))
}

fn values(shape: &[usize], seed: u64) -> Naive {
    let mut state = seed | 1;
    Naive::build(shape.to_vec(), |_| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 40) as f64 / (1u64 << 24) as f64) * 2.0 - 1.0
    })
}

/// The function running `body` on `%v0` (and `%w`), returning `%y`.
fn function(x: &[usize], w: &Option<Vec<usize>>, body: &str, result: &str) -> String {
    let w = w
        .as_ref()
        .map_or(String::new(), |w| format!(", %w: {}", ty(w)));
    format!(
        "func.func @main(%v0: {}{w}) -> {result} {{\n{body}  func.return %y : {result}\n}}\n",
        ty(x)
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn ops_read_views_as_they_read_contiguous_tensors(
        shape in prop::collection::vec(1usize..5, 2..4),
        steps in prop::collection::vec(step(), 1..5),
        consumer in consumer(),
        seed in any::<u64>(),
    ) {
        let x = values(&shape, seed);
        let (mut chain, mut cur) = (String::new(), x.clone());
        for (i, s) in steps.iter().enumerate() {
            let (line, next) = apply(s, &cur, i);
            chain += &line;
            cur = next;
        }
        prop_assume!(cur.values.len() <= 1 << 14);
        let last = format!("%v{}", steps.len());
        let (body, result, w) = consume(consumer, &last, &cur.shape);
        let weight = w.as_ref().map(|w| values(w, seed ^ 0x5eed).tensor());
        let mut inputs = vec![x.tensor()];
        inputs.extend(weight.clone());
        // The chain alone computes what the naive loops do.
        let chain_only = function(&shape, &None, &format!("{chain}  %y = graph.identity {last} : {} -> {}\n", ty(&cur.shape), ty(&cur.shape)), &ty(&cur.shape));
        let viewed = eval(&chain_only, vec![x.tensor()]);
        prop_assert_eq!(viewed[0].to_f64().iter().copied().collect::<Vec<_>>(), cur.values.clone());
        // The op after the chain equals the op on a contiguous copy.
        let got = eval(&function(&shape, &w, &(chain + &body), &result), inputs);
        let mut alone = vec![cur.tensor()];
        alone.extend(weight);
        let want = eval(&function(&cur.shape, &w, &body.replace(&last, "%v0"), &result), alone);
        prop_assert_eq!(got[0].to_f64(), want[0].to_f64(), "{:?} then {:?}", steps, consumer);
    }
}
