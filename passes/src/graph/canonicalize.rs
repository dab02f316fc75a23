//! `canonicalize`: constant folding of graph ops, common subexpression
//! elimination and dead code elimination, repeated until nothing changes.
//!
//! Folding runs the op's interpret hook on its constant operands, so it is
//! exactly the reference semantics; results larger than `max-elements` are
//! left unfolded so a module does not balloon with materialized tensors.

use std::collections::HashMap;

use crate::decl::CanonicalizeOptions;
use ircc_core::builtin::FuncOp;
use ircc_core::interp::NoWeights;
use ircc_core::ir::{BlockId, OpBuilder, ValueId};
use ircc_core::pass::{FunctionPass, PassContext, PassResult};
use ircc_core::{Attribute, Diagnostic, Module, OpId, Registry, Tensor, Type};
use ircc_dialects::graph::GraphOp;
use ircc_dialects::index::IndexOp;

pub struct Canonicalize {
    pub max_elements: i64,
}

impl Canonicalize {
    pub fn new(options: CanonicalizeOptions) -> Self {
        Canonicalize {
            max_elements: options.max_elements,
        }
    }
}

/// Operations that must stay even when their results are unused.
fn has_side_effects(module: &Module, op: OpId) -> bool {
    let o = module.op(op);
    let pure = GraphOp::of(module, op).is_some() || IndexOp::of(module, op).is_some();
    FuncOp::of(module, op) == Some(FuncOp::Return) || !o.regions.is_empty() || !pure
}

fn constant_value(module: &Module, v: ValueId) -> Option<Tensor> {
    ircc_dialects::constant_of(module, v).map(Tensor::from_dense)
}

impl Canonicalize {
    fn fold(
        &self,
        module: &mut Module,
        registry: &Registry,
        block: BlockId,
    ) -> Result<bool, Diagnostic> {
        let mut changed = false;
        for op in module.blocks[block].ops.clone() {
            let o = module.op(op);
            let kind = GraphOp::of(module, op);
            if matches!(kind, None | Some(GraphOp::Constant | GraphOp::Param))
                || !o.regions.is_empty()
            {
                continue;
            }
            let Some(interpret) = registry.get(&o.name).and_then(|d| d.hooks.interpret) else {
                continue;
            };
            // Sizes first: a splat operand is one value in the IR but a
            // whole tensor once evaluated.
            let too_big =
                o.results
                    .iter()
                    .chain(&o.operands)
                    .any(|&v| match module.value_type(v) {
                        Type::Tensor(t) => t.num_elements() > self.max_elements,
                        _ => true,
                    });
            if too_big || o.operands.is_empty() {
                continue;
            }
            let Some(args) = o
                .operands
                .iter()
                .map(|&v| constant_value(module, v))
                .collect::<Option<Vec<_>>>()
            else {
                continue;
            };
            let view = registry.view(module, op).expect("registered op");
            // An op that fails on constant inputs (say, an out-of-range
            // gather) is left for the interpreter to report at run time.
            let Ok(outputs) = interpret(&view, &args, &mut NoWeights) else {
                continue;
            };
            let (loc, results) = (o.loc.clone(), o.results.clone());
            for (r, t) in results.into_iter().zip(outputs) {
                let c = module.create_op(
                    OpBuilder::new(GraphOp::Constant.name())
                        .attr("value", Attribute::Dense(t.to_dense()))
                        .results([Type::Tensor(t.ty())])
                        .loc(loc.clone()),
                );
                module.insert_before(op, c);
                let new = module.op(c).results[0];
                module.values[new].name = module.value(r).name.clone();
                module.replace_all_uses(r, new);
            }
            changed = true;
        }
        Ok(changed)
    }

    /// Merges operations with the same name, operands, attributes and
    /// result types; the first one stays.
    fn cse(&self, module: &mut Module, block: BlockId) -> bool {
        let mut seen: HashMap<(String, Vec<ValueId>), Vec<OpId>> = HashMap::new();
        let mut changed = false;
        for op in module.blocks[block].ops.clone() {
            if has_side_effects(module, op) {
                continue;
            }
            let o = module.op(op);
            let key = (o.name.clone(), o.operands.clone());
            let candidates = seen.entry(key).or_default();
            let types = |m: &Module, x: OpId| -> Vec<Type> {
                m.op(x)
                    .results
                    .iter()
                    .map(|&r| m.value_type(r).clone())
                    .collect()
            };
            let twin = candidates
                .iter()
                .copied()
                .find(|&c| module.op(c).attrs == o.attrs && types(module, c) == types(module, op));
            match twin {
                Some(t) => {
                    let pairs: Vec<(ValueId, ValueId)> = module
                        .op(op)
                        .results
                        .iter()
                        .copied()
                        .zip(module.op(t).results.iter().copied())
                        .collect();
                    for (old, new) in pairs {
                        module.replace_all_uses(old, new);
                    }
                    changed = true;
                }
                None => candidates.push(op),
            }
        }
        changed
    }

    fn dce(&self, module: &mut Module, block: BlockId) -> bool {
        let mut changed = false;
        for op in module.blocks[block].ops.clone().into_iter().rev() {
            let dead = !has_side_effects(module, op)
                && module
                    .op(op)
                    .results
                    .iter()
                    .all(|&r| module.value(r).uses.is_empty());
            if dead {
                module.erase_op(op);
                changed = true;
            }
        }
        changed
    }
}

impl FunctionPass for Canonicalize {
    fn name(&self) -> &str {
        CanonicalizeOptions::NAME
    }

    fn run_on_body(&mut self, module: &mut Module, body: BlockId, ctx: &PassContext) -> PassResult {
        loop {
            let folded = self.fold(module, ctx.registry, body)?;
            let merged = self.cse(module, body);
            let removed = self.dce(module, body);
            if !(folded || merged || removed) {
                return Ok(());
            }
        }
    }
}
