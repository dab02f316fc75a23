//! Hooks of the `func` dialect, which every module uses.

use crate::attr::Attribute;
use crate::registry::{OpHooks, OpView, Registry};
use crate::types::Type;

/// Typed views of the func ops, generated from the spec by `ircc-ods`.
pub mod ops {
    include!(concat!(env!("OUT_DIR"), "/func_ops.rs"));
}

/// Typed views of the index ops. They are generated here rather than with
/// the index dialect's hooks (`ircc-dialects`) because the textual format
/// has a pretty form of `index.view` (`spec/ir.md`).
pub mod index_ops {
    include!(concat!(env!("OUT_DIR"), "/index_ops.rs"));
}

pub use ops::FuncOp;

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
                Some(&last) if FuncOp::of(v.module, last) == Some(FuncOp::Return) => {}
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
        .filter(|&f| FuncOp::of(module, f) == Some(FuncOp::Func))
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
    let hooks = FuncOp::ALL.map(|op| {
        let verify: fn(&OpView) -> Result<(), String> = match op {
            FuncOp::Func => verify_func,
            FuncOp::Return => verify_return,
        };
        (
            op.name(),
            OpHooks {
                infer: None,
                verify: Some(verify),
                interpret: None,
            },
        )
    });
    registry.add_dialect(FUNC_SPEC, &hooks)
}

/// The names of a function's inputs: `ircc.name` of the argument where set,
/// else the argument's name in the source, else its position.
pub fn input_names(module: &crate::Module, func: crate::OpId) -> Vec<String> {
    let args = module
        .entry_block(func)
        .map(|b| module.blocks[b].args.clone())
        .unwrap_or_default();
    let attrs = per_item_attrs(module, func, "arg_attrs");
    args.iter()
        .enumerate()
        .map(|(i, &a)| {
            attrs
                .get(i)
                .and_then(|d| d.clone())
                .or_else(|| module.value(a).name.clone())
                .unwrap_or_else(|| format!("arg{i}"))
        })
        .collect()
}

/// The names of a function's results: `ircc.name` where set, else `resultN`.
pub fn output_names(module: &crate::Module, func: crate::OpId) -> Vec<String> {
    let n = match module.op(func).attr("function_type") {
        Some(Attribute::Type(Type::Function { results, .. })) => results.len(),
        _ => 0,
    };
    let attrs = per_item_attrs(module, func, "res_attrs");
    (0..n)
        .map(|i| {
            attrs
                .get(i)
                .and_then(|d| d.clone())
                .unwrap_or_else(|| format!("result{i}"))
        })
        .collect()
}

fn per_item_attrs(module: &crate::Module, func: crate::OpId, key: &str) -> Vec<Option<String>> {
    match module.op(func).attr(key) {
        Some(Attribute::Array(items)) => items
            .iter()
            .map(|d| match d {
                Attribute::Dict(d) => d
                    .get("ircc.name")
                    .and_then(Attribute::as_str)
                    .map(str::to_string),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}
