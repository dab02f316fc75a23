//! The `rules` pass: a rule file's rules matched directly on the IR, as
//! DNNFusion applies its rewrites (§4.2): at each op, of the rules that
//! match, the one whose replacement saves the most FLOPs is applied (the
//! first written on a tie), and a rewrite that saves nothing is not, so
//! rewriting ends. Sweeps repeat until none rewrites.

use std::collections::HashMap;

use ircc_core::ir::{BlockId, OpBuilder};
use ircc_core::pass::{Pass, PassContext, PassResult};
use ircc_core::registry::kind_accepts;
use ircc_core::{
    Attribute, DenseAttr, DenseValues, Diagnostic, ElemType, Module, OpId, Registry, TensorType,
    Type, ValueId,
};
use ircc_dialects::graph::GraphOp;

use super::{AttrPattern, Condition, Pattern, Rule, RuleSet, check};

/// The built-in rule file: DNNFusion's rewrites over graph ops.
pub const DNNFUSION_RULES: &str = include_str!("../../../spec/rules/dnnfusion.rules");

/// Sweeps over a function before the pass stops and says so. Every
/// rewrite saves FLOPs or ops, so a sweep limit is reached only by very
/// long chains of rewrites.
const MAX_SWEEPS: usize = 64;

pub struct ApplyRules {
    rules: RuleSet,
}

impl ApplyRules {
    pub fn new(rules: RuleSet) -> Self {
        ApplyRules { rules }
    }

    /// The rules of `file`, or the built-in ones where it is empty.
    pub fn from_option(file: &str) -> Result<Self, String> {
        let rules = if file.is_empty() {
            super::parse_rules(DNNFUSION_RULES, Some("spec/rules/dnnfusion.rules".into()))
        } else {
            RuleSet::read(file)
        };
        rules.map(Self::new).map_err(|d| super::describe(&d))
    }
}

/// What a match binds.
#[derive(Default)]
struct Match {
    values: HashMap<String, ValueId>,
    /// An attribute variable binds the attribute, or its absence.
    attrs: HashMap<String, Option<Attribute>>,
    /// The matched ops, the root first, each before its operands' ops.
    ops: Vec<OpId>,
}

/// A replacement built beside the IR, not yet used.
struct Candidate {
    value: ValueId,
    new_ops: Vec<OpId>,
    removed: Vec<OpId>,
    /// (FLOPs, ops) saved.
    saving: (i128, i64),
}

impl Pass for ApplyRules {
    fn name(&self) -> &str {
        crate::decl::RulesOptions::NAME
    }

    fn run(&mut self, module: &mut Module, ctx: &PassContext) -> PassResult {
        let (live, warnings) = check::check(&self.rules, ctx.registry);
        for w in warnings {
            ctx.warn(w);
        }
        let mut by_root: HashMap<&str, Vec<&Rule>> = HashMap::new();
        for rule in live {
            if let Pattern::Op(root) = &rule.pattern {
                by_root.entry(root.name.as_str()).or_default().push(rule);
            }
        }
        for f in module.functions() {
            let Some(body) = module.entry_block(f) else {
                continue;
            };
            let mut sweeps = 0;
            while sweep(module, body, &by_root, ctx) {
                sweeps += 1;
                if sweeps == MAX_SWEEPS {
                    ctx.warn(Diagnostic::warning(
                        module.op(f).loc.clone(),
                        format!("rules: still rewriting after {MAX_SWEEPS} sweeps; stopped"),
                    ));
                    break;
                }
            }
        }
        Ok(())
    }
}

