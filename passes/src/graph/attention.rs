//! `graph.fold-attention`: scaled dot-product attention as exporters spell
//! it in ops becomes one `graph.attention`, which the fused attention
//! templates compute without ever storing the scores.
//!
//! The pattern, from the product of the weights with `v` back to the
//! product of the queries with the keys (S queries, L keys, at most two
//! batch axes, which all three products share):
//!
//! ```text
//! scores = matmul(q · a, kt · b)        q [.., S, D], kt [.., D, L]; a, b scalar constants, optional
//! scores = scores · c | scores / c      a scalar constant
//! scores = scores + m                   m a float tensor broadcasting to the scores
//! scores = reshape(scores)              keeping the last two axes (Swin's shifted windows
//!                                       add their mask over five axes)
//! y      = matmul(softmax(scores, axis = -1), v)
//! ```
//!
//! The middle three repeat in any order. Each is affine in the product,
//! so the scores are `scale · q kt + mask`, where `scale` is the product of
//! the factors and `mask` the chain applied to zeros; that is
//! `graph.attention(q, transpose(kt), v, mask) {scale}`. Every value
//! between the two products feeds only the next op, so the pattern's ops
//! all go. The transpose is a layout op, which layout elimination turns
//! into a view of `kt`.
//!
//! One difference is by design: a query whose keys are all masked with
//! `-inf` gets zeros from `graph.attention` (as ONNX's Attention defines)
//! where the softmax gave NaN.

use crate::decl::GraphFoldAttentionOptions;
use ircc_core::ir::{BlockId, OpBuilder, ValueId};
use ircc_core::pass::{FunctionPass, PassContext, PassResult};
use ircc_core::{Attribute, Diagnostic, Diagnostics, ElemType, Module, OpId, Type};
use ircc_dialects::graph::{GraphOp, ops};

/// One op between the two products, in order from the scores' product.
enum Step {
    Scale(f64),
    AddMask(ValueId),
    Reshape(Vec<i64>),
}

/// A matched pattern: the op of each product, the softmax, the ops
/// between, and the operands the fold reads.
struct Match {
    scores: OpId,
    softmax: OpId,
    weighted: OpId,
    between: Vec<OpId>,
    steps: Vec<Step>,
    /// The scalar products of q and kt that were peeled off.
    factors: Vec<OpId>,
    q: ValueId,
    kt: ValueId,
    v: ValueId,
    scale: f64,
}

pub struct FoldAttention;

fn shape(m: &Module, v: ValueId) -> Option<Vec<i64>> {
    m.value_type(v).as_tensor().map(|t| t.shape.clone())
}

fn elem(m: &Module, v: ValueId) -> Option<ElemType> {
    m.value_type(v).as_tensor().map(|t| t.elem)
}

/// The value of a one-element float constant.
fn scalar_constant(m: &Module, v: ValueId) -> Option<f64> {
    ircc_dialects::constant_of(m, v)
        .filter(|c| c.ty.num_elements() == 1 && c.ty.elem.is_float())
        .and_then(|c| c.splat())
}

/// Whether `v` has exactly one reader.
fn single_use(m: &Module, v: ValueId) -> bool {
    m.value(v).uses.len() == 1
}

/// `v` without a scalar constant factor, the factor, and the product.
fn peel_factor(m: &Module, v: ValueId) -> (ValueId, f64, Option<OpId>) {
    let Some(op) = m.defining_op(v) else {
        return (v, 1.0, None);
    };
    if GraphOp::of(m, op) != Some(GraphOp::Mul) {
        return (v, 1.0, None);
    }
    let o = m.op(op);
    let (x, c) = (o.operands[0], o.operands[1]);
    // The factor must not broadcast the operand to a larger shape.
    match scalar_constant(m, c) {
        Some(f) if shape(m, x) == shape(m, v) => (x, f, Some(op)),
        _ => (v, 1.0, None),
    }
}

