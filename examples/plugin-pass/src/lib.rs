//! A pass that lives outside ircc: `example.fold-double-neg` rewrites
//! `neg(neg(x))` to `x`. [`driver`] builds an `ircc` that knows it.

use ircc_core::Module;
use ircc_core::diag::Diagnostics;
use ircc_core::pass::{Pass, PassContext};

pub struct FoldDoubleNeg;

impl Pass for FoldDoubleNeg {
    fn name(&self) -> &str {
        "example.fold-double-neg"
    }

    fn run(&mut self, module: &mut Module, _ctx: &PassContext) -> Result<(), Diagnostics> {
        let mut negs = Vec::new();
        module.walk(|op| negs.push(op));
        for op in negs {
            let o = module.op(op);
            if o.name != "graph.neg" || o.parent.is_none() {
                continue;
            }
            let Some(inner) = module.defining_op(o.operands[0]) else {
                continue;
            };
            if module.op(inner).name != "graph.neg" {
                continue;
            }
            let (result, source) = (o.results[0], module.op(inner).operands[0]);
            module.replace_all_uses(result, source);
            module.erase_op(op);
        }
        Ok(())
    }
}

/// ircc with this crate's pass added.
pub fn driver() -> Result<ircc::Driver, ircc_core::Diagnostic> {
    let mut d = ircc::Driver::new()?;
    d.passes_mut()
        .register("example.fold-double-neg", "rewrite neg(neg(x)) to x", |o| {
            o.expect_only(&[])?;
            Ok(Box::new(FoldDoubleNeg))
        });
    Ok(d)
}