/// One sweep over `body`: each op, as a root, rewritten by the best rule
/// that matches it. Ops made or erased in this sweep are matched in the
/// next. Returns whether anything was rewritten.
fn sweep(
    m: &mut Module,
    body: BlockId,
    by_root: &HashMap<&str, Vec<&Rule>>,
    ctx: &PassContext,
) -> bool {
    let mut placed: HashMap<OpId, Vec<OpId>> = HashMap::new();
    let ops = m.blocks[body].ops.clone();
    for root in ops {
        if m.op(root).parent != Some(body) {
            continue;
        }
        let Some(rules) = by_root.get(m.op(root).name.as_str()) else {
            continue;
        };
        let mut best: Option<(&Rule, Candidate)> = None;
        for rule in rules {
            let Some(mt) = match_rule(m, body, rule, root) else {
                continue;
            };
            let Some(c) = candidate(m, ctx.registry, rule, root, &mt) else {
                continue;
            };
            match &best {
                Some((_, b)) if b.saving >= c.saving => discard(m, &c.new_ops),
                _ => {
                    if let Some((_, b)) = best.replace((rule, c)) {
                        discard(m, &b.new_ops);
                    }
                }
            }
        }
        let Some((rule, best)) = best else {
            continue;
        };
        ctx.remark(
            m.op(root).loc.clone(),
            format!(
                "rule '{}' saves {} FLOPs and {} ops",
                rule.name, best.saving.0, best.saving.1
            ),
        );
        let result = m.op(root).results[0];
        if !best.new_ops.is_empty() {
            m.values[best.value].name = m.value(result).name.clone();
        }
        m.replace_all_uses(result, best.value);
        for &op in &best.removed {
            m.erase_op_later(op);
        }
        placed.entry(root).or_default().extend(best.new_ops);
    }
    let changed = !placed.is_empty();
    m.sweep_block(body, &placed);
    changed
}

fn match_rule(m: &Module, body: BlockId, rule: &Rule, root: OpId) -> Option<Match> {
    let mut mt = Match::default();
    let value = *m.op(root).results.first()?;
    (matches(m, body, &rule.pattern, value, &mut mt)
        && rule.conditions.iter().all(|c| holds(m, c, &mt)))
    .then_some(mt)
}

fn matches(m: &Module, body: BlockId, p: &Pattern, v: ValueId, mt: &mut Match) -> bool {
    match p {
        Pattern::Var(name, _) => *mt.values.entry(name.clone()).or_insert(v) == v,
        Pattern::Number(x, _) => {
            ircc_dialects::constant_of(m, v).and_then(|d| d.splat()) == Some(*x)
        }
        Pattern::Op(o) => {
            let Some(op) = m.defining_op(v) else {
                return false;
            };
            let def = m.op(op);
            if def.parent != Some(body)
                || def.name != o.name
                || def.results.len() != 1
                || def.operands.len() != o.operands.len()
            {
                return false;
            }
            for (name, a) in &o.attrs {
                let have = def.attrs.get(name).cloned();
                let ok = match a {
                    AttrPattern::Value(want) => have.as_ref() == Some(want),
                    AttrPattern::Var(var) => {
                        *mt.attrs.entry(var.clone()).or_insert(have.clone()) == have
                    }
                };
                if !ok {
                    return false;
                }
            }
            mt.ops.push(op);
            let operands = def.operands.clone();
            o.operands
                .iter()
                .zip(operands)
                .all(|(p, v)| matches(m, body, p, v, mt))
        }
    }
}

fn holds(m: &Module, c: &Condition, mt: &Match) -> bool {
    let shape = |v: &str| m.value_type(mt.values[v]).as_tensor().map(|t| &t.shape);
    match c {
        Condition::Scalar(v) => shape(v).is_some_and(|s| s.iter().product::<i64>() == 1),
        Condition::Constant(v) => ircc_dialects::constant_of(m, mt.values[v]).is_some(),
        Condition::SameShape(a, b) => shape(a).is_some() && shape(a) == shape(b),
        Condition::Rank(v, n) => shape(v).is_some_and(|s| s.len() as i64 == *n),
    }
}

