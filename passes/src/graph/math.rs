//! `graph.math-rewrite` (DNNFusion §4.2): algebraic rewriting of the graph
//! by equality saturation. Each value computed by algebraic ops (add, sub,
//! mul, div, neg, reciprocal, matmul, reduce_sum) is a term over the values
//! where the algebra stops (inputs, weights, any other op), the subgraph
//! cut DNNFusion describes. egg saturates the term with the rules of a rule
//! file (`spec/rules/algebra.rules` unless the `rules` option names
//! another; the language is `crate::rules`') and extracts the cheapest by
//! FLOP count; a term is rewritten only when that is strictly cheaper.
//! Every rewrite keeps the term's shape (checked before a match is
//! accepted), the analysis folds scalar constants, and `tests/math.rs`
//! runs each rule against the interpreter on random data.
//!
//! Not included: `sqrt(x) * sqrt(x) -> x`, which floating point does not
//! make exact (and which is wrong for negative x).

use std::collections::HashMap;

use egg::{
    Analysis, Applier, CostFunction, DidMerge, EGraph, ENodeOrVar, Extractor, Id, Language,
    PatternAst, RecExpr, Rewrite, Runner, Subst, Symbol, Var, define_language,
};
use ircc_core::ir::{BlockId, OpBuilder, ValueId};
use ircc_core::limits::{MAX_TERM_DEPTH, MAX_TERM_NODES};
use ircc_core::pass::{FunctionPass, PassContext, PassResult};
use ircc_core::{
    Attribute, DenseAttr, DenseValues, Diagnostic, ElemType, Module, OpId, TensorType, Type,
};
use ircc_dialects::graph::{self, GraphOp};

use crate::rules::{AttrPattern, Condition, Pattern, RuleSet};

define_language! {
    /// `reduce_sum` carries its axes and keepdims in leaf symbols
    /// (`axes:1,2`, `keep:1`); other leaves are values outside the algebra
    /// (`v3`) and scalar constants (`c1.5`).
    pub enum Term {
        "+" = Add([Id; 2]),
        "-" = Sub([Id; 2]),
        "*" = Mul([Id; 2]),
        "/" = Div([Id; 2]),
        "neg" = Neg(Id),
        "recip" = Recip(Id),
        "matmul" = MatMul([Id; 2]),
        "reduce_sum" = ReduceSum([Id; 3]),
        Leaf(Symbol),
    }
}

/// The shape of every e-class, and its value when it is a scalar constant.
#[derive(Clone, Debug, PartialEq)]
pub struct Info {
    pub shape: Option<Vec<i64>>,
    pub constant: Option<f64>,
}

#[derive(Default)]
pub struct Shapes {
    leaves: HashMap<Symbol, Vec<i64>>,
}

type Graph = EGraph<Term, Shapes>;

fn broadcast(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    ircc_dialects::graph::shape::broadcast(a, b).ok()
}

/// `reduce_sum`'s axes and keepdims from its leaves.
fn reduce_spec(axes: &str, keep: &str) -> Option<(Vec<i64>, bool)> {
    let axes = axes.strip_prefix("axes:")?;
    let keep = keep.strip_prefix("keep:")?.parse::<i64>().ok()?;
    let axes = if axes.is_empty() {
        Vec::new()
    } else {
        axes.split(',')
            .map(|a| a.parse().ok())
            .collect::<Option<_>>()?
    };
    Some((axes, keep != 0))
}

/// The leaf symbol of an e-class (reduce_sum's attributes).
fn leaf_of(g: &Graph, id: Id) -> Option<&str> {
    g[id].nodes.iter().find_map(|n| match n {
        Term::Leaf(s) => Some(s.as_str()),
        _ => None,
    })
}

fn matmul_shape(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    if a.len() < 2 || b.len() < 2 || a[a.len() - 1] != b[b.len() - 2] {
        return None;
    }
    let mut s = broadcast(&a[..a.len() - 2], &b[..b.len() - 2])?;
    s.extend([a[a.len() - 2], b[b.len() - 1]]);
    Some(s)
}

