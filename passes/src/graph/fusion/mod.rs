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
use ircc_core::{Attribute, Module, OpId, Registry, Type};
use ircc_dialects::graph::GraphOp;

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
