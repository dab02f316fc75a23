//! `kernel.lower`: every compute op of the host function (a `graph.fused`
//! group, or a lone graph op) becomes one or more `kernel.func`s and the
//! `kernel.launch`es that run them.
//!
//! A group is built from the template its `kernel.schedule` names, with
//! the parameters it gives (`schedule.rs`, the `kernel.schedule` pass,
//! chooses them from its anchor, DNNFusion's one Many-to-Many op, and the
//! target; this pass decides nothing): a tiled matmul for matmul and gemm, a workgroup-per-row
//! reduction for softmax, layer and instance norm and reductions, a
//! sequential walk per batch and class for non-maximum suppression, and one
//! invocation per output element for everything else (element-wise ops,
//! convolutions, pools, gathers, concat, pad). Templates ask for operands
//! by index (`KernelBuilder::value_at`), so eliminated layout ops and the
//! views between kernels cost only index arithmetic, and prologue and
//! epilogue ops are computed where they are needed. Group outputs that do
//! not share the anchor's iteration space get an element-wise kernel each.
//!
//! The module's `kernel.precision = "f16"` stores float tensors as f16 and computes in f16,
//! accumulating matmuls, convolutions and reductions in f32. A tensor
//! that texture.map placed (`texture.place`, read back by `texture.read`)
//! is written by its element-wise kernel into the texture through the
//! layout, texel by texel, and read by every kernel through the same map.

mod address;
mod attention;
mod cooperative;
mod depthwise;
mod group;
mod grouped;
mod lowering;
mod matmul;
mod nms;
mod product;
mod prologue;
mod row;
mod schedule;
mod templates;
mod upsample;
mod values;
mod vector;

use crate::decl::KernelLowerOptions;
use ircc_core::diag::{Diagnostic, Diagnostics};
use ircc_core::ir::OpBuilder;
use ircc_core::pass::{Pass, PassContext};
use std::collections::HashMap;

use ircc_core::minifloat::MiniFloat;
use ircc_core::registry::MappingType;
use ircc_core::{Module, OpId, ValueId};
use ircc_dialects::graph::GraphOp;
use ircc_dialects::is_data;
use ircc_dialects::kernel::{SCHEDULE_ATTR, Schedule};
use ircc_dialects::texture::{self, TextureLayout, TextureOp, TextureType};

use group::group_of;
pub use lowering::{ArgRole, kernel_elem, storage_elem};
pub use schedule::KernelSchedule;
pub(crate) use templates::result_writer;

use crate::index::simplify::rules;
use crate::tuning::SharedTuning;

/// `kernel.lower`: it reads each op's `kernel.schedule` and the module's
/// precision and decides nothing of its own.
#[derive(Default)]
pub struct KernelLower {
    /// The tuning `ircc tune` shares with this pass (its trials' table,
    /// which overrides the schedules of the signatures it lists, and the
    /// tunable kernels the pass records).
    shared: Option<SharedTuning>,
}