impl Analysis<Term> for Shapes {
    type Data = Info;

    fn make(egraph: &mut Graph, enode: &Term, _id: Id) -> Info {
        let shape = |id: &Id| egraph[*id].data.shape.clone();
        let constant = |id: &Id| egraph[*id].data.constant;
        let shape = match enode {
            Term::Leaf(s) => {
                if let Some(c) = s
                    .as_str()
                    .strip_prefix('c')
                    .and_then(|c| c.parse::<f64>().ok())
                {
                    return Info {
                        shape: Some(Vec::new()),
                        constant: Some(c),
                    };
                }
                egraph.analysis.leaves.get(s).cloned()
            }
            Term::Add([a, b]) | Term::Sub([a, b]) | Term::Mul([a, b]) | Term::Div([a, b]) => {
                shape(a).zip(shape(b)).and_then(|(x, y)| broadcast(&x, &y))
            }
            Term::Neg(a) | Term::Recip(a) => shape(a),
            Term::MatMul([a, b]) => shape(a)
                .zip(shape(b))
                .and_then(|(x, y)| matmul_shape(&x, &y)),
            Term::ReduceSum([a, axes, keep]) => {
                let spec = leaf_of(egraph, *axes)
                    .zip(leaf_of(egraph, *keep))
                    .and_then(|(a, k)| reduce_spec(a, k));
                shape(a).zip(spec).and_then(|(x, (axes, keep))| {
                    let rank = x.len() as i64;
                    if axes.iter().any(|&a| a < -rank || a >= rank) {
                        return None;
                    }
                    let axes: Vec<usize> = if axes.is_empty() {
                        (0..x.len()).collect()
                    } else {
                        axes.iter()
                            .map(|&a| {
                                if a < 0 {
                                    (a + rank) as usize
                                } else {
                                    a as usize
                                }
                            })
                            .collect()
                    };
                    Some(
                        x.iter()
                            .enumerate()
                            .filter_map(|(i, &d)| {
                                if axes.contains(&i) {
                                    keep.then_some(1)
                                } else {
                                    Some(d)
                                }
                            })
                            .collect(),
                    )
                })
            }
        };
        let constant = match enode {
            Term::Mul([a, b]) => constant(a).zip(constant(b)).map(|(x, y)| x * y),
            Term::Add([a, b]) => constant(a).zip(constant(b)).map(|(x, y)| x + y),
            _ => None,
        };
        Info { shape, constant }
    }

    fn merge(&mut self, a: &mut Info, b: Info) -> DidMerge {
        let before = a.clone();
        if a.shape.is_none() {
            a.shape = b.shape.clone();
        }
        if a.constant.is_none() {
            a.constant = b.constant;
        }
        DidMerge(*a != before, *a != b)
    }

    /// A class whose value is a known scalar constant gets the constant's
    /// leaf, which costs nothing: `(x * 0.5) * 3.0` becomes `x * 1.5`.
    fn modify(egraph: &mut Graph, id: Id) {
        if let Some(c) = egraph[id].data.constant {
            let leaf = egraph.add(Term::Leaf(Symbol::from(format!("c{c:?}"))));
            egraph.union(id, leaf);
        }
    }
}

/// The built-in rules, DNNFusion's algebraic families.
pub const ALGEBRA_RULES: &str = include_str!("../../../spec/rules/algebra.rules");

/// A rule's condition over the e-graph's analysis.
enum EggCondition {
    Scalar(Var),
    Constant(Var),
    SameShape(Var, Var),
    Rank(Var, usize),
}

/// A rule's replacement; a match is rewritten only where its conditions
/// hold and the new term has the same shape.
struct Checked {
    replacement: PatternAst<Term>,
    conditions: Vec<EggCondition>,
}

impl Checked {
    fn holds(&self, g: &Graph, s: &Subst) -> bool {
        let shape = |v: &Var| g[s[*v]].data.shape.as_ref();
        self.conditions.iter().all(|c| match c {
            EggCondition::Scalar(v) => shape(v).is_some_and(|sh| sh.iter().product::<i64>() == 1),
            EggCondition::Constant(v) => g[s[*v]].data.constant.is_some(),
            EggCondition::SameShape(a, b) => shape(a).is_some() && shape(a) == shape(b),
            EggCondition::Rank(v, n) => shape(v).is_some_and(|sh| sh.len() == *n),
        })
    }
}

