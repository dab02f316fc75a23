//! The passes ircc ships, and [`register_all`] to make them available to a
//! pass manager.

pub mod canonicalize;
pub mod fusion;
pub mod index;
pub mod kernel;
pub mod math;

use ircc_core::pass::PassRegistry;

pub fn register_all(passes: &mut PassRegistry) {
    passes.register(
        "canonicalize",
        "fold constant graph ops, merge common subexpressions, remove dead code (option: max-elements)",
        |o| Ok(Box::new(canonicalize::Canonicalize::from_options(o)?)),
    );
    passes.register(
        "graph.math-rewrite",
        "DNNFusion's algebraic rewriting (associative, commutative, distributive) by FLOP count, with egg",
        |o| {
            o.expect_only(&[])?;
            Ok(Box::new(math::MathRewrite::new()))
        },
    );
    passes.register(
        "graph.classify",
        "record each graph op's DNNFusion mapping type and SmartMem class (ircc.mapping, ircc.layout)",
        |o| {
            o.expect_only(&[])?;
            Ok(Box::new(fusion::Classify::new()))
        },
    );
    passes.register(
        "graph.eliminate-layout-ops",
        "eliminate layout ops into index views where SmartMem's Table 5 says so",
        |o| {
            o.expect_only(&[])?;
            Ok(Box::new(fusion::EliminateLayoutOps::new()))
        },
    );
    passes.register(
        "graph.fuse",
        "DNNFusion's fusion plan: groups of ops become graph.fused kernels (option: max-ops)",
        |o| Ok(Box::new(fusion::Fuse::from_options(o)?)),
    );
    passes.register(
        "kernel.lower",
        "lower every compute op and fused group to kernel.func templates and kernel.launch (option: precision=f32|f16)",
        |o| Ok(Box::new(kernel::KernelLower::from_options(o)?)),
    );
    passes.register(
        "index.lower-layout-ops",
        "turn reshape, transpose, slice, ... into index.view ops with composed maps",
        |o| {
            o.expect_only(&[])?;
            Ok(Box::new(index::LowerLayoutOps))
        },
    );
    passes.register(
        "index.simplify",
        "simplify every view's map by equality saturation (options: iterations, nodes)",
        |o| Ok(Box::new(index::Simplify::from_options(o)?)),
    );
    passes.register(
        "index.annotate-dependencies",
        "record on every view the identity/split/merge dependency of each source axis",
        |o| {
            o.expect_only(&[])?;
            Ok(Box::new(index::AnnotateDependencies))
        },
    );
}
