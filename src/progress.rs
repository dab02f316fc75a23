//! Progress bars of long commands (`ircc check`, `tune`, `bench`): drawn on
//! stderr only where it is a terminal, never with `--quiet`, so that logs
//! and pipes see only the command's own output.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar of `len` steps, `template` in indicatif's syntax.
pub(crate) fn bar(len: u64, template: &str, quiet: bool) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if quiet {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}
