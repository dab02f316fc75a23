//! Static figures of a compiled module, the same on every machine:
//! `ircc stats`.

use std::collections::HashSet;

use ircc_core::ir::ValueId;
use ircc_core::{Attribute, Module, OpId, Type};
use ircc_dialects::graph::GraphOp;
use ircc_dialects::index::is_view;
use ircc_dialects::is_data;
use ircc_dialects::texture::TextureOp;

/// Operations that compute: graph ops other than constants and weights,
/// nested ones included.
pub fn graph_op_count(module: &Module) -> usize {
    let mut n = 0;
    module.walk(|op| {
        let structural = matches!(
            GraphOp::of(module, op),
            None | Some(GraphOp::Fused | GraphOp::Yield)
        );
        if !structural && !is_data(module, op) {
            n += 1;
        }
    });
    n
}

/// The top-level ops that launch a kernel: everything that computes (not
/// constants, weights or views, which kernels read).
pub fn kernels(module: &Module) -> Vec<OpId> {
    module
        .functions()
        .iter()
        .filter_map(|&f| module.entry_block(f))
        .flat_map(|b| module.blocks[b].ops.iter().copied())
        .filter(|&op| GraphOp::of(module, op).is_some() && !is_data(module, op))
        .collect()
}

fn bytes(module: &Module, v: ValueId) -> i64 {
    match module.value_type(v) {
        Type::Tensor(t) => t.byte_size(),
        _ => 0,
    }
}

/// Whether `op` only passes a tensor on (a view, or the texture level's
/// place and read, which the writing and reading kernels absorb).
fn passes_on(module: &Module, op: OpId) -> bool {
    is_view(module, op) || TextureOp::of(module, op).is_some()
}

/// What a kernel reads for an operand: a view's source, not the view.
fn stored(module: &Module, mut v: ValueId) -> ValueId {
    while let Some(op) = module.defining_op(v).filter(|&op| passes_on(module, op)) {
        v = module.op(op).operands[0];
    }
    v
}

pub struct Traffic {
    pub kernels: usize,
    /// Bytes read and written by all kernels: each distinct input once per
    /// kernel, weights included, each output once.
    pub bytes_moved: i64,
    /// Bytes of the tensors one kernel writes and another reads.
    pub intermediate_bytes: i64,
}

pub fn traffic(module: &Module) -> Traffic {
    let ks = kernels(module);
    let launched: HashSet<OpId> = ks.iter().copied().collect();
    let mut moved = 0;
    let mut intermediate = 0;
    for &k in &ks {
        let o = module.op(k);
        let inputs: HashSet<ValueId> = o.operands.iter().map(|&v| stored(module, v)).collect();
        moved += inputs.iter().map(|&v| bytes(module, v)).sum::<i64>();
        for &r in &o.results {
            moved += bytes(module, r);
            let read_by_kernel = readers(module, r)
                .iter()
                .any(|u| launched.contains(u) && *u != k);
            if read_by_kernel {
                intermediate += bytes(module, r);
            }
        }
    }
    Traffic {
        kernels: ks.len(),
        bytes_moved: moved,
        intermediate_bytes: intermediate,
    }
}

/// The ops that read `v`, looking through views.
fn readers(module: &Module, v: ValueId) -> Vec<OpId> {
    let mut out = Vec::new();
    for u in &module.value(v).uses {
        if passes_on(module, u.op) {
            for &r in &module.op(u.op).results {
                out.extend(readers(module, r));
            }
        } else {
            out.push(u.op);
        }
    }
    out
}

/// What the texture level decided, from the attributes layout.select and
/// memory.plan leave on the first function, and the textures texture.map
/// placed. Absent figures are `None` (the pipeline has no such pass, or
/// the exact solver did not finish).
#[derive(Default)]
pub struct Layouts {
    pub layout_cost: Option<f64>,
    pub layout_cost_pbqp: Option<f64>,
    pub copies: Option<i64>,
    pub texture_tensors: usize,
    pub peak_bytes: Option<i64>,
    pub pooled_bytes: Option<i64>,
    pub intermediate_bytes: Option<i64>,
    pub copy_bytes: Option<i64>,
}

pub fn layouts(module: &Module) -> Layouts {
    use ircc_core::Attribute;
    use ircc_passes::layout::{self, memory_plan};
    let Some(&f) = module.functions().first() else {
        return Layouts::default();
    };
    let attr = |name: &str| module.op(f).attr(name);
    let float = |name: &str| match attr(name) {
        Some(Attribute::Float(x, _)) => Some(*x),
        _ => None,
    };
    let int = |name: &str| match attr(name) {
        Some(Attribute::Int(x, _)) => Some(*x),
        _ => None,
    };
    let mut texture_tensors = 0;
    module.walk(|op| {
        if TextureOp::of(module, op) == Some(TextureOp::Place) {
            texture_tensors += 1;
        }
    });
    Layouts {
        layout_cost: float(layout::LAYOUT_COST),
        layout_cost_pbqp: float(layout::LAYOUT_COST_PBQP),
        copies: int(layout::COPIES),
        texture_tensors,
        peak_bytes: int(memory_plan::PEAK_BYTES),
        pooled_bytes: int(memory_plan::POOLED_BYTES),
        intermediate_bytes: int(memory_plan::INTERMEDIATE_BYTES),
        copy_bytes: int(memory_plan::COPY_BYTES),
    }
}

/// The address arithmetic of a lowered module's kernels (`kernel.ace`'s
/// figures): per kernel and in total, before the pass (its `ace.before`
/// attribute, or now where it did not run) and now.
pub fn addresses(module: &Module) -> Option<serde_json::Value> {
    use ircc_dialects::kernel::address::{AddressCounts, address_counts};
    use ircc_dialects::kernel::ops::Func;
    let json = |c: &AddressCounts| {
        serde_json::json!({
            "divmod": c.divmod,
            "addr_ops": c.addr_ops,
            "divmod_executed": c.divmod_executed,
            "addr_ops_executed": c.addr_ops_executed,
        })
    };
    let (mut before, mut after) = (AddressCounts::default(), AddressCounts::default());
    let mut per_kernel = Vec::new();
    for &op in &module.blocks[module.body].ops {
        let Some(kernel) = Func::new(module, op) else {
            continue;
        };
        let now = address_counts(module, op);
        let then = match module.op(op).attr(ircc_passes::kernel::ace::BEFORE) {
            Some(Attribute::DenseI64Array(v)) if v.len() == 4 => AddressCounts {
                divmod: v[0] as u64,
                addr_ops: v[1] as u64,
                divmod_executed: v[2] as u64,
                addr_ops_executed: v[3] as u64,
            },
            _ => now,
        };
        before += then;
        after += now;
        per_kernel.push(serde_json::json!({
            "name": kernel.sym_name(),
            "before": json(&then),
            "after": json(&now),
        }));
    }
    (!per_kernel.is_empty()).then(|| {
        serde_json::json!({
            "before": json(&before),
            "after": json(&after),
            "per_kernel": per_kernel,
        })
    })
}
