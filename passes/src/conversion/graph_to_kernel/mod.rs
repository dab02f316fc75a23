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
use ircc_core::{AffineMap, Attribute, ElemType, Module, OpId, ValueId};
use ircc_dialects::graph::GraphOp;
use ircc_dialects::{index, is_data};

pub use lowering::{ArgRole, kernel_elem, storage_elem};
use lowering::{Input, Ix, delinearize, linearize};

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

/// The index map of a layout op (result index to source index); reshapes
/// that no split/merge grouping describes go through the flat offset.
pub(crate) fn layout_map(m: &Module, ctx: &PassContext, op: OpId) -> Option<AffineMap> {
    if let Some(map) = crate::index::lower::layout_map(m, ctx, op) {
        return Some(map);
    }
    let o = m.op(op);
    use GraphOp as G;
    if !matches!(
        GraphOp::of(m, op),
        Some(G::Reshape | G::Flatten | G::Squeeze | G::Unsqueeze)
    ) {
        return None;
    }
    let from = m.value_type(o.operands[0]).as_tensor()?.shape.clone();
    let to = m.value_type(o.results[0]).as_tensor()?.shape.clone();
    let dims: Vec<Ix> = (0..to.len() as u32).map(Ix::dim).collect();
    let flat = linearize(&dims, &to);
    Some(AffineMap::new(
        to.len() as u32,
        0,
        delinearize(&flat, &from),
    ))
}

/// A group to lower: its ops' inputs bound to host values, and its
/// outputs (values inside the group) with the host results they become.
pub(crate) struct Group {
    pub op: OpId,
    pub anchor: OpId,
    pub bindings: Vec<(ValueId, ValueId)>,
    pub outputs: Vec<(ValueId, ValueId)>,
}

fn group_of(m: &Module, op: OpId) -> Group {
    let o = m.op(op);
    if GraphOp::of(m, op) != Some(GraphOp::Fused) {
        return Group {
            op,
            anchor: op,
            bindings: o.operands.iter().map(|&v| (v, v)).collect(),
            outputs: o.results.iter().map(|&r| (r, r)).collect(),
        };
    }
    let block = m.entry_block(op).expect("a fused op has a body");
    let anchor_name = match o.attr("anchor") {
        Some(Attribute::String(s)) => s.clone(),
        _ => String::new(),
    };
    let body = &m.blocks[block].ops;
    let anchor = body
        .iter()
        .copied()
        .find(|&x| m.op(x).name == anchor_name)
        .or_else(|| body.first().copied())
        .unwrap_or(op);
    let yield_op = *body.last().expect("a fused body ends in graph.yield");
    Group {
        op,
        anchor,
        bindings: m.blocks[block]
            .args
            .iter()
            .copied()
            .zip(o.operands.iter().copied())
            .collect(),
        outputs: m
            .op(yield_op)
            .operands
            .iter()
            .copied()
            .zip(o.results.iter().copied())
            .collect(),
    }
}

/// How a kernel reads host value `host`: through the views above it, or
/// as a splat folded into the code.
fn resolve_input(m: &Module, host: ValueId) -> Input {
    let mut stored = host;
    let mut map: Option<AffineMap> = None;
    while let Some(op) = m.defining_op(stored) {
        if let Some(view) = index::ops::View::new(m, op) {
            let v = view.map();
            map = Some(match map {
                None => v.clone(),
                Some(outer) => AffineMap::new(
                    outer.num_dims,
                    0,
                    v.results
                        .iter()
                        .map(|e| e.substitute(&outer.results, &[]))
                        .collect(),
                ),
            });
            stored = view.source();
            continue;
        }
        if let Some(d) = ircc_dialects::constant_of(m, stored) {
            let values = ircc_core::Tensor::from_dense(d).to_f64();
            if let Some(&first) = values.first()
                && values.iter().all(|&x| x == first)
            {
                return Input::Splat(first);
            }
        }
        break;
    }
    let shape = m
        .value_type(stored)
        .as_tensor()
        .map(|t| t.shape.clone())
        .unwrap_or_default();
    Input::Memory { stored, shape, map }
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
                    "kernel.lower: '{name}' has a tensor with no elements, which kernels cannot bind"
                ),
            ));
        }
        templates::lower_group(m, lowering, &group)
            .map_err(|e| Diagnostic::error(loc, format!("kernel.lower: '{name}': {e}")))?;
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
