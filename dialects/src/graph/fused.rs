//! `graph.fused` and its terminator `graph.yield`: a group of graph ops
//! that one kernel computes. The region's block takes the operands as
//! arguments; the interpreter runs it like a function body.

use super::{GraphOp, GraphOp as G};
use ircc_core::interp::Env;
use ircc_core::registry::OpView;
use ircc_core::{Tensor, Type};

pub fn verify_fused(v: &OpView) -> Result<(), String> {
    let m = v.module;
    let o = m.op(v.op);
    let [region] = o.regions[..] else {
        return Err("a fused op has one region".to_string());
    };
    let [block] = m.regions[region].blocks[..] else {
        return Err("a fused op's region has one block".to_string());
    };
    let arg_types: Vec<&Type> = m.blocks[block]
        .args
        .iter()
        .map(|&a| m.value_type(a))
        .collect();
    let operand_types: Vec<&Type> = o.operands.iter().map(|&x| m.value_type(x)).collect();
    if arg_types != operand_types {
        return Err("the region's arguments must have the types of the operands".to_string());
    }
    let last = m.blocks[block].ops.last().map(|&t| m.op(t));
    match last {
        Some(y) if GraphOp::from_name(&y.name) == Some(G::Yield) => {
            let yielded: Vec<&Type> = y.operands.iter().map(|&x| m.value_type(x)).collect();
            let results: Vec<&Type> = o.results.iter().map(|&r| m.value_type(r)).collect();
            if yielded != results {
                return Err("the graph.yield must give values of the result types".to_string());
            }
            Ok(())
        }
        _ => Err("the region must end with graph.yield".to_string()),
    }
}

pub fn verify_yield(v: &OpView) -> Result<(), String> {
    let m = v.module;
    let parent = m
        .op(v.op)
        .parent
        .and_then(|b| m.blocks[b].parent)
        .and_then(|r| m.regions[r].parent);
    match parent {
        Some(p) if GraphOp::of(m, p) == Some(G::Fused) => Ok(()),
        _ => Err("a graph.yield must end a graph.fused region".to_string()),
    }
}

pub fn interpret_fused(
    v: &OpView,
    args: &[Tensor],
    env: &mut dyn Env,
) -> Result<Vec<Tensor>, String> {
    let region = v.module.op(v.op).regions[0];
    env.run_region(v.module, region, args.to_vec())
}
