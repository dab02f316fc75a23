//! ircc's WGSL backend: `wgsl` prints each `kernel.func` as a WGSL compute
//! shader, [`plan`] adds the shaders to the backend-neutral host plan
//! (`ircc-plan`: buffers, pool offsets, dispatches), and `runtime`
//! (feature `runtime`, on by default) executes a plan with wgpu, and
//! `probe` measures a device's profile with micro-benchmarks.

#[cfg(feature = "runtime")]
pub mod probe;
#[cfg(feature = "runtime")]
pub mod runtime;
pub mod wgsl;

pub use ircc_plan::{BufferKind, Plan, Timing};
#[cfg(feature = "runtime")]
pub use runtime::{Gpu, Session};
pub use wgsl::kernel_to_wgsl;

pub use ircc_codegen::Options;
use ircc_core::{Module, OpId};

/// The host plan of function `func` of a lowered module, with the WGSL of
/// every dispatch (`kernel.wgsl`) in [`Plan::sources`].
pub fn plan(m: &Module, func: OpId, options: Options) -> Result<Plan, String> {
    let mut plan = ircc_plan::plan(m, func)?;
    plan.language = Some(ircc_plan::Language::Wgsl);
    // Kernel symbols become file names: never outside the output directory.
    let stems = ircc_core::files::unique_stems(plan.dispatches.iter().map(|d| d.kernel.as_str()));
    for (d, stem) in plan.dispatches.iter_mut().zip(stems) {
        let kernel = m
            .lookup_symbol(&d.kernel)
            .ok_or_else(|| format!("no kernel.func @{}", d.kernel))?;
        let read_only: Vec<bool> = d.bindings.iter().map(|b| b.read_only()).collect();
        let wgsl = kernel_to_wgsl(m, kernel, &read_only, options)
            .map_err(|e| format!("kernel @{}: {e}", d.kernel))?;
        let file = format!("{stem}.wgsl");
        d.shader = Some(file.clone());
        d.entry = Some("main".to_string());
        plan.sources.push((file, wgsl));
    }
    Ok(plan)
}