/// The most ops between the two products: exporters write at most four
/// (Swin's shifted windows), and a bound keeps the search short on any
/// input.
const MAX_STEPS: usize = 8;

/// The chain from the scores' product up to `x` (the softmax's operand),
/// if `x` is one: steps in order from the product, at most `budget`.
fn chain(
    m: &Module,
    x: ValueId,
    budget: usize,
    steps: &mut Vec<Step>,
    between: &mut Vec<OpId>,
) -> Option<OpId> {
    let op = m.defining_op(x)?;
    if !single_use(m, x) {
        return None;
    }
    if budget == 0 {
        return (GraphOp::of(m, op) == Some(GraphOp::Matmul) && is_product(m, op)).then_some(op);
    }
    let o = m.op(op);
    let full = shape(m, x)?;
    let step = match GraphOp::of(m, op)? {
        GraphOp::Matmul => return is_product(m, op).then_some(op),
        GraphOp::Mul | GraphOp::Div => {
            // A factor that broadcasts the scores to more axes is not a scale.
            if shape(m, o.operands[0])? != full {
                return None;
            }
            let c = scalar_constant(m, o.operands[1])?;
            let factor = if GraphOp::of(m, op) == Some(GraphOp::Mul) {
                c
            } else {
                1.0 / c
            };
            (o.operands[0], Step::Scale(factor))
        }
        GraphOp::Add => {
            // The scores are the operand of the add's full shape whose
            // chain reaches a product; the mask the other.
            let (a, b) = (o.operands[0], o.operands[1]);
            let found = [(a, b), (b, a)].into_iter().find_map(|(s, mask)| {
                if shape(m, s)? != full || !elem(m, mask)?.is_float() {
                    return None;
                }
                let (mut inner, mut ops) = (Vec::new(), Vec::new());
                let product = chain(m, s, budget - 1, &mut inner, &mut ops)?;
                Some((product, inner, ops, mask))
            })?;
            let (product, inner, ops, mask) = found;
            steps.extend(inner);
            between.extend(ops);
            steps.push(Step::AddMask(mask));
            between.push(op);
            return Some(product);
        }
        GraphOp::Reshape => {
            let from = shape(m, o.operands[0])?;
            let keeps_last_two = from.len() >= 2
                && full.len() >= 2
                && from[from.len() - 2..] == full[full.len() - 2..];
            if !keeps_last_two {
                return None;
            }
            (o.operands[0], Step::Reshape(full))
        }
        _ => return None,
    };
    let product = chain(m, step.0, budget - 1, steps, between)?;
    steps.push(step.1);
    between.push(op);
    Some(product)
}

/// A product of two operands of at least two axes, of one float type.
fn is_product(m: &Module, op: OpId) -> bool {
    let o = m.op(op);
    o.operands.len() == 2
        && o.operands.iter().all(|&v| {
            shape(m, v).is_some_and(|s| s.len() >= 2) && elem(m, v).is_some_and(|e| e.is_float())
        })
}

