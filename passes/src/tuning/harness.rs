//! The harness `ircc tune` times a kernel signature in: a function that
//! computes a few of a module's groups alone, Ansor's and TVM's measure
//! loop made of the IR itself.
//!
//! The groups keep what feeds them without computing — index views, and
//! the texture moves texture.map placed (a texture is written by a copy of
//! the tensor it holds, as in the model) — so each group's kernel reads
//! its operands through the same addresses and layouts as in the model.
//! Everything else a group reads (activations, weights, constants) becomes
//! an argument of the function, and the groups' results its results: the
//! harness is a model like any other, lowered by `kernel.lower` and run
//! by a session on inputs of the real shapes.

use std::collections::{HashMap, HashSet};

use ircc_core::builtin::FuncOp;
use ircc_core::ir::{OpBuilder, ValueId};
use ircc_core::{Attribute, Attributes, Module, OpId, Type};
use ircc_dialects::graph::GraphOp;
use ircc_dialects::index::is_view;
use ircc_dialects::kernel::{SCHEDULE_ATTR, Schedule};
use ircc_dialects::texture::TextureOp;

/// The function `@main` of `base` cut down to `groups` (host ops of its
/// entry block) and what feeds them without computing; every other value
/// they read is an argument, appended after `@main`'s own (which stay,
/// unread, so that a reader of the harness's inputs meets them first).
pub fn harness(base: &Module, groups: &[OpId]) -> Result<Module, String> {
    let mut m = base.clone();
    let func = m
        .lookup_symbol("main")
        .ok_or("the module has no function '@main'")?;
    let block = m.entry_block(func).ok_or("'@main' has no body")?;
    if let Some(&g) = groups.iter().find(|&&g| m.op(g).parent != Some(block)) {
        return Err(format!("'{}' is not an op of '@main'", m.op(g).name));
    }
    // The kept ops: the groups, and the views and texture moves they read.
    let mut keep: HashSet<OpId> = HashSet::new();
    let mut stack = groups.to_vec();
    while let Some(op) = stack.pop() {
        if !keep.insert(op) {
            continue;
        }
        for &v in &m.op(op).operands {
            let Some(d) = m.defining_op(v) else { continue };
            let moves_data = is_view(&m, d)
                || matches!(
                    TextureOp::of(&m, d),
                    Some(TextureOp::Read | TextureOp::Place)
                )
                || (TextureOp::of(&m, op) == Some(TextureOp::Place)
                    && GraphOp::of(&m, d) == Some(GraphOp::Identity));
            if moves_data {
                stack.push(d);
            }
        }
    }
    let ops = m.blocks[block].ops.clone();
    // Each value a kept op reads from outside becomes an argument; a
    // texture's copy reads the argument through an identity, since only a
    // computed tensor is placed in a texture.
    let mut args: HashMap<ValueId, ValueId> = HashMap::new();
    let kept: Vec<OpId> = ops.iter().copied().filter(|op| keep.contains(op)).collect();
    for op in kept {
        for i in 0..m.op(op).operands.len() {
            let v = m.op(op).operands[i];
            if m.defining_op(v).is_none_or(|d| keep.contains(&d)) {
                continue;
            }
            let ty = m.value_type(v).clone();
            let arg = *args
                .entry(v)
                .or_insert_with(|| m.add_block_arg(block, ty.clone()));
            let operand = if TextureOp::of(&m, op) == Some(TextureOp::Place) {
                let copy = m.create_op(
                    OpBuilder::new(GraphOp::Identity.name())
                        .operands([arg])
                        .attr(SCHEDULE_ATTR, Schedule::Elementwise.to_attr())
                        .results([ty]),
                );
                m.insert_before(op, copy);
                keep.insert(copy);
                m.op(copy).results[0]
            } else {
                arg
            };
            m.set_operand(op, i, operand);
        }
    }
    // A product whose readers summed its partials has none here: it sums
    // them in a kernel of its own, which its time includes.
    for &g in groups {
        if let Ok(Some(Schedule::Matmul(mut s))) = Schedule::of(&m, g) {
            s.sum_in_consumers = false;
            Schedule::Matmul(s).attach(&mut m, g);
        }
    }
    let results: Vec<ValueId> = groups
        .iter()
        .flat_map(|&g| m.op(g).results.clone())
        .collect();
    for &op in ops.iter().rev().filter(|op| !keep.contains(op)) {
        m.erase_op_later(op);
    }
    m.sweep_block(block, &HashMap::new());
    let ret = m.create_op(OpBuilder::new(FuncOp::Return.name()).operands(results.clone()));
    m.append_op(block, ret);
    // The signature: every argument, and each result named after the
    // value it is (an output name is a file name, so kept plain).
    let inputs: Vec<Type> = m.blocks[block]
        .args
        .iter()
        .map(|&a| m.value_type(a).clone())
        .collect();
    let result_types: Vec<Type> = results.iter().map(|&r| m.value_type(r).clone()).collect();
    let named = |prefix: &str, n: usize| {
        Attribute::Array(
            (0..n)
                .map(|i| {
                    let mut d = Attributes::new();
                    d.insert(
                        "ircc.name".into(),
                        Attribute::String(format!("{prefix}{i}")),
                    );
                    Attribute::Dict(d)
                })
                .collect(),
        )
    };
    let attrs = &mut m.op_mut(func).attrs;
    attrs.insert(
        "function_type".into(),
        Attribute::Type(Type::Function {
            inputs: inputs.clone(),
            results: result_types.clone(),
        }),
    );
    attrs.insert("arg_attrs".into(), named("input", inputs.len()));
    attrs.insert("res_attrs".into(), named("result", result_types.len()));
    Ok(m)
}
