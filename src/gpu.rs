//! The device side of the driver: lowering to kernels, `--emit wgsl` and
//! `--emit opencl`, `ircc run --backend wgpu|opencl` and `ircc bench`.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use ircc_core::builtin::FuncOp;
use ircc_core::interp::checked_stored_param;
use ircc_core::pass::PassOptions;
use ircc_core::{Diagnostic, ElemType, Module, OpId, StoredTensor, Tensor, Type};
use ircc_dialects::graph::ops as graph_ops;
use ircc_dialects::kernel::KernelOp;
use ircc_plan::{Plan, Timing};

use crate::{Driver, Failure, KernelArgs, Loaded, Outcome};

pub(crate) fn plain(e: impl Into<String>) -> Failure {
    Diagnostic::plain(e).into()
}

/// The passes that schedule and lower to kernels, as pipelines name them.
const KERNEL_SCHEDULE: &str = ircc_passes::decl::KernelScheduleOptions::NAME;
const KERNEL_LOWER: &str = ircc_passes::decl::KernelLowerOptions::NAME;
const KERNEL_ACE: &str = ircc_passes::decl::KernelAceOptions::NAME;

/// Ends `specs` with `kernel.schedule` (where the pipeline has none and
/// the module's ops have no schedules yet), `kernel.lower` and
/// `kernel.ace` for a backend that runs kernels, unless `module` is
/// already kernel IR; `--precision` and `--attention` set the schedule's
/// options. A pipeline that schedules itself keeps its options; the
/// command line fills in those it leaves out and may not contradict them.
/// A module scheduled already (IR printed after `kernel.schedule`, its
/// schedules perhaps edited by hand, as IREE's `lowering_config` may be)
/// and given no pass that changes its compute ops is lowered as its
/// schedules say, at the precision it was scheduled for
/// ([`give_precision`] gives one written by hand `--precision`); a
/// pipeline that may fuse or rewrite them schedules them again.
pub(crate) fn lower_for_gpu(
    specs: &mut Vec<PassOptions>,
    kernel: &KernelArgs,
    module: &Module,
) -> Result<(), Diagnostic> {
    if is_lowered(module) {
        return Ok(());
    }
    let scheduled = keeps_its_schedules(specs, module);
    if scheduled {
        agrees_with_schedules(kernel, module)?;
    }
    if !specs.iter().any(|s| s.pass == KERNEL_LOWER) {
        let schedule = !scheduled && !schedules(specs);
        // Lowering as smartmem-gpu does: schedules, kernels, then their
        // addresses computed once.
        for pass in [KERNEL_SCHEDULE, KERNEL_LOWER, KERNEL_ACE] {
            if pass != KERNEL_SCHEDULE || schedule {
                specs.push(PassOptions {
                    pass: pass.into(),
                    ..Default::default()
                });
            }
        }
    }
    let Some(schedule) = specs.iter_mut().find(|s| s.pass == KERNEL_SCHEDULE) else {
        return Ok(());
    };
    let mut set = |key: &str, value: Option<String>| -> Result<(), Diagnostic> {
        let Some(value) = value else {
            return Ok(());
        };
        match schedule.values.get(key) {
            Some(v) if *v != value => Err(Diagnostic::plain(format!(
                "--{key} {value} contradicts the pipeline's {KERNEL_SCHEDULE}{{{key}={v}}}"
            ))),
            _ => {
                schedule.values.insert(key.into(), value);
                Ok(())
            }
        }
    };
    set("precision", kernel.precision.map(|p| p.name().to_string()))?;
    set("attention", kernel.attention.map(|a| a.name().to_string()))
}

