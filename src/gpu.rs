//! The GPU side of the driver: lowering to kernels, `--emit wgsl`,
//! `ircc run --backend wgpu` and `ircc bench`.

#[cfg(feature = "wgpu")]
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use ircc_core::builtin::FuncOp;
#[cfg(feature = "wgpu")]
use ircc_core::interp::checked_param;
use ircc_core::pass::PassOptions;
use ircc_core::{Diagnostic, Module, OpId, Tensor};
#[cfg(feature = "wgpu")]
use ircc_core::{ElemType, Type};
#[cfg(feature = "wgpu")]
use ircc_dialects::graph::ops as graph_ops;
use ircc_dialects::kernel::KernelOp;

use crate::{Driver, Failure, KernelArgs, Loaded, Outcome, io_err};

fn plain(e: impl Into<String>) -> Failure {
    Diagnostic::plain(e).into()
}

/// The pass that lowers to kernels, as pipelines name it.
const KERNEL_LOWER: &str = ircc_passes::decl::KernelLowerOptions::NAME;

/// Ends `specs` with `kernel.lower` as `kernel` asks, unless `module` is
/// already kernel IR. A pipeline that lowers itself keeps its options; the
/// command line fills in those it leaves out and may not contradict them.
pub(crate) fn lower_for_gpu(
    specs: &mut Vec<PassOptions>,
    kernel: &KernelArgs,
    module: &Module,
) -> Result<(), Diagnostic> {
    if is_lowered(module) {
        return Ok(());
    }
    let position = match specs.iter().position(|s| s.pass == KERNEL_LOWER) {
        Some(p) => p,
        None => {
            specs.push(PassOptions {
                pass: KERNEL_LOWER.into(),
                ..Default::default()
            });
            specs.len() - 1
        }
    };
    let lower = &mut specs[position];
    let mut set = |key: &str, value: Option<String>| -> Result<(), Diagnostic> {
        let Some(value) = value else {
            return Ok(());
        };
        match lower.values.get(key) {
            Some(v) if *v != value => Err(Diagnostic::plain(format!(
                "--{key} {value} contradicts the pipeline's {KERNEL_LOWER}{{{key}={v}}}"
            ))),
            _ => {
                lower.values.insert(key.into(), value);
                Ok(())
            }
        }
    };
    set("precision", kernel.precision.map(|p| p.name().to_string()))
}

/// Whether the module's functions launch kernels (it is kernel IR).
fn is_lowered(m: &Module) -> bool {
    m.functions().iter().any(|&f| {
        m.entry_block(f).is_some_and(|b| {
            m.blocks[b]
                .ops
                .iter()
                .any(|&o| KernelOp::of(m, o) == Some(KernelOp::Launch))
        })
    })
}

