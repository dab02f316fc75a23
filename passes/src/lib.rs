//! The passes ircc ships, and [`register_all`] to make them available to a
//! pass manager.

pub mod canonicalize;

use ircc_core::pass::PassRegistry;

pub fn register_all(passes: &mut PassRegistry) {
    passes.register(
        "canonicalize",
        "fold constant graph ops, merge common subexpressions, remove dead code (option: max-elements)",
        |o| Ok(Box::new(canonicalize::Canonicalize::from_options(o)?)),
    );
}