/// An error where the command line asks of a module scheduled already
/// what its schedules do not say: another precision than the one it was
/// scheduled for, or an attention template (each attention op's schedule
/// names its own).
fn agrees_with_schedules(kernel: &KernelArgs, module: &Module) -> Result<(), Diagnostic> {
    let ours = ircc_dialects::kernel::precision(module).map_err(Diagnostic::plain)?;
    let scheduled = |what: String| already_scheduled(&what);
    let recorded = module
        .attrs
        .contains_key(ircc_dialects::kernel::PRECISION_ATTR);
    if let Some(p) = kernel.precision
        && recorded
        && p.name() != ours.to_string()
    {
        return Err(scheduled(format!(
            "--precision {} contradicts the module's kernel.precision {ours}",
            p.name()
        )));
    }
    if let Some(a) = kernel.attention {
        return Err(scheduled(format!("--attention {} has no effect", a.name())));
    }
    Ok(())
}

/// The passes that may run between `kernel.schedule` and `kernel.lower`
/// without changing the compute ops it scheduled: the texture level.
const AFTER_SCHEDULE: [&str; 3] = [
    ircc_passes::decl::LayoutSelectOptions::NAME,
    ircc_passes::decl::TextureMapOptions::NAME,
    ircc_passes::decl::MemoryPlanOptions::NAME,
];

/// Whether `module`'s ops carry their `kernel.schedule` and `specs` (the
/// pipeline so far) lower them as they are: they do not schedule them
/// again, and either lower them themselves or change nothing they
/// scheduled.
fn keeps_its_schedules(specs: &[PassOptions], module: &Module) -> bool {
    let has = |pass: &str| specs.iter().any(|s| s.pass == pass);
    let unchanged = specs.iter().all(|s| {
        AFTER_SCHEDULE.contains(&s.pass.as_str())
            || [KERNEL_LOWER, KERNEL_ACE].contains(&s.pass.as_str())
    });
    is_scheduled(module) && !schedules(specs) && (has(KERNEL_LOWER) || unchanged)
}

/// Whether `specs` (a pipeline) schedule the module's ops themselves.
pub(crate) fn schedules(specs: &[PassOptions]) -> bool {
    specs.iter().any(|s| s.pass == KERNEL_SCHEDULE)
}

/// The error where a command asks `what` of a module whose ops have their
/// schedules already.
pub(crate) fn already_scheduled(what: &str) -> Diagnostic {
    Diagnostic::plain(format!(
        "{what}: the module's ops have their {KERNEL_SCHEDULE} already, which lowering follows (name {KERNEL_SCHEDULE} in --passes to schedule them again)"
    ))
}

/// Gives a module scheduled by hand (its ops' `kernel.schedule` written,
/// no `kernel.precision`, as the kernel.lower filetests are) the precision
/// `--precision` names, which `kernel.schedule` would have recorded, where
/// `specs` do not schedule it again.
pub(crate) fn give_precision(specs: &[PassOptions], kernel: &KernelArgs, module: &mut Module) {
    let attr = ircc_dialects::kernel::PRECISION_ATTR;
    if !keeps_its_schedules(specs, module) || module.attrs.contains_key(attr) {
        return;
    }
    if let Some(p) = kernel.precision {
        module
            .attrs
            .insert(attr.into(), ircc_core::Attribute::String(p.name().into()));
    }
}

/// Whether a compute op of `m` has a `kernel.schedule`.
pub(crate) fn is_scheduled(m: &Module) -> bool {
    let mut scheduled = false;
    m.walk(|op| {
        scheduled |= m
            .op(op)
            .attrs
            .contains_key(ircc_dialects::kernel::SCHEDULE_ATTR);
    });
    scheduled
}

