//! The GPU side of the driver: lowering to kernels, `--emit wgsl`,
//! `ircc run --backend wgpu` and `ircc bench`.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use ircc_core::pass::{PassManager, PassOptions, RunOptions};
use ircc_core::{Diagnostic, ElemType, Module, OpId, Tensor, Type};

use crate::{Driver, Failure, KernelArgs, Loaded, Outcome, io_err};

fn plain(e: impl Into<String>) -> Failure {
    Diagnostic::plain(e).into()
}

impl Driver {
    /// Runs `kernel.lower` (as `kernel` asks) unless the module has kernels.
    pub(crate) fn lower_kernels(&self, loaded: &mut Loaded, kernel: &KernelArgs) -> Outcome {
        let lowered = loaded.module.functions().iter().any(|&f| {
            loaded.module.entry_block(f).is_some_and(|b| {
                loaded.module.blocks[b]
                    .ops
                    .iter()
                    .any(|&o| loaded.module.op(o).name == "kernel.launch")
            })
        });
        if lowered {
            return Ok(());
        }
        let mut spec = PassOptions {
            pass: "kernel.lower".into(),
            ..Default::default()
        };
        spec.values
            .insert("precision".into(), kernel.precision.name().into());
        spec.values
            .insert("textures".into(), kernel.textures.to_string());
        let mut pm = PassManager::from_specs(&self.passes, &[spec])?;
        pm.run(
            &mut loaded.module,
            &self.registry,
            &RunOptions::default(),
            &mut std::io::sink(),
        )
        .map_err(|d| Failure {
            diagnostics: d,
            source: loaded.source.clone(),
        })?;
        Ok(())
    }

    /// Every weight the module's `graph.param`s name, read once.
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
            let o = m.op(op);
            if o.name != "graph.param" {
                continue;
            }
            let (Some(ircc_core::Attribute::String(name)), Some(t)) =
                (o.attr("name"), m.value_type(o.results[0]).as_tensor())
            else {
                continue;
            };
            let t = env.param(name, t).map_err(plain)?;
            out.insert(name.clone(), t);
        }
        Ok(out)
    }

    pub(crate) fn emit_wgsl(&self, loaded: &Loaded, dir: &Path, stdout: &mut dyn Write) -> Outcome {
        let func = main_function(&loaded.module)?;
        let plan = ircc_wgsl::plan(&loaded.module, func).map_err(plain)?;
        std::fs::create_dir_all(dir).map_err(|e| io_err("create", dir, e))?;
        for (name, wgsl) in &plan.shaders {
            let path = dir.join(format!("{name}.wgsl"));
            std::fs::write(&path, wgsl).map_err(|e| io_err("write", &path, e))?;
        }
        let path = dir.join("plan.json");
        let json = serde_json::to_string_pretty(&plan).map_err(|e| plain(e.to_string()))?;
        std::fs::write(&path, json + "\n").map_err(|e| io_err("write", &path, e))?;
        let _ = writeln!(
            stdout,
            "wrote {} kernels and plan.json ({} buffers, {} pooled bytes) to {}",
            plan.shaders.len(),
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
                .find(|&f| m.op(f).name == "func.func")
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

/// What a wgpu session is made of: the plan, the output element types and
/// the weights by name.
#[cfg(feature = "wgpu")]
type GpuProgram = (ircc_wgsl::Plan, Vec<ElemType>, HashMap<String, Tensor>);

#[cfg(feature = "wgpu")]
fn gpu_program(
    driver: &Driver,
    loaded: &mut Loaded,
    kernel: &KernelArgs,
) -> Result<GpuProgram, Failure> {
    driver.lower_kernels(loaded, kernel)?;
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
pub(crate) fn session(
    driver: &Driver,
    loaded: &mut Loaded,
    kernel: &KernelArgs,
) -> Result<ircc_wgsl::Session, Failure> {
    start(gpu_program(driver, loaded, kernel)?).map_err(plain)
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
        self.transform(loaded, args, ircc_core::Form::Pretty, &mut std::io::sink())
            .map_err(lower)?;
        let program = gpu_program(self, loaded, kernel).map_err(lower)?;
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

#[cfg(not(feature = "wgpu"))]
pub(crate) fn session(
    _: &Driver,
    _: &mut Loaded,
    _: Precision,
) -> Result<std::convert::Infallible, Failure> {
    Err(plain(
        "this ircc was built without the wgpu backend (cargo feature 'wgpu')",
    ))
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
        if args.backend != crate::Backend::Wgpu {
            return Err(plain("ircc bench times the GPU: use --backend wgpu"));
        }
        if args.runs == 0 {
            return Err(plain("--runs must be at least 1"));
        }
        let mut loaded = self.load_or_fail(
            &args.file,
            &args.onnx,
            args.pipeline.allow_unregistered_dialect,
        )?;
        self.transform(&mut loaded, &args.pipeline, ircc_core::Form::Pretty, stderr)?;
        let func = main_function(&loaded.module)?;
        let names = ircc_reference::input_names(&loaded.module, func);
        let inputs = if args.inputs.is_empty() {
            crate::check::random_inputs(&loaded.module, 0)?
        } else {
            crate::commands::read_inputs(&args.inputs, &names)?
        };
        let mut session = session(self, &mut loaded, &args.kernel)?;
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
        let pipeline = args
            .pipeline
            .pipeline
            .clone()
            .or(args.pipeline.passes.clone())
            .unwrap_or_else(|| "none".into());
        let report = serde_json::json!({
            "file": args.file.display().to_string(),
            "pipeline": pipeline,
            "precision": args.kernel.precision.name(),
            "textures": args.kernel.textures,
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
                args.file.display(),
                session.adapter,
                session.backend,
                pipeline,
                args.kernel.precision.name(),
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