impl Applier<Term, Shapes> for Checked {
    fn apply_one(
        &self,
        g: &mut Graph,
        eclass: Id,
        subst: &Subst,
        _: Option<&PatternAst<Term>>,
        rule: Symbol,
    ) -> Vec<Id> {
        if !self.holds(g, subst) {
            return vec![];
        }
        let id = g.add_instantiation(&self.replacement, subst);
        if g[id].data.shape.is_some()
            && g[id].data.shape == g[eclass].data.shape
            && g.union_trusted(eclass, id, rule)
        {
            vec![eclass]
        } else {
            vec![]
        }
    }

    fn vars(&self) -> Vec<Var> {
        self.replacement
            .as_ref()
            .iter()
            .filter_map(|n| match n {
                ENodeOrVar::Var(v) => Some(*v),
                ENodeOrVar::ENode(_) => None,
            })
            .collect()
    }
}

/// The term symbol of an op of the algebra.
fn symbol(op: GraphOp) -> Option<&'static str> {
    Some(match op {
        GraphOp::Add => "+",
        GraphOp::Sub => "-",
        GraphOp::Mul => "*",
        GraphOp::Div => "/",
        GraphOp::Neg => "neg",
        GraphOp::Reciprocal => "recip",
        GraphOp::Matmul => "matmul",
        GraphOp::ReduceSum => "reduce_sum",
        _ => return None,
    })
}

/// A rule pattern as an egg pattern's text. `reduce_sum`'s attributes are
/// its second and third children; an attribute a pattern leaves out
/// matches any value, and one a replacement leaves out is the default.
fn egg_text(p: &Pattern, pattern: bool, fresh: &mut usize) -> Result<String, Diagnostic> {
    let o = match p {
        Pattern::Var(v, _) => return Ok(v.clone()),
        Pattern::Number(x, _) => return Ok(format!("c{x:?}")),
        Pattern::Op(o) => o,
    };
    let outside = || {
        let known: Vec<&str> = GraphOp::ALL
            .iter()
            .filter(|k| symbol(**k).is_some())
            .map(|k| k.name())
            .collect();
        Diagnostic::error(
            o.loc.clone(),
            format!(
                "'{}' is outside the algebra of {} ({}); the rules pass takes any op",
                o.name,
                crate::decl::GraphMathRewriteOptions::NAME,
                known.join(", ")
            ),
        )
    };
    let kind = GraphOp::from_name(&o.name).ok_or_else(outside)?;
    let sym = symbol(kind).ok_or_else(outside)?;
    let mut children = Vec::new();
    for q in &o.operands {
        children.push(egg_text(q, pattern, fresh)?);
    }
    let mut attr =
        |name: &str, literal: &dyn Fn(&Attribute) -> Option<String>, default: &str| match o
            .attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, a)| a)
        {
            Some(AttrPattern::Var(v)) => Ok(v.clone()),
            Some(AttrPattern::Value(a)) => literal(a).ok_or_else(|| {
                Diagnostic::error(o.loc.clone(), format!("'{a}' is not a value of {name}"))
            }),
            None if pattern => {
                *fresh += 1;
                Ok(format!("?_{name}{fresh}"))
            }
            None => Ok(default.to_string()),
        };
    if kind == GraphOp::ReduceSum {
        children.push(attr(
            "axes",
            &|a| {
                let axes = a.as_i64_array()?;
                Some(axes_leaf(&axes))
            },
            "axes:",
        )?);
        children.push(attr(
            "keepdims",
            &|a| Some(format!("keep:{}", a.as_i64()?)),
            "keep:1",
        )?);
    }
    if let Some((name, _)) = o
        .attrs
        .iter()
        .find(|(k, _)| kind != GraphOp::ReduceSum || (k != "axes" && k != "keepdims"))
    {
        return Err(Diagnostic::error(
            o.loc.clone(),
            format!("'{}' has no attribute '{name}' in the algebra", o.name),
        ));
    }
    Ok(format!("({sym} {})", children.join(" ")))
}

