//! DNNFusion and SmartMem: operator classification against the tables of
//! `spec/fusion.toml`.

mod eliminate;
mod fuse;
pub mod tables;

pub use eliminate::EliminateLayoutOps;
pub use fuse::Fuse;

use ircc_core::diag::Diagnostics;
use ircc_core::pass::{Pass, PassContext};
use ircc_core::registry::{LayoutClass, MappingType};
use ircc_core::{AffineExpr, Attribute, Module, OpId, Registry, Type};
use ircc_dialects::graph::{self, GraphOp, shape};

pub use tables::Tables;

/// The DNNFusion mapping type and SmartMem class of an op: its spec's,
/// except that a one-to-one op whose tensor operands differ in shape (it
/// broadcasts) takes the class the tables give broadcasting elementwise ops.
pub fn classify(
    module: &Module,
    registry: &Registry,
    tables: &Tables,
    op: OpId,
) -> Option<(MappingType, LayoutClass)> {
    let spec = &registry.get(&module.op(op).name)?.spec;
    let (mapping, mut layout) = (spec.mapping?, spec.layout?);
    let shapes: Vec<&Vec<i64>> = module
        .op(op)
        .operands
        .iter()
        .filter_map(|&v| match module.value_type(v) {
            Type::Tensor(t) => Some(&t.shape),
            _ => None,
        })
        .collect();
    if mapping == MappingType::OneToOne && shapes.windows(2).any(|w| w[0] != w[1]) {
        layout = tables.broadcasting_elementwise;
    }
    Some((mapping, layout))
}

/// The layer_norm whose result product `product` (a matmul, or a gemm of
/// untransposed A) reads as its first operand, through views, normalized
/// along the product's K axis alone: each row of A is one row of the
/// normalization, so the product's kernel can compute its statistics per
/// row of its tile (spec/fusion.toml's `[prologues]`).
pub fn row_norm_prologue(m: &Module, product: OpId) -> Option<OpId> {
    let a = match GraphOp::of(m, product)? {
        GraphOp::Matmul => m.op(product).operands[0],
        GraphOp::Gemm if graph::ops::Gemm::new(m, product)?.trans_a() == 0 => {
            m.op(product).operands[0]
        }
        _ => return None,
    };
    let rank = m.value_type(a).as_tensor()?.rank();
    let (stored, map) = ircc_dialects::index::through_views(m, a);
    let norm = m.defining_op(stored)?;
    let ln = graph::ops::LayerNorm::new(m, norm)?;
    let (a_shape, ln_shape) = (
        &m.value_type(a).as_tensor()?.shape,
        &m.value_type(stored).as_tensor()?.shape,
    );
    let ln_rank = ln_shape.len();
    // The normalized rows are whole rows of A: as long as K.
    if rank < 2
        || shape::axis(ln.axis(), ln_rank).ok()? != ln_rank - 1
        || ln_shape.last() != a_shape.last()
    {
        return None;
    }
    // K, A's last axis, is the normalized axis, and the other axes of A
    // pick the rows.
    let k = rank as u32 - 1;
    let aligned = map.is_none_or(|map| {
        map.results.len() == ln_rank
            && map.results[ln_rank - 1] == AffineExpr::dim(k)
            && map.results[..ln_rank - 1].iter().all(|e| !e.uses_dim(k))
    });
    aligned.then_some(norm)
}

/// `graph.classify`: records every graph op's classes as `ircc.mapping`
/// and `ircc.layout`, so they show in the IR.
pub struct Classify {
    tables: Tables,
}

impl Classify {
    pub fn new(tables: Tables) -> Self {
        Classify { tables }
    }
}

impl Default for Classify {
    fn default() -> Self {
        Self::new(Tables::load())
    }
}

impl Pass for Classify {
    fn name(&self) -> &str {
        crate::decl::GraphClassifyOptions::NAME
    }

    fn run(&mut self, module: &mut Module, ctx: &PassContext) -> Result<(), Diagnostics> {
        let mut ops = Vec::new();
        module.walk(|op| ops.push(op));
        for op in ops {
            if matches!(
                GraphOp::of(module, op),
                None | Some(GraphOp::Constant | GraphOp::Param)
            ) {
                continue;
            }
            if let Some((mapping, layout)) = classify(module, ctx.registry, &self.tables, op) {
                let attrs = &mut module.op_mut(op).attrs;
                attrs.insert(
                    "ircc.mapping".into(),
                    Attribute::String(mapping.name().into()),
                );
                attrs.insert(
                    "ircc.layout".into(),
                    Attribute::String(layout.name().into()),
                );
            }
        }
        Ok(())
    }
}
