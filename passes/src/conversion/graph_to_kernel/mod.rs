//! `kernel.lower`: every compute op of the host function (a `graph.fused`
//! group, or a lone graph op) becomes one or more `kernel.func`s and the
//! `kernel.launch`es that run them.
//!
//! A group is built from the template of its anchor (DNNFusion's one
//! Many-to-Many op): a tiled matmul for matmul and gemm, a workgroup-per-row
//! reduction for softmax, layer and instance norm and reductions, and one
//! invocation per output element for everything else (element-wise ops,
//! convolutions, pools, gathers, concat, pad). Templates ask for operands
//! by index (`KernelBuilder::value_at`), so eliminated layout ops and the
//! views between kernels cost only index arithmetic, and prologue and
//! epilogue ops are computed where they are needed. Group outputs that do
//! not share the anchor's iteration space get an element-wise kernel each.
//!
//! Option `precision=f16` stores float tensors as f16 and computes in f16,
//! accumulating matmuls, convolutions and reductions in f32. Option
//! `textures=true` places every float intermediate that an element-wise
//! kernel writes in a 2.5D texture of the default layout (`texture.rs`),
//! exercising the texture path until layout selection picks layouts.

mod address;
mod group;
mod lowering;
mod product;
mod templates;
mod texture;
mod upsample;
mod values;

use crate::decl::{KernelLowerOptions, KernelLowerPrecision};
use ircc_core::diag::{Diagnostic, Diagnostics};
use ircc_core::ir::OpBuilder;
use ircc_core::pass::{Pass, PassContext};
use ircc_core::{ElemType, Module, OpId};
use ircc_dialects::graph::GraphOp;
use ircc_dialects::is_data;

use group::group_of;
pub use lowering::{ArgRole, kernel_elem, storage_elem};

use crate::index::simplify::rules;

pub struct KernelLower {
    float: ElemType,
    textures: bool,
}

impl KernelLower {
    pub fn new(options: KernelLowerOptions) -> Self {
        let float = match options.precision {
            KernelLowerPrecision::F32 => ElemType::F32,
            KernelLowerPrecision::F16 => ElemType::F16,
        };
        KernelLower {
            float,
            textures: options.textures,
        }
    }
}

/// Lowers one host function's compute ops, each group to its kernels.
fn lower_function(
    m: &mut Module,
    lowering: &mut templates::Lowering,
    func: OpId,
) -> Result<(), Diagnostic> {
    let block = m.entry_block(func).expect("a function has a body");
    materialize_returns(m, block);
    let ops = m.blocks[block].ops.clone();
    for op in ops {
        if is_data(m, op) || GraphOp::of(m, op).is_none() {
            continue;
        }
        let name = m.op(op).name.clone();
        let group = group_of(m, op);
        let loc = m.op(op).loc.clone();
        // A buffer binding cannot be empty, so neither can a tensor.
        let empty = m.op(op).results.iter().chain(&m.op(op).operands).any(|&v| {
            m.value_type(v)
                .as_tensor()
                .is_some_and(|t| t.shape.contains(&0))
        });
        if empty {
            return Err(Diagnostic::error(
                loc,
                format!(
                    "{}: '{name}' has a tensor with no elements, which kernels cannot bind",
                    KernelLowerOptions::NAME
                ),
            ));
        }
        templates::lower_group(m, lowering, &group).map_err(|e| {
            Diagnostic::error(loc, format!("{}: '{name}': {e}", KernelLowerOptions::NAME))
        })?;
        m.erase_op(op);
    }
    remove_dead_data(m, block);
    Ok(())
}

/// Outputs that are a view, a constant, a weight or an argument get a copy
/// kernel (graph.identity), so every output is a buffer a kernel wrote.
fn materialize_returns(m: &mut Module, block: ircc_core::BlockId) {
    let Some(&ret) = m.blocks[block].ops.last() else {
        return;
    };
    for i in 0..m.op(ret).operands.len() {
        let v = m.op(ret).operands[i];
        let computed = m.defining_op(v).is_some_and(|d| !is_data(m, d));
        if computed {
            continue;
        }
        let ty = m.value_type(v).clone();
        let copy = m.create_op(
            OpBuilder::new(GraphOp::Identity.name())
                .operands([v])
                .results([ty]),
        );
        m.insert_before(ret, copy);
        let r = m.op(copy).results[0];
        m.set_operand(ret, i, r);
    }
}

fn remove_dead_data(m: &mut Module, block: ircc_core::BlockId) {
    let ops = m.blocks[block].ops.clone();
    for &op in ops.iter().rev() {
        if is_data(m, op) && m.op(op).results.iter().all(|&r| m.value(r).uses.is_empty()) {
            m.erase_op(op);
        }
    }
}

impl Pass for KernelLower {
    fn name(&self) -> &str {
        KernelLowerOptions::NAME
    }

    fn run(&mut self, module: &mut Module, ctx: &PassContext) -> Result<(), Diagnostics> {
        let rules = rules();
        let cache = lowering::SimplifyCache::default();
        let mut lowering = templates::Lowering {
            ctx,
            rules: &rules,
            cache: &cache,
            float: self.float,
            counter: 0,
            textures: self.textures.then(Default::default),
        };
        for f in module.functions() {
            lower_function(module, &mut lowering, f).map_err(|d| Diagnostics(vec![d]))?;
        }
        Ok(())
    }
}
