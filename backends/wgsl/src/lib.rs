//! ircc's WGSL backend: `wgsl` prints each `kernel.func` as a WGSL compute
//! shader, `plan` describes the host side (buffers, pool offsets,
//! dispatches), and `runtime` (feature `runtime`, on by default) executes
//! a plan with wgpu.

pub mod plan;
#[cfg(feature = "runtime")]
pub mod runtime;
pub mod wgsl;

pub use plan::{Plan, plan};
#[cfg(feature = "runtime")]
pub use runtime::{Session, Timing};
pub use wgsl::kernel_to_wgsl;
