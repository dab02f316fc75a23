//! `graph.eliminate-layout-ops` (SmartMem §3.2): SmartMem's Table 5 decides
//! for each producer–consumer pair whether a layout op goes; an op that
//! goes becomes an `index.view`, so its consumer reads through the map and
//! no transformed copy is ever made. A layout op without an affine map
//! (concat, pad) stays.

use ircc_core::pass::{FunctionPass, PassContext, PassResult};
use ircc_core::registry::LayoutClass;
use ircc_core::{BlockId, Module, OpId};
use ircc_dialects::graph::GraphOp;

use super::classify;
use super::tables::{Action, Tables};
use crate::index::{lower_to_view, remove_dead_views};

pub struct EliminateLayoutOps {
    tables: Tables,
}

impl EliminateLayoutOps {
    pub fn new(tables: Tables) -> Self {
        EliminateLayoutOps { tables }
    }

    fn class(&self, module: &Module, ctx: &PassContext, op: OpId) -> Option<LayoutClass> {
        classify(module, ctx.registry, &self.tables, op).map(|(_, layout)| layout)
    }

    /// Whether Table 5 eliminates `op` next to its producer or any consumer.
    fn eliminated(&self, module: &Module, ctx: &PassContext, op: OpId) -> bool {
        let Some(own) = self.class(module, ctx, op) else {
            return false;
        };
        let o = module.op(op);
        let producer = o
            .operands
            .first()
            .and_then(|&v| module.defining_op(v))
            .and_then(|p| self.class(module, ctx, p));
        let as_second = producer.is_some_and(|p| {
            matches!(
                self.tables.action(p, own),
                Action::EliminateSecond | Action::EliminateBoth
            )
        });
        let as_first = o
            .results
            .iter()
            .flat_map(|&r| module.value(r).uses.iter())
            .any(|u| {
                self.class(module, ctx, u.op).is_some_and(|c| {
                    matches!(
                        self.tables.action(own, c),
                        Action::EliminateFirst | Action::EliminateBoth
                    )
                })
            });
        as_second || as_first
    }
}

impl Default for EliminateLayoutOps {
    fn default() -> Self {
        Self::new(Tables::load())
    }
}

impl FunctionPass for EliminateLayoutOps {
    fn name(&self) -> &str {
        crate::decl::GraphEliminateLayoutOpsOptions::NAME
    }

    fn run_on_body(&mut self, module: &mut Module, body: BlockId, ctx: &PassContext) -> PassResult {
        for op in module.blocks[body].ops.clone() {
            if GraphOp::of(module, op).is_some() && self.eliminated(module, ctx, op) {
                lower_to_view(module, ctx, op);
            }
        }
        remove_dead_views(module, body);
        Ok(())
    }
}