impl Driver {
    /// An error where `--emit wgsl|opencl` is given a pipeline that does
    /// not lower `module` to kernels: the pipeline says every pass run.
    pub(crate) fn pipeline_lowers(
        &self,
        args: &crate::PipelineArgs,
        module: &Module,
        emit: crate::Emit,
    ) -> Result<(), Diagnostic> {
        let specs = self.pipeline_specs(args)?;
        if is_lowered(module) || specs.iter().any(|s| s.pass == KERNEL_LOWER) {
            return Ok(());
        }
        let lowering: Vec<&str> = crate::PIPELINES
            .iter()
            .filter(|(_, text)| text.lines().any(|l| l.trim() == KERNEL_LOWER))
            .map(|(name, _)| *name)
            .collect();
        let given = match (&args.pipeline, &args.passes) {
            (_, Some(p)) => format!("--passes '{p}' does not lower to them"),
            (Some(p), None) => format!("pipeline '{p}' does not lower to them"),
            (None, None) => "no pipeline was named".to_string(),
        };
        Err(Diagnostic::plain(format!(
            "--emit {} prints kernels, and {given}: name a pipeline that lowers ({}), or end --passes with {KERNEL_SCHEDULE},{KERNEL_LOWER},{KERNEL_ACE}",
            if emit == crate::Emit::Opencl {
                "opencl"
            } else {
                "wgsl"
            },
            lowering.join(", ")
        )))
    }

    /// How many kernels a run of `module` dispatches on a GPU: its
    /// `kernel.launch`es once `kernel.schedule` (unless the pipeline ran
    /// it), `kernel.lower` and `kernel.ace` have run for its target (a fused group can
    /// take more than one: a product split along
    /// K, an output outside the anchor's iteration space), and how many of
    /// its kernels took their parameters from `--tuning-db`. `None` where
    /// the module does not lower. `kernel` gives the schedule's options.
    pub(crate) fn dispatches(
        &self,
        module: &Module,
        args: &crate::PipelineArgs,
        kernel: &KernelArgs,
    ) -> Option<(usize, usize)> {
        let mut lowered = module.clone();
        if !is_lowered(module) {
            let mut specs = Vec::new();
            if is_scheduled(module) {
                specs.push(PassOptions {
                    pass: KERNEL_LOWER.into(),
                    ..Default::default()
                });
            } else {
                lower_for_gpu(&mut specs, kernel, module).ok()?;
                if let Some(db) = &args.tuning_db {
                    crate::set_tuning_db(&mut specs, db).ok()?;
                }
            }
            if ircc_dialects::kernel::ModuleTarget::of(module)
                .ok()?
                .is_none()
            {
                self.choose_target(args, None, module)
                    .ok()?
                    .attach(&mut lowered);
            }
            let mut pm = ircc_core::pass::PassManager::from_specs(&self.passes, &specs).ok()?;
            pm.run(
                &mut lowered,
                &self.registry,
                &ircc_core::pass::RunOptions::default(),
                &mut std::io::sink(),
            )
            .ok()?;
        }
        let launches = lowered
            .functions()
            .iter()
            .filter_map(|&f| lowered.entry_block(f))
            .flat_map(|b| lowered.blocks[b].ops.clone())
            .filter(|&o| KernelOp::of(&lowered, o) == Some(KernelOp::Launch))
            .count();
        let mut tuned = 0;
        lowered.walk(|op| {
            if ircc_dialects::kernel::ops::Func::new(&lowered, op).is_some_and(|f| f.tuned()) {
                tuned += 1;
            }
        });
        Some((launches, tuned))
    }
}

/// Whether the module's functions launch kernels (it is kernel IR).
pub(crate) fn is_lowered(m: &Module) -> bool {
    m.functions().iter().any(|&f| {
        m.entry_block(f).is_some_and(|b| {
            m.blocks[b]
                .ops
                .iter()
                .any(|&o| KernelOp::of(m, o) == Some(KernelOp::Launch))
        })
    })
}

/// A device backend: what `ircc run --backend` and `ircc bench` run on,
/// and what `--emit` prints for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// WGSL through wgpu (Vulkan preferred).
    Wgpu,
    /// OpenCL C through the OpenCL ICD loader.
    OpenCl,
}

