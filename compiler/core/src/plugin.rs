//! Pass plugins: a library (a `cdylib`) that adds passes, and dialects, to
//! an `ircc` built without it (`ircc --load-pass-plugin LIB`).
//!
//! Rust has no stable ABI, so a plugin works only with an ircc built from
//! the same ircc sources by the same compiler, with the same layouts of the
//! types they share. Each side has a [`stamp`] saying so, and ircc compares
//! the plugin's with its own before it calls anything else in the library:
//! a mismatch is an error naming both, never undefined behaviour. A plugin
//! crate declares itself with [`declare_plugin!`]:
//!
//! ```ignore
//! fn register(registry: &mut ircc_core::Registry, passes: &mut ircc_core::pass::PassRegistry) {
//!     passes.register_decl(&DECL, |o| Ok(Box::new(MyPass::new(o)?)));
//! }
//! ircc_core::declare_plugin!(register);
//! ```
//!
//! The library stays loaded until the process ends: its code is in the
//! registries. Loading it runs its code, so load only plugins you trust.

use std::ffi::{CStr, CString};
use std::sync::OnceLock;

/// The function a plugin registers its passes and dialects with.
pub type RegisterFn = fn(&mut crate::Registry, &mut crate::pass::PassRegistry);

/// The symbol of the plugin's stamp: `extern "C" fn() -> *const c_char`.
pub const STAMP_SYMBOL: &[u8] = b"ircc_plugin_stamp";
/// The symbol of the plugin's [`RegisterFn`].
pub const REGISTER_SYMBOL: &[u8] = b"ircc_plugin_register";

/// What a plugin and the ircc that loads it must share: ircc's version,
/// the compiler's, a hash of ircc-core's sources (its API), and a hash of
/// the sizes and alignments of the types they pass each other (which
/// differ where they resolved other versions of ircc-core's dependencies).
pub fn stamp() -> &'static CStr {
    static STAMP: OnceLock<CString> = OnceLock::new();
    STAMP.get_or_init(|| {
        let text = format!(
            "ircc {}; {}; api {}; layout {:016x}",
            env!("CARGO_PKG_VERSION"),
            env!("IRCC_RUSTC_VERSION"),
            env!("IRCC_API_HASH"),
            layout_hash()
        );
        CString::new(text).expect("the stamp has no NUL")
    })
}

fn layout_hash() -> u64 {
    use std::mem::{align_of, size_of};
    macro_rules! layouts {
        ($($t:ty),*) => { [$(size_of::<$t>(), align_of::<$t>()),*] };
    }
    let figures = layouts!(
        crate::Module,
        crate::Operation,
        crate::ir::Value,
        crate::ir::Block,
        crate::ir::Region,
        crate::Attribute,
        crate::Type,
        crate::Tensor,
        crate::Diagnostic,
        crate::diag::Diagnostics,
        crate::Registry,
        crate::registry::OpDef,
        crate::pass::PassOptions,
        crate::pass::PassRegistry,
        crate::pass::PassInfo,
        crate::pass::PassContext<'static>,
        Box<dyn crate::pass::Pass>
    );
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for n in figures {
        for byte in (n as u64).to_le_bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash
}

/// Declares the crate an ircc plugin whose passes `$register` (a
/// [`RegisterFn`]) adds: it defines the two symbols ircc looks up.
#[macro_export]
macro_rules! declare_plugin {
    ($register:path) => {
        /// This plugin's stamp, which ircc compares with its own.
        #[unsafe(no_mangle)]
        pub extern "C" fn ircc_plugin_stamp() -> *const ::std::ffi::c_char {
            $crate::plugin::stamp().as_ptr()
        }

        /// Registers this plugin's passes; ircc calls it only after the
        /// stamps agree.
        #[unsafe(no_mangle)]
        pub fn ircc_plugin_register(
            registry: &mut $crate::Registry,
            passes: &mut $crate::pass::PassRegistry,
        ) {
            let register: $crate::plugin::RegisterFn = $register;
            register(registry, passes)
        }
    };
}
