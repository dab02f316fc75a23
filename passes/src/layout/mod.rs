//! The texture level's passes: `layout.select` chooses each stored
//! tensor's layout (SmartMem §3.3) under a device's cost model,
//! `texture.map` places the tensors whose layout is a texture, and
//! `memory.plan` pools what is stored by liveness.
//!
//! `layout.select` records its choice on each producer as the discardable
//! attribute `texture.layouts` (one `#texture.layout<...>` per result:
//! `buffer`, or `lanes = A, x = B`), and its figures on the function:
//! `texture.layout_cost` (the chosen layouts' cost, in nanoseconds of the
//! cost model), `texture.layout_cost_pbqp` (the exact optimum, where the
//! solver finished within its budget) and `texture.copies`.

pub mod cost;
pub mod memory_plan;
pub mod pbqp;
pub mod problem;
pub mod select;
pub mod texture_map;

use std::collections::HashMap;

use ircc_core::diag::{Diagnostic, Diagnostics};
use ircc_core::ir::OpBuilder;
use ircc_core::pass::{Pass, PassContext};
use ircc_core::{Attribute, Module, OpId, Type, ValueId};
use ircc_dialects::graph::GraphOp;
use ircc_dialects::index;
use ircc_dialects::kernel::{DeviceProfile, SCHEDULE_ATTR, Schedule};
use ircc_dialects::texture::TextureLayout;

use crate::decl::{LayoutSelectOptions, LayoutSelectStrategy};
use cost::{CostModel, LayoutSpec};
use problem::{Choice, Problem, Writer};

/// The attribute holding a producer's chosen layouts.
pub const LAYOUTS: &str = "texture.layouts";
/// Function attributes with layout.select's figures.
pub const LAYOUT_COST: &str = "texture.layout_cost";
pub const LAYOUT_COST_PBQP: &str = "texture.layout_cost_pbqp";
pub const COPIES: &str = "texture.copies";

/// How the kernels kernel.lower builds for top-level op `op` write its
/// result `k`, which decides which texture layouts cost a copy.
pub fn writer_of(m: &Module, op: OpId, k: usize) -> Writer {
    crate::conversion::graph_to_kernel::result_writer(m, op, k)
}

/// An error naming the first compute op of `block` with no (or a bad)
/// `kernel.schedule`: the texture level reads which template writes each
/// tensor.
pub fn require_schedules(
    m: &Module,
    block: ircc_core::BlockId,
    pass: &str,
) -> Result<(), Diagnostics> {
    for &op in &m.blocks[block].ops {
        if ircc_dialects::is_data(m, op) || GraphOp::of(m, op).is_none() {
            continue;
        }
        let why = match Schedule::of(m, op) {
            Ok(Some(_)) => continue,
            Ok(None) => format!("has no {SCHEDULE_ATTR}: run kernel.schedule before {pass}"),
            Err(e) => e,
        };
        return Err(Diagnostics(vec![Diagnostic::error(
            m.op(op).loc.clone(),
            format!("{pass}: '{}' {why}", m.op(op).name),
        )]));
    }
    Ok(())
}

/// The profile of the module's target (`ircc.target`), or an error
/// naming the pass.
pub fn profile(pass: &str, m: &Module) -> Result<DeviceProfile, Diagnostics> {
    ircc_dialects::kernel::target_profile(m)
        .map_err(|e| Diagnostics(vec![Diagnostic::plain(format!("{pass}: {e}"))]))
}

pub fn choice_attr(c: Choice) -> Attribute {
    let body = match c {
        Choice::Buffer => "buffer".to_string(),
        Choice::Texture { lanes, contiguous } => format!("lanes = {lanes}, x = {contiguous}"),
    };
    Attribute::Opaque {
        dialect: "texture".into(),
        name: "layout".into(),
        body: Some(body),
    }
}