impl Device {
    /// The plan and sources of `func`, printed for the module's target.
    pub(crate) fn plan(self, m: &Module, func: OpId) -> Result<Plan, String> {
        let options = codegen_options(m)?;
        match self {
            Device::Wgpu => ircc_wgsl::plan(m, func, options),
            Device::OpenCl => ircc_opencl::plan(m, func, options),
        }
    }

    /// The `--timing` row of printing the kernels for this device.
    pub(crate) fn codegen_row(self) -> &'static str {
        match self {
            Device::Wgpu => "code generation (WGSL, plan)",
            Device::OpenCl => "code generation (OpenCL C, plan)",
        }
    }

    fn feature(self) -> &'static str {
        match self {
            Device::Wgpu => "wgpu",
            Device::OpenCl => "opencl",
        }
    }

    /// The adapter this backend opens, which `--device auto` matches
    /// profiles against.
    #[cfg_attr(
        not(all(feature = "wgpu", feature = "opencl")),
        allow(unreachable_code)
    )]
    pub(crate) fn adapter(self) -> Result<ircc_dialects::kernel::Adapter, String> {
        match self {
            #[cfg(feature = "wgpu")]
            Device::Wgpu => ircc_wgsl::runtime::adapter(),
            #[cfg(feature = "opencl")]
            Device::OpenCl => ircc_opencl::runtime::adapter(),
            #[allow(unreachable_patterns)]
            _ => Err(format!(
                "this ircc was built without the {} feature",
                self.feature()
            )),
        }
    }
}

/// What the printers take from the module's target.
fn codegen_options(m: &Module) -> Result<ircc_wgsl::Options, String> {
    let profile = ircc_dialects::kernel::target_profile(m)?;
    Ok(ircc_wgsl::Options {
        autobroadcast: profile.autobroadcast,
    })
}

/// A plan built and ready on a device.
pub(crate) enum Session {
    #[cfg(feature = "wgpu")]
    Wgpu(ircc_wgsl::Session),
    #[cfg(feature = "opencl")]
    OpenCl(ircc_opencl::Session),
    /// A build with neither runtime has no sessions.
    #[cfg(not(any(feature = "wgpu", feature = "opencl")))]
    #[allow(dead_code)]
    None(std::convert::Infallible),
}

#[cfg_attr(
    not(any(feature = "wgpu", feature = "opencl")),
    allow(unused_variables, unreachable_code)
)]
impl Session {
    pub(crate) fn run(&mut self, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
        match self {
            #[cfg(feature = "wgpu")]
            Session::Wgpu(s) => s.run(inputs),
            #[cfg(feature = "opencl")]
            Session::OpenCl(s) => s.run(inputs),
            #[cfg(not(any(feature = "wgpu", feature = "opencl")))]
            Session::None(never) => match *never {},
        }
    }