impl Driver {
    /// Every weight the module's `graph.param`s name, read once.
    #[cfg(feature = "wgpu")]
    pub(crate) fn weights_of(
        &self,
        loaded: &Loaded,
        func: OpId,
    ) -> Result<HashMap<String, Tensor>, Failure> {
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
            let t = checked_param(env.as_mut(), param.name(), t).map_err(plain)?;
            out.insert(param.name().to_string(), t);
        }
        Ok(out)
    }

    /// `--emit wgsl`: the shaders and plan.json into `dir`, or the
    /// shaders to `stdout` (one after another, each under a comment naming
    /// its file and grid).
    pub(crate) fn emit_wgsl(
        &self,
        loaded: &Loaded,
        dir: Option<&Path>,
        stdout: &mut dyn Write,
    ) -> Outcome {
        let func = main_function(&loaded.module)?;
        let plan = ircc_wgsl::plan(&loaded.module, func).map_err(plain)?;
        let Some(dir) = dir else {
            for (d, (_, wgsl)) in plan.dispatches.iter().zip(&plan.sources) {
                writeln!(
                    stdout,
                    "// ----- {}: {:?} workgroups of {:?}\n{wgsl}",
                    d.shader.as_deref().unwrap_or(&d.kernel),
                    d.workgroups,
                    d.workgroup_size
                )
                .map_err(crate::stdout_err)?;
            }
            return Ok(());
        };
        std::fs::create_dir_all(dir).map_err(|e| io_err("create", dir, e))?;
        for (d, (_, wgsl)) in plan.dispatches.iter().zip(&plan.sources) {
            let file = d
                .shader
                .as_deref()
                .ok_or_else(|| plain("a dispatch without a shader file"))?;
            let path = dir.join(file);
            std::fs::write(&path, wgsl).map_err(|e| io_err("write", &path, e))?;
        }
        let path = dir.join("plan.json");
        let json = serde_json::to_string_pretty(&plan).map_err(|e| plain(e.to_string()))?;
        std::fs::write(&path, json + "\n").map_err(|e| io_err("write", &path, e))?;
        let _ = writeln!(
            stdout,
            "wrote {} kernels and plan.json ({} buffers, {} pooled bytes) to {}",
            plan.sources.len(),
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
#[cfg(feature = "wgpu")]
pub(crate) fn output_elems(m: &Module, func: OpId) -> Vec<ElemType> {
    match m.op(func).attr("function_type") {
        Some(ircc_core::Attribute::Type(Type::Function { results, .. })) => results
            .iter()
            .map(|t| t.as_tensor().map_or(ElemType::F32, |t| t.elem))
            .collect(),
        _ => Vec::new(),
    }
}

/// What a wgpu session is made of: the plan, the output element types and
/// the weights by name.
#[cfg(feature = "wgpu")]
type GpuProgram = (ircc_wgsl::Plan, Vec<ElemType>, HashMap<String, Tensor>);

#[cfg(feature = "wgpu")]
fn gpu_program(driver: &Driver, loaded: &Loaded) -> Result<GpuProgram, Failure> {
    let func = main_function(&loaded.module)?;
    let weights = driver.weights_of(loaded, func)?;
    let plan = ircc_wgsl::plan(&loaded.module, func).map_err(plain)?;
    Ok((plan, output_elems(&loaded.module, func), weights))
}

#[cfg(feature = "wgpu")]
fn start(program: GpuProgram) -> Result<ircc_wgsl::Session, String> {
    let (plan, outputs, weights) = program;
    let lookup = |name: &str| {
        weights
            .get(name)
            .cloned()
            .ok_or_else(|| format!("no weight '{name}'"))
    };
    ircc_wgsl::Session::new(plan, outputs, &lookup)
}

#[cfg(feature = "wgpu")]
pub(crate) fn session(driver: &Driver, loaded: &Loaded) -> Result<ircc_wgsl::Session, Failure> {
    start(gpu_program(driver, loaded)?).map_err(plain)
}

/// Runs a lowered module once on the wgpu adapter.
#[cfg(feature = "wgpu")]
pub(crate) fn run_lowered(
    driver: &Driver,
    loaded: &Loaded,
    inputs: &[Tensor],
) -> Result<Vec<Tensor>, Failure> {
    session(driver, loaded)?.run(inputs).map_err(plain)
}

#[cfg(not(feature = "wgpu"))]
pub(crate) fn run_lowered(_: &Driver, _: &Loaded, _: &[Tensor]) -> Result<Vec<Tensor>, Failure> {
    Err(no_gpu())
}

#[cfg(not(feature = "wgpu"))]
fn no_gpu() -> Failure {
    plain("this ircc was built without the wgpu backend (cargo feature 'wgpu')")
}

impl Driver {
    /// Compiles `loaded` with the pipeline `args` names, lowers it to
    /// kernels as `kernel` asks and runs it once on the wgpu adapter: the
    /// library form of `ircc run --backend wgpu`. The error says which
    /// step failed: `lower` (compiling, lowering or planning: the module
    /// uses something the GPU path does not support) or `run`.
    #[cfg(feature = "wgpu")]
    pub fn run_on_gpu(
        &self,
        loaded: &mut Loaded,
        args: &crate::PipelineArgs,
        kernel: &KernelArgs,
        inputs: &[Tensor],
    ) -> Result<Vec<Tensor>, GpuError> {
        let lower = |f: Failure| GpuError::Lower(f.diagnostics.to_string());
        self.transform(
            loaded,
            args,
            Some(kernel),
            ircc_core::Form::Pretty,
            &mut std::io::sink(),
        )
        .map_err(lower)?;
        let program = gpu_program(self, loaded).map_err(lower)?;
        start(program)
            .and_then(|mut session| session.run(inputs))
            .map_err(GpuError::Run)
    }
}

/// Why [`Driver::run_on_gpu`] failed.
#[derive(Debug)]
pub enum GpuError {
    /// Compiling for the GPU failed: an op, type or size it cannot handle.
    Lower(String),
    /// The GPU refused or failed the compiled module.
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

#[cfg(feature = "wgpu")]
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

#[cfg(feature = "wgpu")]
fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

impl Driver {
    #[cfg(not(feature = "wgpu"))]
    pub(crate) fn bench_command(
        &self,
        _: &crate::BenchArgs,
        _: &mut dyn Write,
        _: &mut dyn Write,
    ) -> Outcome {
        Err(no_gpu())
    }

    #[cfg(feature = "wgpu")]
    pub(crate) fn bench_command(
        &self,
        args: &crate::BenchArgs,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Outcome {
        if args.backend != crate::Backend::Wgpu {
            return Err(plain("ircc bench times the GPU: use --backend wgpu"));
        }
        if args.runs == 0 {
            return Err(plain("--runs must be at least 1"));
        }
        let mut loaded = self.load_model(&args.model)?;
        self.transform(
            &mut loaded,
            &args.model.pipeline,
            Some(&args.kernel),
            ircc_core::Form::Pretty,
            stderr,
        )?;
        let func = main_function(&loaded.module)?;
        let names = ircc_reference::input_names(&loaded.module, func);
        let inputs = if args.inputs.is_empty() {
            crate::inputs::random_inputs(&loaded.module, 0)?
        } else {
            crate::inputs::read_inputs(&args.inputs, &names)?
        };
        let mut session = session(self, &loaded)?;
        let timing = session
            .time(&inputs, args.warmup, args.runs)
            .map_err(plain)?;
        let runs = sorted(timing.runs_ms.clone());
        let kernels: Vec<(String, f64)> = session
            .plan()
            .dispatches
            .iter()
            .zip(&timing.per_kernel_us)
            .map(|(d, t)| (d.kernel.clone(), percentile(&sorted(t.clone()), 0.5)))
            .collect();
        let pipeline = args.model.pipeline.label();
        let report = serde_json::json!({
            "file": args.model.file.display().to_string(),
            "pipeline": pipeline,
            "precision": args.kernel.precision.unwrap_or_default().name(),
            "device": args.model.pipeline.device,
            "adapter": session.adapter,
            "backend": session.backend,
            "kernels": kernels.len(),
            "runs": args.runs,
            "median_ms": percentile(&runs, 0.5),
            "p10_ms": percentile(&runs, 0.1),
            "p90_ms": percentile(&runs, 0.9),
            "per_kernel": kernels
                .iter()
                .filter(|_| !timing.per_kernel_us.iter().all(Vec::is_empty))
                .map(|(n, us)| serde_json::json!({"name": n, "median_us": us}))
                .collect::<Vec<_>>(),
        });
        if args.json {
            let _ = writeln!(stdout, "{report}");
        } else {
            let _ = writeln!(
                stdout,
                "{} on {} ({}), {} {}: {} kernels, median {:.3} ms (p10 {:.3}, p90 {:.3}) over {} runs",
                args.model.file.display(),
                session.adapter,
                session.backend,
                pipeline,
                args.kernel.precision.unwrap_or_default().name(),
                kernels.len(),
                percentile(&runs, 0.5),
                percentile(&runs, 0.1),
                percentile(&runs, 0.9),
                args.runs
            );
        }
        Ok(())
    }
}