fn parse_choice(a: &Attribute) -> Option<Choice> {
    let Attribute::Opaque {
        dialect,
        name,
        body: Some(body),
    } = a
    else {
        return None;
    };
    if dialect != "texture" || name != "layout" {
        return None;
    }
    if body.trim() == "buffer" {
        return Some(Choice::Buffer);
    }
    let mut lanes = None;
    let mut x = None;
    for part in body.split(',') {
        let (k, v) = part.split_once('=')?;
        let v: usize = v.trim().parse().ok()?;
        match k.trim() {
            "lanes" => lanes = Some(v),
            "x" => x = Some(v),
            _ => return None,
        }
    }
    Some(Choice::Texture {
        lanes: lanes?,
        contiguous: x?,
    })
}

/// The layouts recorded on `op`, one per result, or why they cannot be read.
pub fn layouts_of(m: &Module, op: OpId) -> Option<Result<Vec<Choice>, String>> {
    let a = m.op(op).attr(LAYOUTS)?;
    let bad = || {
        format!("'{LAYOUTS}' must list one #texture.layout<buffer | lanes = A, x = B> per result")
    };
    let Attribute::Array(items) = a else {
        return Some(Err(bad()));
    };
    let choices: Option<Vec<Choice>> = items.iter().map(parse_choice).collect();
    Some(match choices {
        Some(c) if c.len() == m.op(op).results.len() => Ok(c),
        _ => Err(bad()),
    })
}

pub struct LayoutSelect {
    options: LayoutSelectOptions,
    spec: LayoutSpec,
}

impl LayoutSelect {
    pub fn new(options: LayoutSelectOptions) -> Self {
        LayoutSelect {
            options,
            spec: LayoutSpec::load(),
        }
    }
}

/// The problem of host function body `block` under `model`.
pub fn problem_of(
    m: &Module,
    ctx: &PassContext,
    block: ircc_core::BlockId,
    model: &CostModel,
) -> Problem {
    let writer = |op, k| writer_of(m, op, k);
    let fits = |shape: &[i64], lanes, contiguous| {
        model.format?;
        TextureLayout::new(shape, lanes, contiguous, model.max_extent)
    };
    Problem::extract(m, ctx.registry, block, &writer, &fits)
}

impl Pass for LayoutSelect {
    fn name(&self) -> &str {
        LayoutSelectOptions::NAME
    }

    fn run(&mut self, m: &mut Module, ctx: &PassContext) -> Result<(), Diagnostics> {
        let profile = profile(self.name(), m)?;
        let model = CostModel::new(&profile, &self.spec);
        let budget = usize::try_from(self.options.budget).unwrap_or(0);
        for f in m.functions() {
            let Some(block) = m.entry_block(f) else {
                continue;
            };
            require_schedules(m, block, self.name())?;
            let p = problem_of(m, ctx, block, &model);
            let q = select::to_pbqp(&p, &model);
            let heuristic = select::heuristic(&p, &model, &self.spec.policy, &q);
            let exact = pbqp::solve(&q, budget);
            let choice = match (&self.options.strategy, &exact) {
                (LayoutSelectStrategy::Pbqp, Some(s)) => s.choice.clone(),
                (LayoutSelectStrategy::Pbqp, None) => {
                    ctx.remark(
                        m.op(f).loc.clone(),
                        format!(
                            "{}: the exact solver did not finish within a budget of {budget}; the heuristic's layouts are kept",
                            self.name()
                        ),
                    );
                    heuristic.clone()
                }
                _ => heuristic.clone(),
            };
            let copies = select::copies(&p, &model, &choice);
            annotate(m, &p, &choice);
            add_copies(m, &p, &copies, block);
            let op = m.op_mut(f);
            op.attrs.insert(
                LAYOUT_COST.into(),
                Attribute::Float(
                    round(q.cost(&choice)),
                    Type::Scalar(ircc_core::ElemType::F64),
                ),
            );
            if let Some(s) = &exact {
                op.attrs.insert(
                    LAYOUT_COST_PBQP.into(),
                    Attribute::Float(round(s.cost), Type::Scalar(ircc_core::ElemType::F64)),
                );
            }
            op.attrs.insert(
                COPIES.into(),
                Attribute::Int(copies.len() as i64, Type::Scalar(ircc_core::ElemType::I64)),
            );
        }
        Ok(())
    }
}