    /// Times `runs` runs after `warmup` untimed ones, calling
    /// `progress(done, total)` after each.
    pub(crate) fn time(
        &mut self,
        inputs: &[Tensor],
        warmup: usize,
        runs: usize,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Timing, String> {
        match self {
            #[cfg(feature = "wgpu")]
            Session::Wgpu(s) => s.time_with_progress(inputs, warmup, runs, progress),
            #[cfg(feature = "opencl")]
            Session::OpenCl(s) => s.time_with_progress(inputs, warmup, runs, progress),
            #[cfg(not(any(feature = "wgpu", feature = "opencl")))]
            Session::None(never) => match *never {},
        }
    }

    pub(crate) fn plan(&self) -> &Plan {
        match self {
            #[cfg(feature = "wgpu")]
            Session::Wgpu(s) => s.plan(),
            #[cfg(feature = "opencl")]
            Session::OpenCl(s) => s.plan(),
            #[cfg(not(any(feature = "wgpu", feature = "opencl")))]
            Session::None(never) => match *never {},
        }
    }

    /// The device's name and the API it is reached through.
    pub(crate) fn describe(&self) -> (String, String) {
        match self {
            #[cfg(feature = "wgpu")]
            Session::Wgpu(s) => (s.adapter.clone(), s.backend.clone()),
            #[cfg(feature = "opencl")]
            Session::OpenCl(s) => (s.device.clone(), format!("opencl ({})", s.platform)),
            #[cfg(not(any(feature = "wgpu", feature = "opencl")))]
            Session::None(never) => match *never {},
        }
    }
}

impl Driver {
    /// Every weight the module's `graph.param`s name, as stored.
    pub(crate) fn weights_of(
        &self,
        loaded: &Loaded,
        func: OpId,
    ) -> Result<HashMap<String, StoredTensor>, Failure> {
        let mut env = self.weights_env(loaded)?;
        let m = &loaded.module;
        let mut out = HashMap::new();
        let Some(block) = m.entry_block(func) else {
            return Ok(out);
        };
        for &op in &m.blocks[block].ops {
            let Some(param) = graph_ops::Param::new(m, op) else {
                continue;
            };
            let Some(t) = m.value_type(param.y()).as_tensor() else {
                continue;
            };
            let t = checked_stored_param(env.as_mut(), param.name(), t).map_err(plain)?;
            out.insert(param.name().to_string(), t);
        }
        Ok(out)
    }

    /// `--emit wgsl|opencl`: the sources and plan.json into `dir`, or the
    /// sources to `stdout` (each under a comment naming its file).
    pub(crate) fn emit_sources(
        &self,
        loaded: &Loaded,
        device: Device,
        dir: Option<&Path>,
        stdout: &mut dyn Write,
    ) -> Outcome {
        let func = main_function(&loaded.module)?;
        let plan = self
            .phase(device.codegen_row(), || device.plan(&loaded.module, func))
            .map_err(plain)?;
        let Some(dir) = dir else {
            for (file, text) in &plan.sources {
                let launches: Vec<String> = plan
                    .dispatches
                    .iter()
                    .filter(|d| d.shader.as_deref() == Some(file))
                    .map(|d| {
                        format!(
                            "{}: {:?} workgroups of {:?}",
                            d.entry.as_deref().unwrap_or(&d.kernel),
                            d.workgroups,
                            d.workgroup_size
                        )
                    })
                    .collect();
                let about = match launches.as_slice() {
                    [one] => one
                        .split_once(": ")
                        .map_or(one.clone(), |(_, g)| g.to_string()),
                    many => format!("{} dispatches", many.len()),
                };
                writeln!(stdout, "// ----- {file}: {about}\n{text}").map_err(crate::stdout_err)?;
            }
            return Ok(());
        };
        let weights = self.weights_of(loaded, func).map_err(|mut f| {
            if let Some(first) = f.diagnostics.0.pop() {
                f.diagnostics.0.push(first.with_note(
                    ircc_core::diag::Location::unknown(),
                    "a bundle (-o DIR) holds every weight; without -o, --emit prints the kernels alone",
                ));
            }
            f
        })?;
        let mut plan = plan;
        ircc_plan::bundle::write(dir, &mut plan, &|name: &str| {
            ircc_plan::bundle::weight_named(&weights, name)
        })
        .map_err(plain)?;
        let _ = writeln!(
            stdout,
            "wrote {} kernels in {}, plan.json ({} buffers, {} pooled bytes) and weights.safetensors to {}",
            plan.dispatches.len(),
            plan.sources
                .iter()
                .map(|(f, _)| f.as_str())
                .collect::<Vec<_>>()
                .join(", ")
                .chars()
                .take(200)
                .collect::<String>(),
            plan.buffers.len(),
            plan.pool_bytes,
            dir.display()
        );
        Ok(())
    }
}

pub(crate) fn main_function(m: &Module) -> Result<OpId, Failure> {
    m.lookup_symbol("main")
        .or_else(|| {
            m.functions()
                .into_iter()
                .find(|&f| FuncOp::of(m, f) == Some(FuncOp::Func))
        })
        .ok_or_else(|| plain("the module has no function"))
}

/// The element types of the function's results.
pub(crate) fn output_elems(m: &Module, func: OpId) -> Vec<ElemType> {
    match m.op(func).attr("function_type") {
        Some(ircc_core::Attribute::Type(Type::Function { results, .. })) => results
            .iter()
            .map(|t| t.as_tensor().map_or(ElemType::F32, |t| t.elem))
            .collect(),
        _ => Vec::new(),
    }
}

/// Builds a lowered module's plan on `device`, printed for its target;
/// `cl_options` go to the OpenCL compiler.
pub(crate) fn session(
    driver: &Driver,
    loaded: &Loaded,
    device: Device,
    cl_options: &str,
) -> Result<Session, Failure> {
    let func = main_function(&loaded.module)?;
    let weights = driver.phase("read weights", || driver.weights_of(loaded, func))?;
    let plan = driver
        .phase(device.codegen_row(), || device.plan(&loaded.module, func))
        .map_err(plain)?;
    let outputs = output_elems(&loaded.module, func);
    driver
        .phase("GPU setup (compile kernels, upload weights)", || {
            start(device, plan, outputs, &weights, cl_options)
        })
        .map_err(plain)
}

#[cfg_attr(
    not(any(feature = "wgpu", feature = "opencl")),
    allow(unused_variables)
)]
fn start(
    device: Device,
    plan: Plan,
    outputs: Vec<ElemType>,
    weights: &HashMap<String, StoredTensor>,
    cl_options: &str,
) -> Result<Session, String> {
    let lookup = |name: &str| ircc_plan::bundle::weight_named(weights, name);
    match device {
        #[cfg(feature = "wgpu")]
        Device::Wgpu => ircc_wgsl::Session::new(plan, outputs, &lookup).map(Session::Wgpu),
        #[cfg(feature = "opencl")]
        Device::OpenCl => {
            ircc_opencl::Session::new(plan, outputs, &lookup, cl_options).map(Session::OpenCl)
        }
        #[allow(unreachable_patterns)]
        other => Err(format!(
            "this ircc was built without the {0} backend (cargo feature '{0}')",
            other.feature()
        )),
    }
}