impl KernelLower {
    /// The pass lowering with `tuning`'s table, recording its tunable
    /// kernels there.
    pub fn tuned_by(tuning: SharedTuning) -> Self {
        KernelLower {
            shared: Some(tuning),
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
    lowering.textures = take_textures(m, block)?;
    materialize_returns(m, block);
    let ops = m.blocks[block].ops.clone();
    // Split products whose consumers read their partials: they stay, for
    // their epilogue's operands, until those consumers are lowered.
    let mut kept = Vec::new();
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
        // Kernels hold 8- and 4-bit floats widened and round element-wise
        // results to them; a product, reduction or normalization would
        // have to round inside its template, which none does.
        let narrow_result = GraphOp::of(m, group.anchor)
            .filter(|k| k.mapping() == Some(MappingType::ManyToMany))
            .and_then(|_| {
                m.op(group.anchor).results.iter().find_map(|&v| {
                    m.value_type(v)
                        .as_tensor()
                        .map(|t| t.elem)
                        .filter(|&e| MiniFloat::of(e).is_some())
                })
            });
        if let Some(elem) = narrow_result {
            return Err(Diagnostic::error(
                loc,
                format!(
                    "{}: '{name}' computes a tensor of {elem}, which only element-wise kernels round to (the interpreter runs it)",
                    KernelLowerOptions::NAME
                ),
            ));
        }
        let schedule = match Schedule::of(m, group.op) {
            Ok(Some(s)) => s,
            Ok(None) => {
                return Err(Diagnostic::error(
                    loc,
                    format!(
                        "{}: '{name}' has no {SCHEDULE_ATTR}: run kernel.schedule before it",
                        KernelLowerOptions::NAME
                    ),
                ));
            }
            Err(e) => {
                return Err(Diagnostic::error(
                    loc,
                    format!("{}: '{name}': {e}", KernelLowerOptions::NAME),
                ));
            }
        };
        let read_by_consumers =
            templates::lower_group(m, lowering, &group, schedule).map_err(|e| {
                Diagnostic::error(loc, format!("{}: '{name}': {e}", KernelLowerOptions::NAME))
            })?;
        if read_by_consumers {
            kept.push(op);
        } else {
            m.erase_op(op);
        }
    }
    remove_dead(m, block, &kept);
    Ok(())
}

/// The tensors texture.map placed, by layout: each `texture.read` of a
/// `texture.place` gives way to the placed tensor, which its kernel then
/// writes into the texture and its readers read through the layout.
fn take_textures(
    m: &mut Module,
    block: ircc_core::BlockId,
) -> Result<HashMap<ValueId, TextureLayout>, Diagnostic> {
    let mut layouts = HashMap::new();
    let ops = m.blocks[block].ops.clone();
    let error = |m: &Module, op: OpId, what: &str| {
        Diagnostic::error(
            m.op(op).loc.clone(),
            format!("{}: {what}", KernelLowerOptions::NAME),
        )
    };
    for &op in &ops {
        let Some(read) = texture::ops::Read::new(m, op) else {
            continue;
        };
        let place = m
            .defining_op(read.texture())
            .and_then(|p| texture::ops::Place::new(m, p))
            .ok_or_else(|| error(m, op, "a texture.read of a texture no texture.place wrote"))?;
        if place.layout() != read.layout() {
            return Err(error(
                m,
                op,
                "a texture read through another layout than it was placed with",
            ));
        }
        let tensor = place.tensor();
        let computed = m
            .defining_op(tensor)
            .is_some_and(|d| GraphOp::of(m, d).is_some() && !is_data(m, d));
        if !computed {
            return Err(error(
                m,
                op,
                "only a tensor a kernel computes can be placed in a texture (not an argument, a weight, a constant or a view)",
            ));
        }
        let shape = m
            .value_type(tensor)
            .as_tensor()
            .map(|t| t.shape.clone())
            .unwrap_or_default();
        let ty = TextureType::of(m.value_type(read.texture())).map_err(|e| error(m, op, &e))?;
        let layout = TextureLayout::recognize(&shape, place.layout(), ty).ok_or_else(|| {
            error(
                m,
                op,
                "the layout is not one kernels address (an axis in the lanes, an axis along x)",
            )
        })?;
        let result = read.tensor();
        layouts.insert(tensor, layout);
        m.replace_all_uses(result, tensor);
        m.erase_op_later(op);
    }
    for &op in &ops {
        if TextureOp::of(m, op) == Some(TextureOp::Place) {
            if !m.value(m.op(op).results[0]).uses.is_empty() {
                return Err(error(m, op, "a texture is used other than by texture.read"));
            }
            m.erase_op_later(op);
        }
    }
    m.sweep_block(block, &HashMap::new());
    Ok(layouts)
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
                .attr(SCHEDULE_ATTR, Schedule::Elementwise.to_attr())
                .results([ty]),
        );
        m.insert_before(ret, copy);
        let r = m.op(copy).results[0];
        m.set_operand(ret, i, r);
    }
}

/// Erases the data ops no kernel reads any more, and the `kept` ops
/// (whose readers are all lowered by now), last user first.
fn remove_dead(m: &mut Module, block: ircc_core::BlockId, kept: &[OpId]) {
    let ops = m.blocks[block].ops.clone();
    for &op in ops.iter().rev() {
        let removable = is_data(m, op) || kept.contains(&op);
        if removable && m.op(op).results.iter().all(|&r| m.value(r).uses.is_empty()) {
            m.erase_op(op);
        }
    }
}

impl Pass for KernelLower {
    fn name(&self) -> &str {
        KernelLowerOptions::NAME
    }

    fn run(&mut self, module: &mut Module, ctx: &PassContext) -> Result<(), Diagnostics> {
        let float = ircc_dialects::kernel::precision(module).map_err(|e| {
            Diagnostics(vec![Diagnostic::plain(format!(
                "{}: {e}",
                KernelLowerOptions::NAME
            ))])
        })?;
        let rules = rules();
        let cache = lowering::SimplifyCache::default();
        let mut lowering = templates::Lowering {
            ctx,
            rules: &rules,
            cache: &cache,
            float,
            counter: 0,
            textures: HashMap::new(),
            split: HashMap::new(),
            tuning: self.shared.clone(),
        };
        for f in module.functions() {
            lower_function(module, &mut lowering, f).map_err(|d| Diagnostics(vec![d]))?;
        }
        Ok(())
    }
}