/// The replacement of a match, built before `root` would be; `None` where
/// it cannot be built, has another type than the root, or saves nothing.
fn candidate(
    m: &mut Module,
    registry: &Registry,
    rule: &Rule,
    root: OpId,
    mt: &Match,
) -> Option<Candidate> {
    let result = m.op(root).results[0];
    let elem = m.value_type(result).as_tensor()?.elem;
    let mut new_ops = Vec::new();
    let built = build(m, registry, &rule.replacement, mt, elem, root, &mut new_ops);
    let value = match built {
        Some(v) if m.value_type(v) == m.value_type(result) => v,
        _ => {
            discard(m, &new_ops);
            return None;
        }
    };
    // The matched ops nothing else reads go with the root.
    let mut removed: Vec<OpId> = vec![root];
    for &op in &mt.ops[1..] {
        let used_outside = m
            .op(op)
            .results
            .iter()
            .any(|&r| m.value(r).uses.iter().any(|u| !removed.contains(&u.op)));
        if !used_outside && !removed.contains(&op) {
            removed.push(op);
        }
    }
    let before: i128 = removed.iter().map(|&op| flops(m, registry, op)).sum();
    let after: i128 = new_ops.iter().map(|&op| flops(m, registry, op)).sum();
    let saving = (before - after, removed.len() as i64 - new_ops.len() as i64);
    if saving <= (0, 0) {
        discard(m, &new_ops);
        return None;
    }
    Some(Candidate {
        value,
        new_ops,
        removed,
        saving,
    })
}

/// Builds the replacement `p`, its ops (operands first) pushed to `new_ops`
/// with no block yet.
fn build(
    m: &mut Module,
    registry: &Registry,
    p: &Pattern,
    mt: &Match,
    elem: ElemType,
    root: OpId,
    new_ops: &mut Vec<OpId>,
) -> Option<ValueId> {
    let loc = m.op(root).loc.clone();
    let op = match p {
        Pattern::Var(name, _) => return mt.values.get(name).copied(),
        Pattern::Number(x, _) => {
            let value = if elem.is_float() {
                DenseValues::Float(vec![*x].into())
            } else if x.fract() == 0.0 {
                DenseValues::Int(vec![*x as i64].into())
            } else {
                return None;
            };
            let dense = DenseAttr::new(TensorType::new(Vec::new(), elem), value).ok()?;
            m.create_op(
                OpBuilder::new(GraphOp::Constant.name())
                    .results([Type::Index])
                    .attr("value", Attribute::Dense(dense))
                    .loc(loc),
            )
        }
        Pattern::Op(o) => {
            let spec = &registry.get(&o.name)?.spec;
            let mut operands = Vec::with_capacity(o.operands.len());
            for q in &o.operands {
                operands.push(build(m, registry, q, mt, elem, root, new_ops)?);
            }
            let mut b = OpBuilder::new(o.name.clone())
                .operands(operands)
                .results([Type::Index])
                .loc(loc);
            for (name, a) in &o.attrs {
                let value = match a {
                    AttrPattern::Value(v) => Some(v.clone()),
                    AttrPattern::Var(var) => mt.attrs.get(var).cloned().flatten(),
                };
                if let Some(v) = value {
                    if !spec
                        .attrs
                        .get(name)
                        .is_some_and(|s| kind_accepts(s.kind, &v))
                    {
                        return None;
                    }
                    b = b.attr(name.clone(), v);
                }
            }
            m.create_op(b)
        }
    };
    new_ops.push(op);
    registry.infer_result_types(m, op).ok()?;
    Some(m.op(op).results[0])
}

/// Drops ops built for a replacement that is not used (last first, so no
/// op is dropped while another reads it).
fn discard(m: &mut Module, new_ops: &[OpId]) {
    for &op in new_ops.iter().rev() {
        m.erase_op_later(op);
    }
}

/// The floating-point work of an op, as DNNFusion counts it to rank
/// rewrites: a matrix product's multiply-adds, a reduction's inputs, and
/// otherwise its results' elements. Constants are free.
pub fn flops(m: &Module, registry: &Registry, op: OpId) -> i128 {
    let elements = |v: ValueId| {
        m.value_type(v)
            .as_tensor()
            .map_or(1, |t| t.num_elements().max(0) as i128)
    };
    let o = m.op(op);
    match GraphOp::of(m, op) {
        Some(GraphOp::Constant) => return 0,
        Some(GraphOp::Matmul) => {
            let k = m
                .value_type(o.operands[0])
                .as_tensor()
                .and_then(|t| t.shape.last().copied())
                .unwrap_or(1);
            return 2 * elements(o.results[0]) * k.max(0) as i128;
        }
        _ => {}
    }
    let reduces = registry
        .get(&o.name)
        .is_some_and(|d| !d.spec.reduction.is_empty());
    let values = if reduces { &o.operands } else { &o.results };
    values.iter().map(|&v| elements(v)).sum()
}