/// Runs a lowered module once on `device`.
pub(crate) fn run_lowered(
    driver: &Driver,
    loaded: &Loaded,
    device: Device,
    cl_options: &str,
    inputs: &[Tensor],
) -> Result<Vec<Tensor>, Failure> {
    let mut session = session(driver, loaded, device, cl_options)?;
    driver
        .phase("GPU run (upload inputs, run, read outputs)", || {
            session.run(inputs)
        })
        .map_err(plain)
}

impl Driver {
    /// Compiles `loaded` with the pipeline `args` names, lowers it to
    /// kernels as `kernel` asks and runs it once on `device` (`cl_options`
    /// go to the OpenCL compiler): the library form of `ircc run --backend
    /// wgpu|opencl`. The error says which step failed: `lower` (compiling,
    /// lowering or planning: the module uses something the GPU path does
    /// not support) or `run`.
    pub fn run_on_device(
        &self,
        loaded: &mut Loaded,
        args: &crate::PipelineArgs,
        kernel: &KernelArgs,
        device: Device,
        cl_options: &str,
        inputs: &[Tensor],
    ) -> Result<Vec<Tensor>, GpuError> {
        let lower = |f: Failure| GpuError::Lower(f.diagnostics.to_string());
        self.transform(
            loaded,
            args,
            Some(kernel),
            Some(device),
            ircc_core::Form::Pretty,
            &mut std::io::sink(),
        )
        .map_err(lower)?;
        let func = main_function(&loaded.module).map_err(lower)?;
        let weights = self.weights_of(loaded, func).map_err(lower)?;
        let plan = device.plan(&loaded.module, func).map_err(GpuError::Lower)?;
        let outputs = output_elems(&loaded.module, func);
        start(device, plan, outputs, &weights, cl_options)
            .and_then(|mut session| session.run(inputs))
            .map_err(GpuError::Run)
    }