/// Costs to a thousandth of a nanosecond, so that printed figures do not
/// show the noise of summation order.
fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Records each producer's layouts.
fn annotate(m: &mut Module, p: &Problem, choice: &[usize]) {
    let mut by_op: HashMap<OpId, Vec<Choice>> = HashMap::new();
    for (i, node) in p.nodes.iter().enumerate() {
        let Some(op) = m.defining_op(node.value) else {
            continue;
        };
        let results = m.op(op).results.clone();
        let k = results
            .iter()
            .position(|&r| r == node.value)
            .expect("a result of its op");
        by_op
            .entry(op)
            .or_insert_with(|| vec![Choice::Buffer; results.len()])[k] = node.choices[choice[i]];
    }
    for (op, choices) in by_op {
        let attr = Attribute::Array(choices.into_iter().map(choice_attr).collect());
        m.op_mut(op).attrs.insert(LAYOUTS.into(), attr);
    }
}

/// Gives each read that the cost model sends through an extra copy its
/// copy: a `graph.identity` of the stored tensor in the copy's layout
/// (one per tensor and layout, before its first reader), with the reader's
/// views repeated over it.
fn add_copies(m: &mut Module, p: &Problem, copies: &[(usize, Choice)], block: ircc_core::BlockId) {
    if copies.is_empty() {
        return;
    }
    let position: HashMap<OpId, usize> = m.blocks[block]
        .ops
        .iter()
        .enumerate()
        .map(|(i, &o)| (o, i))
        .collect();
    let mut first_reader: HashMap<(ValueId, Choice), OpId> = HashMap::new();
    for &(r, c) in copies {
        let read = &p.reads[r];
        let key = (p.nodes[read.node].value, c);
        let e = first_reader.entry(key).or_insert(read.consumer);
        if position[&read.consumer] < position[e] {
            *e = read.consumer;
        }
    }
    let mut inserts: HashMap<OpId, Vec<OpId>> = HashMap::new();
    let mut made: HashMap<(ValueId, Choice), ValueId> = HashMap::new();
    for &(r, c) in copies {
        let read = &p.reads[r];
        let stored = p.nodes[read.node].value;
        let key = (stored, c);
        let copy = match made.get(&key) {
            Some(&v) => v,
            None => {
                let ty = m.value_type(stored).clone();
                let op = m.create_op(
                    OpBuilder::new(GraphOp::Identity.name())
                        .operands([stored])
                        .results([ty])
                        .attr(LAYOUTS, Attribute::Array(vec![choice_attr(c)]))
                        .attr(SCHEDULE_ATTR, Schedule::Elementwise.to_attr())
                        .loc(m.op(read.consumer).loc.clone()),
                );
                inserts.entry(first_reader[&key]).or_default().push(op);
                let v = m.op(op).results[0];
                made.insert(key, v);
                v
            }
        };
        // The reader's views, from the stored tensor up, over the copy.
        let host = m.op(read.consumer).operands[read.operand];
        let mut chain = Vec::new();
        let mut v = host;
        while let Some(view) = m.defining_op(v).filter(|&o| index::is_view(m, o)) {
            chain.push(view);
            v = m.op(view).operands[0];
        }
        let mut over = copy;
        for &view in chain.iter().rev() {
            let o = m.op(view).clone();
            let op = m.create_op(
                OpBuilder::new(o.name.clone())
                    .operands([over])
                    .results([m.value_type(o.results[0]).clone()])
                    .attrs(o.attrs.clone())
                    .loc(o.loc.clone()),
            );
            inserts.entry(read.consumer).or_default().push(op);
            over = m.op(op).results[0];
        }
        m.set_operand(read.consumer, read.operand, over);
    }
    m.sweep_block(block, &inserts);
}
