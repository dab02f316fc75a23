//! Hooks of the `func` dialect, which every module uses.

use crate::attr::Attribute;
use crate::registry::{OpHooks, OpView, Registry};
use crate::types::Type;

pub const FUNC_SPEC: &str = include_str!("../../../spec/dialects/func.toml");

fn function_type<'a>(v: &OpView<'a>) -> Result<(&'a [Type], &'a [Type]), String> {
    match v.attr("function_type") {
        Some(Attribute::Type(Type::Function { inputs, results })) => Ok((inputs, results)),
        _ => Err("'function_type' must be a function type".to_string()),
    }
}

fn verify_func(v: &OpView) -> Result<(), String> {
    let (inputs, _) = function_type(v)?;
    let op = v.module.op(v.op);
    if op.regions.len() != 1 {
        return Err("'func.func' has exactly one region".to_string());
    }
    if let Some(entry) = v.module.entry_block(v.op) {
        let args: Vec<&Type> = v.module.blocks[entry]
            .args
            .iter()
            .map(|&a| v.module.value_type(a))
            .collect();
        if args.len() != inputs.len() || args.iter().zip(inputs).any(|(a, b)| *a != b) {
            return Err("entry block arguments do not match the function type".to_string());
        }
        let blocks = &v.module.regions[op.regions[0]].blocks;
        for &b in blocks {
            match v.module.blocks[b].ops.last() {
                Some(&last) if v.module.op(last).name == "func.return" => {}
                _ => {
                    return Err("every block of a function must end with 'func.return'".to_string());
                }
            }
        }
    }
    Ok(())
}

fn verify_return(v: &OpView) -> Result<(), String> {
    let module = v.module;
    let func = module
        .op(v.op)
        .parent
        .and_then(|b| module.blocks[b].parent)
        .and_then(|r| module.regions[r].parent)
        .filter(|&f| module.op(f).name == "func.func")
        .ok_or("'func.return' must be directly inside a 'func.func'")?;
    let results = match module.op(func).attr("function_type") {
        Some(Attribute::Type(Type::Function { results, .. })) => results,
        _ => return Ok(()),
    };
    let operands = &module.op(v.op).operands;
    if operands.len() != results.len() {
        return Err(format!(
            "returns {} values but the function has {} results",
            operands.len(),
            results.len()
        ));
    }
    for (i, (&o, r)) in operands.iter().zip(results).enumerate() {
        let t = module.value_type(o);
        if t != r {
            return Err(format!(
                "returned value #{i} has type {t} but the function result is {r}"
            ));
        }
    }
    let block = module
        .op(v.op)
        .parent
        .ok_or("'func.return' is not in a block")?;
    if module.blocks[block].ops.last() != Some(&v.op) {
        return Err("'func.return' must be the last operation of its block".to_string());
    }
    Ok(())
}

pub fn register(registry: &mut Registry) -> Result<(), crate::diag::Diagnostic> {
    registry.add_dialect(
        FUNC_SPEC,
        &[
            (
                "func.func",
                OpHooks {
                    infer: None,
                    verify: Some(verify_func),
                    interpret: None,
                },
            ),
            (
                "func.return",
                OpHooks {
                    infer: None,
                    verify: Some(verify_return),
                    interpret: None,
                },
            ),
        ],
    )
}
