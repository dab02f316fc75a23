//! A pass that lives outside ircc: `example.fold-double-neg` rewrites
//! `neg(neg(x))` to `x`. Built as a library, it is a plugin the stock
//! `ircc` loads (`--load-pass-plugin`); [`register`] also adds it to a
//! custom driver (examples/custom-driver).

use ircc_core::diag::Diagnostics;
use ircc_core::pass::{Pass, PassContext, PassDecl, PassRegistry};
use ircc_core::{Module, Registry};
use ircc_dialects::graph::GraphOp;

/// The pass's declaration: its name in pipelines, its summary and (none)
/// options, as `ircc --list-passes` shows them.
pub const DECL: PassDecl = PassDecl {
    name: "example.fold-double-neg",
    summary: "rewrite neg(neg(x)) to x",
    options: &[],
};

pub struct FoldDoubleNeg;

impl Pass for FoldDoubleNeg {
    fn name(&self) -> &str {
        DECL.name
    }

    fn run(&mut self, module: &mut Module, _ctx: &PassContext) -> Result<(), Diagnostics> {
        let mut negs = Vec::new();
        module.walk(|op| negs.push(op));
        for op in negs {
            let o = module.op(op);
            if GraphOp::of(module, op) != Some(GraphOp::Neg) || o.parent.is_none() {
                continue;
            }
            let Some(inner) = module.defining_op(o.operands[0]) else {
                continue;
            };
            if GraphOp::of(module, inner) != Some(GraphOp::Neg) {
                continue;
            }
            let (result, source) = (o.results[0], module.op(inner).operands[0]);
            module.replace_all_uses(result, source);
            module.erase_op(op);
        }
        Ok(())
    }
}

/// Adds this crate's pass (it adds no dialect).
pub fn register(_registry: &mut Registry, passes: &mut PassRegistry) {
    passes.register_decl(&DECL, |o| {
        o.expect_only(&[])?;
        Ok(Box::new(FoldDoubleNeg))
    });
}

// The symbols `ircc --load-pass-plugin` looks up: the stamp it checks,
// then `register`.
ircc_core::declare_plugin!(register);
