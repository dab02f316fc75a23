//! The tensor-index passes: lowering layout ops to views, and simplifying
//! the views' maps.

pub(crate) mod lower;
pub mod maps;
pub mod simplify;

pub use lower::{AnnotateDependencies, LowerLayoutOps, lower_to_view, remove_dead_views};

use crate::decl::IndexSimplifyOptions;
use ircc_core::diag::Diagnostics;
use ircc_core::pass::{Pass, PassContext};
use ircc_core::{AffineExpr, AffineMap, Attribute, Module, Type};
use ircc_dialects::index::is_view;

/// Every `index.view` of the module.
fn views(module: &Module) -> Vec<ircc_core::OpId> {
    let mut views = Vec::new();
    module.walk(|op| {
        if is_view(module, op) {
            views.push(op);
        }
    });
    views
}

/// Whether the map sends every index to itself (an extent-1 axis may read 0).
fn is_identity(map: &AffineMap, shape: &[i64]) -> bool {
    map.num_results() == shape.len()
        && map.results.iter().enumerate().all(|(i, e)| match e {
            AffineExpr::Dim(d) => *d as usize == i,
            AffineExpr::Const(0) => shape[i] == 1,
            _ => false,
        })
}

/// `index.simplify`: rewrites the map of every view with [`simplify::simplify_map`].
pub struct Simplify {
    limits: simplify::Limits,
    rules: Vec<egg::Rewrite<simplify::Idx, simplify::Ranges>>,
}

impl Simplify {
    pub fn new(options: IndexSimplifyOptions) -> Self {
        let limits = simplify::Limits {
            iterations: options.iterations.max(0) as usize,
            nodes: options.nodes.max(0) as usize,
        };
        Simplify {
            limits,
            rules: simplify::rules(),
        }
    }
}

impl Pass for Simplify {
    fn name(&self) -> &str {
        IndexSimplifyOptions::NAME
    }

    fn run(&mut self, module: &mut Module, _ctx: &PassContext) -> Result<(), Diagnostics> {
        for op in views(module) {
            let Some(Attribute::AffineMap(map)) = module.op(op).attr("map").cloned() else {
                continue;
            };
            let Type::Tensor(t) = module.value_type(module.op(op).results[0]) else {
                continue;
            };
            let simplified = simplify::simplify_map(&map, &t.shape, &self.rules, self.limits);
            let (source, result) = (module.op(op).operands[0], module.op(op).results[0]);
            if is_identity(&simplified, &t.shape)
                && module.value_type(source) == module.value_type(result)
            {
                // Partition followed by reverse, say: the view is the source.
                module.replace_all_uses(result, source);
                module.erase_op(op);
                continue;
            }
            module
                .op_mut(op)
                .attrs
                .insert("map".into(), Attribute::AffineMap(simplified));
        }
        Ok(())
    }
}
