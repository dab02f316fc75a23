//! `--load-pass-plugin LIB`: a plugin library's passes (and dialects)
//! added to a driver at run time; see `ircc_core::plugin` for what a
//! plugin exports and why its stamp is checked first.

use std::ffi::{CStr, c_char};
use std::path::Path;

use ircc_core::Diagnostic;
use ircc_core::plugin::{REGISTER_SYMBOL, RegisterFn, STAMP_SYMBOL, stamp};

use crate::Driver;

impl Driver {
    /// Loads the plugin library at `path` and registers what it adds. Its
    /// stamp must equal this ircc's; the library stays loaded until the
    /// process ends.
    pub fn load_pass_plugin(&mut self, path: &Path) -> Result<(), Diagnostic> {
        let shown = path.display();
        let fail = |m: String| Diagnostic::plain(format!("plugin {shown}: {m}"));
        // Not a FIFO or a device, which the loader could block on.
        let meta = std::fs::metadata(path).map_err(|e| fail(format!("cannot load it: {e}")))?;
        if !meta.is_file() {
            return Err(fail("cannot load it: not a regular file".into()));
        }
        // The loader searches the system's library path for a name without
        // a slash (`libm.so.6` would load the system's libm, whatever
        // ./libm.so.6 is): load exactly the file checked above.
        let path = std::path::absolute(path).map_err(|e| fail(format!("cannot load it: {e}")))?;
        // SAFETY: loading a library runs its initialisers; a plugin is
        // code the user chose to run, as LLVM's and MLIR's plugins are.
        let library = unsafe { libloading::Library::new(&path) }
            .map_err(|e| fail(format!("cannot load it: {e}")))?;
        // SAFETY: the stamp function is `extern "C"` and returns a pointer
        // to a NUL-terminated string it owns for the process's life; C's
        // ABI is stable, so it is safe to call whatever built the plugin.
        let theirs = unsafe {
            let f = library
                .get::<extern "C" fn() -> *const c_char>(STAMP_SYMBOL)
                .map_err(|_| {
                    fail(
                        "not an ircc plugin: it does not export ircc_plugin_stamp \
                         (ircc_core::declare_plugin! defines it)"
                            .into(),
                    )
                })?;
            CStr::from_ptr(f()).to_string_lossy().into_owned()
        };
        let ours = stamp().to_string_lossy();
        if theirs != ours {
            return Err(fail(format!(
                "it was built for {theirs}, but this is {ours}; rebuild the plugin \
                 against this ircc's sources with the same compiler"
            )));
        }
        // SAFETY: the stamps agree, so the plugin was built from these
        // sources by this compiler with these layouts, and its register
        // function has exactly the type `RegisterFn` names.
        let register = unsafe {
            *library
                .get::<RegisterFn>(REGISTER_SYMBOL)
                .map_err(|_| fail("it exports no ircc_plugin_register".into()))?
        };
        self.passes.set_origin(format!("plugin {shown}"));
        register(&mut self.registry, &mut self.passes);
        self.passes.set_origin(String::new());
        // The registries now hold the plugin's code.
        std::mem::forget(library);
        Ok(())
    }
}
