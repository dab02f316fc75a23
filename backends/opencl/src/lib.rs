//! ircc's OpenCL backend: `opencl` prints a lowered module's kernels as
//! one OpenCL C program, [`plan`] adds it to the backend-neutral host plan
//! (`ircc-plan`: buffers, images, pool offsets, dispatches), and `runtime`
//! (feature `runtime`, on by default) executes a plan through the OpenCL
//! ICD loader.

pub mod opencl;
#[cfg(feature = "runtime")]
pub mod runtime;

pub use ircc_plan::{BufferKind, Plan};
#[cfg(feature = "runtime")]
pub use runtime::{Session, check_program};

use std::collections::{HashMap, HashSet};

pub use ircc_codegen::Options;
use ircc_core::{Module, OpId};

/// The file the program is written to, beside plan.json.
pub const PROGRAM_FILE: &str = "kernels.cl";

/// The host plan of function `func` of a lowered module, with the OpenCL C
/// program of its kernels in [`Plan::sources`] and each dispatch's
/// function name in it.
pub fn plan(m: &Module, func: OpId, options: Options) -> Result<Plan, String> {
    let mut plan = ircc_plan::plan(m, func)?;
    plan.language = Some(ircc_plan::Language::Opencl);
    let mut taken = HashSet::new();
    let mut entries: HashMap<String, String> = HashMap::new();
    let mut kernels = Vec::new();
    for d in &mut plan.dispatches {
        let entry = match entries.get(&d.kernel) {
            Some(e) => e.clone(),
            None => {
                let kernel = m
                    .lookup_symbol(&d.kernel)
                    .ok_or_else(|| format!("no kernel.func @{}", d.kernel))?;
                let e = opencl::entry_name(&d.kernel, &mut taken);
                entries.insert(d.kernel.clone(), e.clone());
                kernels.push((kernel, e.clone()));
                e
            }
        };
        d.shader = Some(PROGRAM_FILE.to_string());
        d.entry = Some(entry);
    }
    let program = opencl::program(m, &kernels, options)?;
    plan.sources.push((PROGRAM_FILE.to_string(), program));
    Ok(plan)
}
