//! The passes ircc ships, and [`register_all`] to make them available to a
//! pass manager.

pub mod conversion;
pub mod graph;
pub mod index;
pub mod kernel;
pub mod layout;
pub mod rules;
pub mod tuning;

/// The declarations and option structs of the passes, generated from
/// `spec/passes.toml` by `ircc-ods`.
pub mod decl {
    include!(concat!(env!("OUT_DIR"), "/passes.rs"));
}

use decl::*;

/// The passes that read the module's target (`ircc.target`): the driver
/// attaches one before a pipeline that runs any of them.
pub const READS_TARGET: [&str; 4] = [
    GraphFuseOptions::NAME,
    KernelScheduleOptions::NAME,
    LayoutSelectOptions::NAME,
    TextureMapOptions::NAME,
];
use ircc_core::pass::PassRegistry;

/// Registers every pass ircc ships, under its declaration.
pub fn register_all(passes: &mut PassRegistry) {
    passes.register_decl(&CanonicalizeOptions::DECL, |o| {
        Ok(Box::new(graph::canonicalize::Canonicalize::new(
            CanonicalizeOptions::parse(o)?,
        )))
    });
    passes.register_decl(&GraphMathRewriteOptions::DECL, |o| {
        let options = GraphMathRewriteOptions::parse(o)?;
        Ok(Box::new(graph::math::MathRewrite::from_option(
            &options.rules,
        )?))
    });
    passes.register_decl(&RulesOptions::DECL, |o| {
        let options = RulesOptions::parse(o)?;
        Ok(Box::new(rules::apply::ApplyRules::from_option(
            &options.file,
        )?))
    });
    passes.register_decl(&GraphClassifyOptions::DECL, |o| {
        let options = GraphClassifyOptions::parse(o)?;
        let tables = graph::fusion::Tables::from_option(&options.tables)?;
        Ok(Box::new(graph::fusion::Classify::new(tables)))
    });
    passes.register_decl(&GraphFoldAttentionOptions::DECL, |o| {
        GraphFoldAttentionOptions::parse(o)?;
        Ok(Box::new(graph::attention::FoldAttention))
    });
    passes.register_decl(&GraphEliminateLayoutOpsOptions::DECL, |o| {
        let options = GraphEliminateLayoutOpsOptions::parse(o)?;
        let tables = graph::fusion::Tables::from_option(&options.tables)?;
        Ok(Box::new(graph::fusion::EliminateLayoutOps::new(tables)))
    });
    passes.register_decl(&GraphFuseOptions::DECL, |o| {
        let options = GraphFuseOptions::parse(o)?;
        let tables = graph::fusion::Tables::from_option(&options.tables)?;
        Ok(Box::new(graph::fusion::Fuse::new(options, tables)))
    });
    passes.register_decl(&KernelScheduleOptions::DECL, |o| {
        Ok(Box::new(conversion::graph_to_kernel::KernelSchedule::new(
            KernelScheduleOptions::parse(o)?,
        )))
    });
    passes.register_decl(&KernelLowerOptions::DECL, |o| {
        KernelLowerOptions::parse(o)?;
        Ok(Box::<conversion::graph_to_kernel::KernelLower>::default())
    });
    passes.register_decl(&KernelAceOptions::DECL, |o| {
        KernelAceOptions::parse(o)?;
        Ok(Box::new(kernel::ace::Ace))
    });
    passes.register_decl(&IndexLowerLayoutOpsOptions::DECL, |o| {
        IndexLowerLayoutOpsOptions::parse(o)?;
        Ok(Box::new(index::LowerLayoutOps))
    });
    passes.register_decl(&IndexSimplifyOptions::DECL, |o| {
        Ok(Box::new(index::Simplify::new(IndexSimplifyOptions::parse(
            o,
        )?)))
    });
    passes.register_decl(&IndexAnnotateDependenciesOptions::DECL, |o| {
        IndexAnnotateDependenciesOptions::parse(o)?;
        Ok(Box::new(index::AnnotateDependencies))
    });
    passes.register_decl(&LayoutSelectOptions::DECL, |o| {
        Ok(Box::new(layout::LayoutSelect::new(
            LayoutSelectOptions::parse(o)?,
        )))
    });
    passes.register_decl(&TextureMapOptions::DECL, |o| {
        TextureMapOptions::parse(o)?;
        Ok(Box::new(layout::texture_map::TextureMap))
    });
    passes.register_decl(&MemoryPlanOptions::DECL, |o| {
        MemoryPlanOptions::parse(o)?;
        Ok(Box::new(layout::memory_plan::MemoryPlan))
    });
}