    /// [`Driver::run_on_device`] on wgpu.
    pub fn run_on_gpu(
        &self,
        loaded: &mut Loaded,
        args: &crate::PipelineArgs,
        kernel: &KernelArgs,
        inputs: &[Tensor],
    ) -> Result<Vec<Tensor>, GpuError> {
        self.run_on_device(loaded, args, kernel, Device::Wgpu, "", inputs)
    }
}

/// Why [`Driver::run_on_device`] failed.
#[derive(Debug)]
pub enum GpuError {
    /// Compiling for the device failed: an op, type or size it cannot handle.
    Lower(String),
    /// The device refused or failed the compiled module.
    Run(String),
}

impl std::fmt::Display for GpuError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuError::Lower(e) => write!(f, "lowering for the GPU: {e}"),
            GpuError::Run(e) => write!(f, "running on the GPU: {e}"),
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

impl Driver {
    pub(crate) fn bench_command(
        &self,
        args: &crate::BenchArgs,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Outcome {
        if args.runs == 0 {
            return Err(plain("--runs must be at least 1"));
        }
        if ircc_plan::bundle::is_bundle(&args.model.file) {
            return self.bench_bundle(args, stdout, stderr);
        }
        let device = args.backend.unwrap_or(crate::DeviceBackend::Wgpu).device();
        let mut loaded = self.load_model(&args.model)?;
        self.transform(
            &mut loaded,
            &args.model.pipeline,
            Some(&args.kernel),
            Some(device),
            ircc_core::Form::Pretty,
            stderr,
        )?;
        let func = main_function(&loaded.module)?;
        let inputs = if args.inputs.is_empty() {
            crate::inputs::random_inputs(&loaded.module, 0)?
        } else {
            crate::inputs::read_inputs(&args.inputs, &crate::inputs::params(&loaded.module, func))?
        };
        let mut session = session(self, &loaded, device, &args.opencl.cl_options)?;
        // A bar of the runs, on a terminal only (a large model takes
        // seconds a run on a software GPU).
        let bar = crate::progress::bar(
            (args.warmup + args.runs) as u64,
            "timing {pos}/{len} runs [{bar:30}] {elapsed}",
            args.model.pipeline.quiet,
        );
        let measured = self.phase("GPU runs (warm-up and timed)", || {
            bench(
                &mut session,
                Some(&loaded.module),
                &inputs,
                args.warmup,
                args.runs,
                &mut |done, total| {
                    bar.set_length(total as u64);
                    bar.set_position(done as u64);
                },
            )
        });
        // Cleared before an error too, so that none is printed under it.
        bar.finish_and_clear();
        // The precision the kernels ran at: the schedule's, which a module
        // scheduled already brings with it.
        let precision = ircc_dialects::kernel::precision(&loaded.module)
            .map_or_else(|_| "unknown".to_string(), |p| p.to_string());
        let label = args.model.pipeline.label();
        print_bench(args, measured?, (&label, &precision), stdout, stderr);
        Ok(())
    }
}

/// Prints what `ircc bench` measured, as `args` asks: one line or one
/// JSON object on `stdout` (with the file, the pipeline and the
/// precision the kernels ran at), then the roofline table where asked.
pub(crate) fn print_bench(
    args: &crate::BenchArgs,
    measured: Bench,
    (pipeline, precision): (&str, &str),
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) {
    let Bench { mut report, roofs } = measured;
    report["file"] = args.model.file.display().to_string().into();
    report["pipeline"] = pipeline.into();
    report["precision"] = precision.into();
    if args.json {
        let _ = writeln!(stdout, "{report}");
    } else {
        let text = |key: &str| report[key].as_str().unwrap_or("-").to_string();
        let ms = |key: &str| report[key].as_f64().unwrap_or(f64::NAN);
        let _ = writeln!(
            stdout,
            "{} on {} ({}, profile {}), {pipeline} {precision}: {} kernels, median {:.3} ms (p10 {:.3}, p90 {:.3}) over {} runs",
            args.model.file.display(),
            text("adapter"),
            text("backend"),
            text("device"),
            report["kernels"],
            ms("median_ms"),
            ms("p10_ms"),
            ms("p90_ms"),
            args.runs
        );
    }
    if args.roofline {
        let adapter = report["adapter"].as_str().unwrap_or("-");
        let table = if ircc_plan::bundle::is_bundle(&args.model.file) {
            "no roofline: a bundle holds no kernel IR to count its FLOPs and bytes (bench the model instead)\n".to_string()
        } else if roofs.is_empty() {
            format!("no roofline: adapter '{adapter}' does not time kernels\n")
        } else {
            crate::roofline::table(&roofs, 15)
        };
        // Beside --json, to stderr, so that stdout stays one object.
        let out: &mut dyn Write = if args.json { stderr } else { stdout };
        let _ = write!(out, "{table}");
    }
}

/// What [`bench`] measured.
pub(crate) struct Bench {
    /// `ircc bench --json`'s object, less the file, pipeline and
    /// precision, which the session does not know.
    pub(crate) report: serde_json::Value,
    /// Each kernel under the roofline, where the adapter times kernels
    /// and the module is known.
    pub(crate) roofs: Vec<crate::roofline::KernelRoof>,
}

/// Times `runs` runs of `session` on `inputs` after `warmup` untimed ones,
/// calling `progress(done, total)` after each; `module` is the kernel IR
/// the session runs, for the kernels' FLOPs and bytes (none for a bundle).
pub(crate) fn bench(
    session: &mut Session,
    module: Option<&Module>,
    inputs: &[Tensor],
    warmup: usize,
    runs: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Bench, Failure> {
    let timing = session
        .time(inputs, warmup, runs, progress)
        .map_err(plain)?;
    let times = sorted(timing.runs_ms.clone());
    let kernels: Vec<(String, f64)> = session
        .plan()
        .dispatches
        .iter()
        .zip(&timing.per_kernel_us)
        .map(|(d, t)| (d.kernel.clone(), percentile(&sorted(t.clone()), 0.5)))
        .collect();
    let timed = !timing.per_kernel_us.iter().all(Vec::is_empty);
    let roofs: Vec<crate::roofline::KernelRoof> = match module.filter(|_| timed) {
        Some(m) => {
            let profile = ircc_dialects::kernel::target_profile(m).map_err(plain)?;
            kernels
                .iter()
                .filter_map(|(n, us)| crate::roofline::KernelRoof::of(m, n, *us, &profile))
                .collect()
        }
        None => Vec::new(),
    };
    let (adapter, backend) = session.describe();
    let plan = session.plan();
    let report = serde_json::json!({
        "device": plan.target.as_ref().map(|t| t.device.clone()),
        "target_reason": plan.target.as_ref().map(|t| t.reason.clone()),
        "adapter": adapter,
        "backend": backend,
        "kernels": kernels.len(),
        "runs": runs,
        "median_ms": percentile(&times, 0.5),
        "p10_ms": percentile(&times, 0.1),
        "p90_ms": percentile(&times, 0.9),
        "per_kernel": kernels
            .iter()
            .filter(|_| timed)
            .map(|(n, us)| match roofs.iter().find(|k| &k.name == n) {
                Some(k) => k.to_json(),
                None => serde_json::json!({"name": n, "median_us": us}),
            })
            .collect::<Vec<_>>(),
    });
    Ok(Bench { report, roofs })
}