/// The attention pattern ending in the product `weighted`, if it is one.
fn match_at(m: &Module, weighted: OpId) -> Option<Match> {
    if GraphOp::of(m, weighted) != Some(GraphOp::Matmul) || !is_product(m, weighted) {
        return None;
    }
    let (p, v) = (m.op(weighted).operands[0], m.op(weighted).operands[1]);
    let softmax = m.defining_op(p)?;
    let s = ops::Softmax::new(m, softmax)?;
    let scores_shape = shape(m, s.x())?;
    let rank = scores_shape.len() as i64;
    if !single_use(m, p) || (s.axis() != -1 && s.axis() != rank - 1) {
        return None;
    }
    let (mut steps, mut between) = (Vec::new(), Vec::new());
    let scores = chain(m, s.x(), MAX_STEPS, &mut steps, &mut between)?;
    // The chain's reshapes must come back to the product's shape.
    if shape(m, m.op(scores).results[0])? != scores_shape {
        return None;
    }
    let (q, a, qa) = peel_factor(m, m.op(scores).operands[0]);
    let (kt, b, ktb) = peel_factor(m, m.op(scores).operands[1]);
    let (sq, skt, sv) = (shape(m, q)?, shape(m, kt)?, shape(m, v)?);
    let product_shape = shape(m, m.op(scores).results[0])?;
    // q [.., S, D], kt [.., D, L], v [.., L, Dv], one batch for all three
    // and at most two batch axes (graph.attention's batch and heads).
    let r = sq.len();
    let batch = &sq[..r - 2];
    let consistent = r <= 4
        && skt.len() == r
        && sv.len() == r
        && product_shape.len() == r
        && skt[..r - 2] == *batch
        && sv[..r - 2] == *batch
        && product_shape[..r - 2] == *batch
        && skt[r - 2] == sq[r - 1]
        && sv[r - 2] == skt[r - 1]
        && [q, kt, v].iter().all(|&x| elem(m, x) == elem(m, p));
    if !consistent {
        return None;
    }
    let mut scale = a * b;
    for step in &steps {
        if let Step::Scale(c) = step {
            scale *= c;
        }
    }
    Some(Match {
        scores,
        softmax,
        weighted,
        between,
        steps,
        factors: qa.into_iter().chain(ktb).collect(),
        q,
        kt,
        v,
        scale,
    })
}

/// Builds graph ops before `at`, each result typed by its infer hook.
struct Emitter<'a, 'c> {
    m: &'a mut Module,
    ctx: &'a PassContext<'c>,
    at: OpId,
}

impl Emitter<'_, '_> {
    fn op(
        &mut self,
        kind: GraphOp,
        operands: Vec<ValueId>,
        attrs: Vec<(&str, Attribute)>,
    ) -> Result<ValueId, String> {
        let loc = self.m.op(self.at).loc.clone();
        let mut b = OpBuilder::new(kind.name())
            .operands(operands)
            .results([Type::Index])
            .loc(loc);
        for (k, v) in attrs {
            b = b.attr(k, v);
        }
        let op = self.m.create_op(b);
        self.m.insert_before(self.at, op);
        self.ctx.registry.infer_result_types(self.m, op)?;
        Ok(self.m.op(op).results[0])
    }

    fn reshape(&mut self, x: ValueId, to: Vec<i64>) -> Result<ValueId, String> {
        if shape(self.m, x).as_ref() == Some(&to) {
            return Ok(x);
        }
        self.op(
            GraphOp::Reshape,
            vec![x],
            vec![("shape", Attribute::DenseI64Array(to))],
        )
    }

    /// `x` with ones before its axes up to four.
    fn four_axes(&mut self, x: ValueId) -> Result<ValueId, String> {
        let s = shape(self.m, x).ok_or("not a tensor")?;
        let mut to = vec![1; 4 - s.len()];
        to.extend(s);
        self.reshape(x, to)
    }

    /// The chain's adds applied to zeros: the mask, if there is one.
    fn mask(&mut self, steps: &[Step], mut full: Vec<i64>) -> Result<Option<ValueId>, String> {
        let mut mask: Option<ValueId> = None;
        for step in steps {
            mask = match (step, mask) {
                (Step::Scale(_), None) => None,
                (Step::Scale(c), Some(x)) => {
                    let e = elem(self.m, x).ok_or("not a tensor")?;
                    let factor = self.scalar(*c, e)?;
                    Some(self.op(GraphOp::Mul, vec![x, factor], vec![])?)
                }
                (Step::AddMask(x), None) => Some(*x),
                (Step::AddMask(x), Some(y)) => Some(self.op(GraphOp::Add, vec![y, *x], vec![])?),
                (Step::Reshape(to), None) => {
                    full = to.clone();
                    None
                }
                (Step::Reshape(to), Some(x)) => {
                    // A broadcast mask takes the scores' shape first.
                    let x = if shape(self.m, x).as_ref() == Some(&full) {
                        x
                    } else {
                        self.op(
                            GraphOp::Expand,
                            vec![x],
                            vec![("shape", Attribute::DenseI64Array(full.clone()))],
                        )?
                    };
                    full = to.clone();
                    Some(self.reshape(x, to.clone())?)
                }
            };
        }
        Ok(mask)
    }

