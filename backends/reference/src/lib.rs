//! The reference interpreter. It runs a function op by op through the
//! dialects' interpret hooks, so every IR level that has hooks can be
//! executed and compared with the level before it.
//!
//! Also here: reading and writing `.npy` files and loading weights from
//! `.safetensors`, the file formats of `ircc run`.

mod npy;
mod weights;

pub use ircc_core::builtin::{input_names, output_names};
pub use npy::{Npy, ml_dtypes_hint, read_npy, read_npy_file, read_npy_shape, write_npy};
pub use weights::{
    MemoryWeights, SafetensorsWeights, elem_of_dtype, safetensors_dtype, write_safetensors,
};

use std::collections::HashMap;

use ircc_core::interp::Env;
use ircc_core::ir::ValueId;
use ircc_core::{Diagnostic, Module, OpId, Registry, Tensor, Type};

use ircc_core::limits::MAX_INTERPRETED_ELEMENTS;

/// Runs `func` (a `func.func` symbol) on `inputs` and returns its results.
pub fn run_function(
    module: &Module,
    registry: &Registry,
    func: &str,
    inputs: Vec<Tensor>,
    env: &mut dyn Env,
) -> Result<Vec<Tensor>, Diagnostic> {
    run_function_with_progress(module, registry, func, inputs, env, &mut |_, _| {})
}

/// [`run_function`], calling `progress(done, total)` after each op of the
/// function's body (ops inside regions count with the op holding them).
pub fn run_function_with_progress(
    module: &Module,
    registry: &Registry,
    func: &str,
    inputs: Vec<Tensor>,
    env: &mut dyn Env,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Tensor>, Diagnostic> {
    let f = module
        .lookup_symbol(func)
        .ok_or_else(|| Diagnostic::plain(format!("no function '@{func}' in the module")))?;
    let entry = module.entry_block(f).ok_or_else(|| {
        Diagnostic::error(
            module.op(f).loc.clone(),
            format!("function '@{func}' has no body"),
        )
    })?;
    let args = &module.blocks[entry].args;
    if args.len() != inputs.len() {
        return Err(Diagnostic::plain(format!(
            "'@{func}' takes {} inputs but {} were given",
            args.len(),
            inputs.len()
        )));
    }
    for (i, (&a, t)) in args.iter().zip(&inputs).enumerate() {
        let want = module.value_type(a);
        if Type::Tensor(t.ty()) != *want {
            let name = module
                .value(a)
                .name
                .clone()
                .unwrap_or_else(|| format!("#{i}"));
            return Err(Diagnostic::plain(format!(
                "input '{name}' has type {} but the function expects {want}",
                t.ty()
            )));
        }
    }
    let mut regions = Regions {
        registry,
        weights: env,
    };
    run_block(module, registry, entry, inputs, &mut regions, progress)
}

/// The interpreter's environment: weights from the caller, and regions
/// run by this interpreter.
struct Regions<'a> {
    registry: &'a Registry,
    weights: &'a mut dyn Env,
}

impl Env for Regions<'_> {
    fn param(&mut self, name: &str, ty: &ircc_core::TensorType) -> Result<Tensor, String> {
        self.weights.param(name, ty)
    }

    fn run_region(
        &mut self,
        module: &Module,
        region: ircc_core::RegionId,
        args: Vec<Tensor>,
    ) -> Result<Vec<Tensor>, String> {
        let block = *module.regions[region]
            .blocks
            .first()
            .ok_or("the region has no block")?;
        let registry = self.registry;
        run_block(module, registry, block, args, self, &mut |_, _| {}).map_err(|d| d.to_string())
    }
}

/// Runs a block: its arguments are `args`, its last op (a terminator such
/// as `func.return` or `graph.yield`) gives the results.
fn run_block(
    module: &Module,
    registry: &Registry,
    block: ircc_core::BlockId,
    args: Vec<Tensor>,
    env: &mut dyn Env,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Tensor>, Diagnostic> {
    let b = &module.blocks[block];
    let mut values: HashMap<ValueId, Tensor> = b.args.iter().copied().zip(args).collect();
    // How many reads are left of each value, so intermediates are freed early.
    let mut remaining: HashMap<ValueId, usize> = HashMap::new();
    for &op in &b.ops {
        for &v in &module.op(op).operands {
            *remaining.entry(v).or_default() += 1;
        }
    }
    let Some((&last, body)) = b.ops.split_last() else {
        return Ok(Vec::new());
    };
    for (done, &op) in body.iter().enumerate() {
        progress(done, body.len());
        let o = module.op(op);
        let outputs = run_op(module, registry, op, &values, env)?;
        for &v in &o.operands {
            let left = remaining.get_mut(&v).expect("counted above");
            *left -= 1;
            if *left == 0 {
                values.remove(&v);
            }
        }
        for (&r, t) in o.results.iter().zip(outputs) {
            values.insert(r, t);
        }
    }
    operand_values(module, last, &values)
}

/// The values of `op`'s operands.
fn operand_values(
    module: &Module,
    op: OpId,
    values: &HashMap<ValueId, Tensor>,
) -> Result<Vec<Tensor>, Diagnostic> {
    module
        .op(op)
        .operands
        .iter()
        .map(|&v| {
            values
                .get(&v)
                .cloned()
                .ok_or_else(|| missing(module, op, v))
        })
        .collect()
}

fn missing(module: &Module, op: OpId, v: ValueId) -> Diagnostic {
    Diagnostic::error(
        module.op(op).loc.clone(),
        format!("internal error: value #{} was not computed", v.index()),
    )
}

/// Interprets one operation whose operands are in `values`.
pub fn run_op(
    module: &Module,
    registry: &Registry,
    op: OpId,
    values: &HashMap<ValueId, Tensor>,
    env: &mut dyn Env,
) -> Result<Vec<Tensor>, Diagnostic> {
    let o = module.op(op);
    let err = |m: String| {
        Diagnostic::error(
            o.loc.clone(),
            format!("while interpreting '{}': {m}", o.name),
        )
    };
    let def = registry
        .get(&o.name)
        .ok_or_else(|| err("the operation is not registered".to_string()))?;
    let interpret = def
        .hooks
        .interpret
        .ok_or_else(|| err("the operation cannot be interpreted".to_string()))?;
    let args = operand_values(module, op, values)?;
    for &r in &o.results {
        if let Type::Tensor(t) = module.value_type(r)
            && t.num_elements() > MAX_INTERPRETED_ELEMENTS
        {
            return Err(err(format!(
                "{t} is larger than the interpreter's limit of {MAX_INTERPRETED_ELEMENTS} elements"
            )));
        }
    }
    let view = registry
        .view(module, op)
        .ok_or_else(|| err("the operation is not registered".to_string()))?;
    let outputs = interpret(&view, &args, env).map_err(err)?;
    if outputs.len() != o.results.len() {
        return Err(err(format!(
            "produced {} results instead of {}",
            outputs.len(),
            o.results.len()
        )));
    }
    // A result of a dialect's own type (a texture) is that dialect's to check.
    for (i, (&r, t)) in o.results.iter().zip(&outputs).enumerate() {
        let declared = module.value_type(r);
        if declared.as_tensor().is_some() && Type::Tensor(t.ty()) != *declared {
            return Err(err(format!(
                "result #{i} came out as {} but is declared {}",
                t.ty(),
                module.value_type(r)
            )));
        }
    }
    Ok(outputs)
}