fn axes_leaf(axes: &[i64]) -> String {
    let axes: Vec<String> = axes.iter().map(i64::to_string).collect();
    format!("axes:{}", axes.join(","))
}

/// A rule file's rules as egg rewrites over the algebra; an op outside it
/// is an error naming the rule.
pub fn compile(rules: &RuleSet) -> Result<Vec<Rewrite<Term, Shapes>>, Diagnostic> {
    let mut out = Vec::new();
    for rule in &rules.rules {
        let mut fresh = 0;
        let searcher: egg::Pattern<Term> = egg_text(&rule.pattern, true, &mut fresh)?
            .parse()
            .map_err(|e| {
                Diagnostic::error(rule.loc.clone(), format!("rule '{}': {e}", rule.name))
            })?;
        let replacement: egg::Pattern<Term> = egg_text(&rule.replacement, false, &mut fresh)?
            .parse()
            .map_err(|e| {
                Diagnostic::error(rule.loc.clone(), format!("rule '{}': {e}", rule.name))
            })?;
        let var = |v: &str| -> Var { v.parse().expect("a rule variable is an egg variable") };
        let conditions = rule
            .conditions
            .iter()
            .map(|c| match c {
                Condition::Scalar(v) => Ok(EggCondition::Scalar(var(v))),
                Condition::Constant(v) => Ok(EggCondition::Constant(var(v))),
                Condition::SameShape(a, b) => Ok(EggCondition::SameShape(var(a), var(b))),
                Condition::Rank(v, n) => usize::try_from(*n)
                    .map(|n| EggCondition::Rank(var(v), n))
                    .map_err(|_| {
                        Diagnostic::error(
                            rule.loc.clone(),
                            format!("rule '{}': rank {n}", rule.name),
                        )
                    }),
            })
            .collect::<Result<_, _>>()?;
        let applier = Checked {
            replacement: replacement.ast,
            conditions,
        };
        out.push(
            Rewrite::new(rule.name.as_str(), searcher, applier)
                .map_err(|e| Diagnostic::error(rule.loc.clone(), e))?,
        );
    }
    Ok(out)
}

/// Floating-point operations of a term.
struct Flops<'a>(&'a Graph);

impl CostFunction<Term> for Flops<'_> {
    type Cost = f64;
    fn cost<C: FnMut(Id) -> f64>(&mut self, enode: &Term, mut costs: C) -> f64 {
        let g = self.0;
        let size = |id: &Id| {
            g[*id]
                .data
                .shape
                .as_ref()
                .map_or(f64::INFINITY, |s| s.iter().product::<i64>() as f64)
        };
        let own = match enode {
            Term::Leaf(_) => 0.0,
            Term::Add([a, b]) | Term::Sub([a, b]) | Term::Mul([a, b]) | Term::Div([a, b]) => {
                let s = g[*a]
                    .data
                    .shape
                    .clone()
                    .zip(g[*b].data.shape.clone())
                    .and_then(|(x, y)| broadcast(&x, &y));
                s.map_or(f64::INFINITY, |s| s.iter().product::<i64>() as f64)
            }
            Term::Neg(a) | Term::Recip(a) => size(a),
            Term::MatMul([a, b]) => match (&g[*a].data.shape, &g[*b].data.shape) {
                (Some(x), Some(y)) => matmul_shape(x, y).map_or(f64::INFINITY, |o| {
                    2.0 * o.iter().product::<i64>() as f64 * x[x.len() - 1] as f64
                }),
                _ => f64::INFINITY,
            },
            Term::ReduceSum([a, _, _]) => size(a),
        };
        enode.fold(own, |sum, id| sum + costs(id))
    }
}

pub struct MathRewrite {
    rules: Vec<Rewrite<Term, Shapes>>,
}