    /// A scalar constant of type `e`.
    fn scalar(&mut self, c: f64, e: ElemType) -> Result<ValueId, String> {
        let ty = ircc_core::TensorType::new(vec![], e);
        let dense =
            ircc_core::DenseAttr::new(ty.clone(), ircc_core::DenseValues::Float(vec![c].into()))?;
        let loc = self.m.op(self.at).loc.clone();
        let op = self.m.create_op(
            OpBuilder::new(GraphOp::Constant.name())
                .attr("value", Attribute::Dense(dense))
                .results([Type::Tensor(ty)])
                .loc(loc),
        );
        self.m.insert_before(self.at, op);
        Ok(self.m.op(op).results[0])
    }
}

/// Replaces the pattern by `graph.attention`; the value it computes.
fn fold(m: &mut Module, ctx: &PassContext, found: &Match) -> Result<ValueId, String> {
    let result = m.op(found.weighted).results[0];
    let out_shape = shape(m, result).ok_or("not a tensor")?;
    let product_shape = shape(m, m.op(found.scores).results[0]).ok_or("not a tensor")?;
    let mut e = Emitter {
        m,
        ctx,
        at: found.weighted,
    };
    let mask = e.mask(&found.steps, product_shape)?;
    let q = e.four_axes(found.q)?;
    let kt = e.four_axes(found.kt)?;
    let k = e.op(
        GraphOp::Transpose,
        vec![kt],
        vec![("perm", Attribute::DenseI64Array(vec![0, 1, 3, 2]))],
    )?;
    let v = e.four_axes(found.v)?;
    let mut operands = vec![q, k, v];
    operands.extend(mask);
    let y = e.op(
        GraphOp::Attention,
        operands,
        vec![("scale", Attribute::f32(found.scale))],
    )?;
    e.reshape(y, out_shape)
}

impl FunctionPass for FoldAttention {
    fn name(&self) -> &str {
        GraphFoldAttentionOptions::NAME
    }

    fn run_on_body(&mut self, m: &mut Module, body: BlockId, ctx: &PassContext) -> PassResult {
        for op in m.blocks[body].ops.clone() {
            if m.op(op).parent.is_none() {
                continue; // erased by an earlier fold
            }
            let Some(found) = match_at(m, op) else {
                continue;
            };
            let loc = m.op(op).loc.clone();
            let y = fold(m, ctx, &found).map_err(|e| {
                Diagnostics(vec![Diagnostic::error(
                    loc.clone(),
                    format!("{}: {e}", GraphFoldAttentionOptions::NAME),
                )])
            })?;
            let result = m.op(found.weighted).results[0];
            m.replace_all_uses(result, y);
            let masked = found.steps.iter().any(|s| matches!(s, Step::AddMask(_)));
            ctx.remark(
                loc,
                format!(
                    "folded matmul, softmax and matmul into graph.attention (scale {}{})",
                    found.scale,
                    if masked { ", with a mask" } else { "" }
                ),
            );
            let mut dead = vec![found.weighted, found.softmax];
            dead.extend(found.between.iter().rev());
            dead.push(found.scores);
            dead.extend(&found.factors);
            for d in dead {
                let unused = m.op(d).results.iter().all(|&r| m.value(r).uses.is_empty());
                if unused && m.op(d).parent.is_some() {
                    m.erase_op_later(d);
                }
            }
        }
        m.sweep_block(body, &std::collections::HashMap::new());
        Ok(())
    }
}
