//! The stamp of a plugin built against an older ircc by an older compiler.
//! ircc must refuse it before calling anything else: its register function
//! would be undefined behaviour to call.

/// The stamp ircc compares with its own.
#[unsafe(no_mangle)]
pub extern "C" fn ircc_plugin_stamp() -> *const std::ffi::c_char {
    c"ircc 0.0.1; rustc 1.70.0 (90c541806 2023-05-31); api 0000000000000000; layout 0000000000000000"
        .as_ptr()
}

/// Never called: a stamp that differs stops ircc first.
#[unsafe(no_mangle)]
pub extern "C" fn ircc_plugin_register() {
    std::process::abort()
}