impl MathRewrite {
    pub fn new(rules: Vec<Rewrite<Term, Shapes>>) -> Self {
        MathRewrite { rules }
    }

    /// The pass over the rules of `file`, or the built-in ones where it is
    /// empty.
    pub fn from_option(file: &str) -> Result<Self, String> {
        let rules = if file.is_empty() {
            crate::rules::parse_rules(ALGEBRA_RULES, Some("spec/rules/algebra.rules".into()))
        } else {
            RuleSet::read(file)
        };
        rules
            .and_then(|r| compile(&r))
            .map(Self::new)
            .map_err(|d| crate::rules::describe(&d))
    }
}

fn algebraic(m: &Module, op: OpId) -> bool {
    let o = m.op(op);
    let floats = o.operands.iter().chain(&o.results).all(|&v| {
        m.value_type(v)
            .as_tensor()
            .is_some_and(|t| t.elem.is_float())
    });
    use GraphOp as G;
    let kind = GraphOp::of(m, op);
    floats
        && o.results.len() == 1
        && matches!(
            kind,
            Some(
                G::Add
                    | G::Sub
                    | G::Mul
                    | G::Div
                    | G::Neg
                    | G::Reciprocal
                    | G::Matmul
                    | G::ReduceSum
            )
        )
        && (kind != Some(G::Matmul)
            || o.operands
                .iter()
                .all(|&v| m.value_type(v).as_tensor().is_some_and(|t| t.rank() >= 2)))
}

fn scalar_constant(m: &Module, v: ValueId) -> Option<f64> {
    match ircc_dialects::constant_of(m, v) {
        Some(d) if d.ty.rank() == 0 => match &d.values {
            DenseValues::Float(x) => x.first().copied(),
            _ => None,
        },
        _ => None,
    }
}

/// A term under construction: the expression, the values it stops at, and
/// the node each value already has (a value read twice is one node, so a
/// chain of `x = x + x` stays linear, not exponential).
#[derive(Default)]
struct TermBuilder {
    expr: RecExpr<Term>,
    leaves: HashMap<Symbol, (ValueId, Vec<i64>)>,
    nodes: HashMap<ValueId, Id>,
}

impl TermBuilder {
    /// The term of `v`: its algebraic ops down to the values where the
    /// algebra stops, `MAX_TERM_DEPTH` below the root, or where the term
    /// has `MAX_TERM_NODES` nodes (a chain of 10^6 adds is not walked to
    /// its end, and roots sharing a large subgraph do not each walk it).
    fn term(&mut self, m: &Module, v: ValueId, depth: usize) -> Id {
        if let Some(&id) = self.nodes.get(&v) {
            return id;
        }
        let id = self.node(m, v, depth);
        self.nodes.insert(v, id);
        id
    }

    fn leaf(&mut self, m: &Module, v: ValueId) -> Id {
        let s = Symbol::from(format!("v{}", v.index()));
        let shape = m
            .value_type(v)
            .as_tensor()
            .map(|t| t.shape.clone())
            .unwrap_or_default();
        self.leaves.insert(s, (v, shape));
        self.expr.add(Term::Leaf(s))
    }

    fn node(&mut self, m: &Module, v: ValueId, depth: usize) -> Id {
        if let Some(c) = scalar_constant(m, v) {
            return self.expr.add(Term::Leaf(Symbol::from(format!("c{c:?}"))));
        }
        let Some(op) = m.defining_op(v).filter(|&op| {
            depth < MAX_TERM_DEPTH && self.expr.as_ref().len() < MAX_TERM_NODES && algebraic(m, op)
        }) else {
            return self.leaf(m, v);
        };
        let operands = m.op(op).operands.clone();
        use GraphOp as G;
        let kind = GraphOp::of(m, op).expect("an algebraic op is a graph op");
        if let Some(reduce) = graph::ops::ReduceSum::new(m, op) {
            let a = self.term(m, operands[0], depth + 1);
            let axes = reduce
                .axes()
                .unwrap_or_default()
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(",");
            let axes = self
                .expr
                .add(Term::Leaf(Symbol::from(format!("axes:{axes}"))));
            let keep = Symbol::from(format!("keep:{}", reduce.keepdims()));
            let keep = self.expr.add(Term::Leaf(keep));
            return self.expr.add(Term::ReduceSum([a, axes, keep]));
        }
        if matches!(kind, G::Neg | G::Reciprocal) {
            let a = self.term(m, operands[0], depth + 1);
            return self.expr.add(if kind == G::Neg {
                Term::Neg(a)
            } else {
                Term::Recip(a)
            });
        }
        let a = self.term(m, operands[0], depth + 1);
        let b = self.term(m, operands[1], depth + 1);
        self.expr.add(match kind {
            G::Add => Term::Add([a, b]),
            G::Sub => Term::Sub([a, b]),
            G::Mul => Term::Mul([a, b]),
            G::Div => Term::Div([a, b]),
            _ => Term::MatMul([a, b]),
        })
    }
}

/// Builds graph ops for `expr`, to go before `anchor` (pushed to
/// `placed`, which the caller sweeps into the block); returns the root's
/// value.
fn build(
    m: &mut Module,
    ctx: &PassContext,
    expr: &RecExpr<Term>,
    leaves: &HashMap<Symbol, (ValueId, Vec<i64>)>,
    elem: ElemType,
    anchor: OpId,
    placed: &mut Vec<OpId>,
) -> Result<ValueId, String> {
    // One entry per node; reduce_sum's attribute leaf has no value.
    let mut values: Vec<Option<ValueId>> = Vec::with_capacity(expr.as_ref().len());
    let loc = m.op(anchor).loc.clone();
    for node in expr.as_ref() {
        let (kind, operands, attrs): (GraphOp, Vec<ValueId>, Vec<(&str, Attribute)>) = match node {
            Term::Leaf(s) => {
                if let Some((v, _)) = leaves.get(s) {
                    values.push(Some(*v));
                    continue;
                }
                match s
                    .as_str()
                    .strip_prefix('c')
                    .and_then(|c| c.parse::<f64>().ok())
                {
                    Some(c) => {
                        let dense = DenseAttr::new(
                            TensorType::new(Vec::new(), elem),
                            DenseValues::Float(vec![c].into()),
                        )?;
                        (
                            GraphOp::Constant,
                            Vec::new(),
                            vec![("value", Attribute::Dense(dense))],
                        )
                    }
                    // reduce_sum's attributes: not a value; its reader uses them.
                    None => {
                        values.push(None);
                        continue;
                    }
                }
            }
            Term::Add([a, b])
            | Term::Sub([a, b])
            | Term::Mul([a, b])
            | Term::Div([a, b])
            | Term::MatMul([a, b]) => (
                graph_name(node),
                vec![val(&values, *a)?, val(&values, *b)?],
                vec![],
            ),
            Term::Neg(a) | Term::Recip(a) => (graph_name(node), vec![val(&values, *a)?], vec![]),
            Term::ReduceSum([a, axes, keep]) => {
                let (Term::Leaf(axes), Term::Leaf(keep)) = (&expr[*axes], &expr[*keep]) else {
                    return Err("malformed reduce_sum".into());
                };
                let (axes, keep) =
                    reduce_spec(axes.as_str(), keep.as_str()).ok_or("malformed reduce_sum")?;
                let mut at = vec![("keepdims", Attribute::i64(keep as i64))];
                if !axes.is_empty() {
                    at.push(("axes", Attribute::DenseI64Array(axes)));
                }
                (GraphOp::ReduceSum, vec![val(&values, *a)?], at)
            }
        };
        let mut b = OpBuilder::new(kind.name())
            .operands(operands)
            .results([Type::Index])
            .loc(loc.clone());
        for (k, v) in attrs {
            b = b.attr(k, v);
        }
        let op = m.create_op(b);
        ctx.registry.infer_result_types(m, op)?;
        placed.push(op);
        values.push(Some(m.op(op).results[0]));
    }
    values
        .last()
        .copied()
        .flatten()
        .ok_or_else(|| "empty term".to_string())
}

/// The graph op a term node stands for.
fn graph_name(t: &Term) -> GraphOp {
    match t {
        Term::Add(_) => GraphOp::Add,
        Term::Sub(_) => GraphOp::Sub,
        Term::Mul(_) => GraphOp::Mul,
        Term::Div(_) => GraphOp::Div,
        Term::MatMul(_) => GraphOp::Matmul,
        Term::Neg(_) => GraphOp::Neg,
        Term::Recip(_) => GraphOp::Reciprocal,
        Term::ReduceSum(_) => GraphOp::ReduceSum,
        Term::Leaf(_) => GraphOp::Constant,
    }
}

fn val(values: &[Option<ValueId>], id: Id) -> Result<ValueId, String> {
    values[usize::from(id)].ok_or_else(|| "an attribute leaf used as a value".to_string())
}

impl FunctionPass for MathRewrite {
    fn name(&self) -> &str {
        crate::decl::GraphMathRewriteOptions::NAME
    }

    fn run_on_body(&mut self, module: &mut Module, body: BlockId, ctx: &PassContext) -> PassResult {
        // Roots: algebraic values read by something outside the algebra.
        let roots: Vec<OpId> = module.blocks[body]
            .ops
            .iter()
            .copied()
            .filter(|&op| algebraic(module, op))
            .filter(|&op| {
                module
                    .value(module.op(op).results[0])
                    .uses
                    .iter()
                    .any(|u| !algebraic(module, u.op))
            })
            .collect();
        let mut placed: HashMap<OpId, Vec<OpId>> = HashMap::new();
        for root in roots {
            let result = module.op(root).results[0];
            let mut builder = TermBuilder::default();
            builder.term(module, result, 0);
            let TermBuilder { expr, leaves, .. } = builder;
            if expr.as_ref().len() < 3 {
                continue;
            }
            let shapes = Shapes {
                leaves: leaves.iter().map(|(s, (_, sh))| (*s, sh.clone())).collect(),
            };
            let runner = Runner::default()
                .with_egraph(Graph::new(shapes))
                .with_expr(&expr)
                .with_iter_limit(8)
                .with_node_limit(5_000)
                .with_time_limit(std::time::Duration::from_secs(3600))
                .run(&self.rules);
            let root_class = runner.egraph.find(runner.roots[0]);
            let extractor = Extractor::new(&runner.egraph, Flops(&runner.egraph));
            let (best_cost, best) = extractor.find_best(root_class);
            // The cost of the term as it is: Flops reads operand shapes
            // from the e-graph, so each node is costed with its
            // children's e-classes, not their positions in `expr`.
            let Some(class_of) = runner.egraph.lookup_expr_ids(&expr) else {
                continue;
            };
            let mut original = Flops(&runner.egraph);
            let mut tree_cost: Vec<f64> = Vec::new();
            for n in expr.as_ref() {
                let children: HashMap<Id, f64> = n
                    .children()
                    .iter()
                    .map(|&c| (class_of[usize::from(c)], tree_cost[usize::from(c)]))
                    .collect();
                let in_classes = n.clone().map_children(|c| class_of[usize::from(c)]);
                tree_cost.push(original.cost(&in_classes, |id| children[&id]));
            }
            if best_cost >= *tree_cost.last().unwrap_or(&0.0) {
                continue;
            }
            let elem = module
                .value_type(result)
                .as_tensor()
                .map_or(ElemType::F32, |t| t.elem);
            let new = build(
                module,
                ctx,
                &best,
                &leaves,
                elem,
                root,
                placed.entry(root).or_default(),
            )
            .map_err(|e| {
                Diagnostic::error(module.op(root).loc.clone(), format!("math rewrite: {e}"))
            })?;
            if module.value_type(new) != module.value_type(result) {
                return Err(Diagnostic::error(
                    module.op(root).loc.clone(),
                    "math rewrite changed a type",
                )
                .into());
            }
            module.values[new].name = module.value(result).name.clone();
            module.replace_all_uses(result, new);
        }
        module.sweep_block(body, &placed);
        Ok(())
    }
}
