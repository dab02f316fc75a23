//! The library form of the commands, for programs that embed ircc (the
//! Python package in bindings/python): a [`Model`] compiled once and run
//! many times, its device set up once; [`check`]; an [`Ir`] module to run
//! pipelines over; and the catalogues `--list-passes`, `--list-devices`
//! and `--list-ops` print, as data. Errors carry the text the command
//! line would print (file:line:col where there is one) and which step
//! failed.

use std::path::{Path, PathBuf};

use ircc_core::{Form, Module, Tensor, TensorType, Type};
use ircc_plan::Language;

use crate::gpu::{Session, main_function};
use crate::{Backend, CheckArgs, Driver, Failure, KernelArgs, Loaded, OnnxArgs, PipelineArgs};

/// The step that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Reading, importing or compiling the model, or setting up its device.
    Compile,
    /// The inputs given do not fit the model's.
    Input,
    /// A run on the device, or writing a bundle.
    Run,
    /// `check`: a pass changed the model's results.
    Check,
}

#[derive(Clone, Debug)]
pub struct Error {
    pub kind: ErrorKind,
    /// What the command line would print for it.
    pub message: String,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message.trim_end())
    }
}

impl std::error::Error for Error {}

fn error(kind: ErrorKind, message: impl Into<String>) -> Error {
    Error {
        kind,
        message: message.into(),
    }
}

fn failed(kind: ErrorKind) -> impl Fn(Failure) -> Error {
    move |f| {
        error(
            kind,
            f.diagnostics.render_styled(f.source.as_deref(), false),
        )
    }
}

/// A driver of every built-in dialect and pass that shows no progress
/// bars.
fn driver() -> Result<Driver, Error> {
    let driver = Driver::new().map_err(|d| error(ErrorKind::Compile, d.to_string()))?;
    driver.quiet.set(true);
    Ok(driver)
}

/// How [`Model::compile`] compiles: the command line's options of the
/// same names.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `--pipeline`, `--passes`, `--device`, `--spec-dir`, `--tuning-db`,
    /// `--remarks`, ...
    pub pipeline: PipelineArgs,
    /// `--precision`, `--attention`.
    pub kernel: KernelArgs,
    /// `--input-shape`, `--bind`.
    pub onnx: OnnxArgs,
    /// `--cl-options`.
    pub cl_options: String,
}

/// A model compiled for one backend, its device session set up once.
pub struct Model {
    backend: Backend,
    /// The model as compiled, with its weights; none for a bundle.
    compiled: Option<Loaded>,
    /// The model as read, for [`Model::stats`]; none for a bundle.
    read: Option<Loaded>,
    options: Options,
    session: Option<Session>,
    inputs: Vec<(String, TensorType)>,
    outputs: Vec<(String, TensorType)>,
    remarks: String,
}

impl Model {
    /// Reads the model at `path` (IR text or ONNX), compiles it as
    /// `options` say and sets up `backend`'s device: `ircc run`'s work
    /// before the run.
    pub fn compile(path: &Path, backend: Backend, options: Options) -> Result<Model, Error> {
        regular_file(path)?;
        let driver = driver()?;
        let loaded = driver
            .load_or_fail(
                path,
                &options.onnx,
                options.pipeline.allow_unregistered_dialect,
            )
            .map_err(failed(ErrorKind::Compile))?;
        Model::compile_loaded(&driver, loaded, backend, options)
    }

    /// [`Model::compile`] of IR held in memory ([`Ir::parse`]'s, perhaps
    /// transformed since): its name is the file its diagnostics and its
    /// weights file (`ircc.weights`, relative to it) refer to.
    pub fn compile_ir(ir: &Ir, backend: Backend, options: Options) -> Result<Model, Error> {
        let driver = driver()?;
        Model::compile_loaded(&driver, ir.loaded.copy_without_weights(), backend, options)
    }

    fn compile_loaded(
        driver: &Driver,
        mut loaded: Loaded,
        backend: Backend,
        options: Options,
    ) -> Result<Model, Error> {
        if let (None, Some(p)) = (backend.device(), options.kernel.precision) {
            return Err(error(
                ErrorKind::Compile,
                format!(
                    "precision {} sets the precision of GPU kernels; the reference backend computes in the graph's own types",
                    p.name()
                ),
            ));
        }
        let compile = failed(ErrorKind::Compile);
        let read = loaded.copy_without_weights();
        let device = backend.device();
        let mut remarks = Vec::new();
        driver
            .transform(
                &mut loaded,
                &options.pipeline,
                device.map(|_| &options.kernel),
                device,
                Form::Pretty,
                &mut remarks,
            )
            .map_err(&compile)?;
        let func = main_function(&loaded.module).map_err(&compile)?;
        let inputs = crate::inputs::params(&loaded.module, func);
        let outputs = results(&loaded.module, func);
        // Weights mapped from the model's files are copied out: the model
        // may outlive their contents (a file exported again to the same
        // path would otherwise change its weights, or fault on a read).
        if let Some(weights) = &mut loaded.weights {
            for (_, t) in weights.iter_mut() {
                *t = t.detached();
            }
        }
        let session = device
            .map(|d| crate::gpu::session(driver, &loaded, d, &options.cl_options))
            .transpose()
            .map_err(&compile)?;
        Ok(Model {
            backend,
            compiled: Some(loaded),
            read: Some(read),
            options,
            session,
            inputs,
            outputs,
            remarks: String::from_utf8_lossy(&remarks).into_owned(),
        })
    }

    /// Opens the bundle in `dir` (`ircc compile -o DIR`) on its device,
    /// within `ircc run`'s default bounds on a bundle.
    pub fn load(dir: &Path, cl_options: &str) -> Result<Model, Error> {
        let compile = failed(ErrorKind::Compile);
        let bundle = crate::bundle::open(dir, &crate::bundle::Bounds::DEFAULT).map_err(&compile)?;
        let mut inputs = Vec::new();
        for &id in &bundle.plan.inputs {
            let b = &bundle.plan.buffers[id];
            let elem = ircc_core::ElemType::from_name(&b.elem).ok_or_else(|| {
                error(
                    ErrorKind::Compile,
                    format!("input '{}' has no element type '{}'", b.name, b.elem),
                )
            })?;
            inputs.push((b.name.clone(), TensorType::new(b.shape.clone(), elem)));
        }
        let names = unique(bundle.plan.output_names.clone());
        let outputs = names
            .into_iter()
            .zip(&bundle.plan.outputs)
            .zip(&bundle.output_elems)
            .map(|((name, &id), &elem)| {
                let shape = bundle.plan.buffers[id].shape.clone();
                (name, TensorType::new(shape, elem))
            })
            .collect();
        let backend = match bundle.language {
            Language::Wgsl => Backend::Wgpu,
            Language::Opencl => Backend::Opencl,
        };
        let session = crate::bundle::session(bundle, cl_options).map_err(&compile)?;
        Ok(Model {
            backend,
            compiled: None,
            read: None,
            options: Options {
                cl_options: cl_options.to_string(),
                ..Options::default()
            },
            session: Some(session),
            inputs,
            outputs,
            remarks: String::new(),
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The inputs a run takes, in order: name and type.
    pub fn inputs(&self) -> &[(String, TensorType)] {
        &self.inputs
    }

    /// The outputs a run gives, in order: name and type.
    pub fn outputs(&self) -> &[(String, TensorType)] {
        &self.outputs
    }

    /// What the compiler remarked on (`--remarks`, an import's bound
    /// inputs), as the command line prints it.
    pub fn remarks(&self) -> &str {
        &self.remarks
    }

    /// The device profile compiled for and why (`--remarks`), where
    /// kernels were made.
    pub fn device(&self) -> Option<(String, String)> {
        self.session
            .as_ref()?
            .plan()
            .target
            .as_ref()
            .map(|t| (t.device.clone(), t.reason.clone()))
    }

    /// The adapter and the API it is reached through, for a device backend.
    pub fn adapter(&self) -> Option<(String, String)> {
        self.session.as_ref().map(Session::describe)
    }

    /// `ircc stats --json` of the model, compiled as it was (its pipeline,
    /// the profile its kernels were made for, its precision); a bundle's
    /// holds what its plan says.
    pub fn stats(&self) -> Result<serde_json::Value, Error> {
        let Some(read) = &self.read else {
            let plan = self
                .session
                .as_ref()
                .expect("a bundle has a session")
                .plan();
            return Ok(serde_json::json!({
                "dispatches": plan.dispatches.len(),
                "precision": plan.precision,
                "pooled_bytes": plan.pool_bytes,
                "target": plan.target.as_ref().map(|t| serde_json::json!({"device": t.device, "reason": t.reason})),
            }));
        };
        let driver = driver()?;
        let compiled = self.compiled.as_ref().expect("a compiled model");
        let mut read = read.copy_without_weights();
        // The profile the kernels were made for, which ircc stats takes
        // from the module where no --device names one.
        let mut pipeline = self.options.pipeline.clone();
        if let Some(target) = ircc_dialects::kernel::ModuleTarget::of(&compiled.module)
            .map_err(|e| error(ErrorKind::Compile, e))?
        {
            target.attach(&mut read.module);
            pipeline.device = None;
        }
        let graph_ops = crate::figures::graph_op_count(&read.module);
        let stats = driver
            .pipeline_stats(
                &read,
                &pipeline,
                &self.options.kernel,
                false,
                &mut std::io::sink(),
            )
            .map_err(failed(ErrorKind::Compile))?;
        Ok(stats.to_json(graph_ops, read.import_ms))
    }

    /// Checks `given` against the model's inputs — by name where named,
    /// else in order — and puts them in order.
    pub fn arrange(&self, given: Vec<(Option<String>, Tensor)>) -> Result<Vec<Tensor>, Error> {
        let input = |m: String| error(ErrorKind::Input, m);
        let wanted = || {
            self.inputs
                .iter()
                .map(|(n, t)| format!("'{n}' {t}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut slots: Vec<Option<Tensor>> = vec![None; self.inputs.len()];
        let named = given.iter().filter(|(n, _)| n.is_some()).count();
        if named != 0 && named != given.len() {
            return Err(input("give every input by name or none".into()));
        }
        if named == 0 && !given.is_empty() && given.len() != self.inputs.len() {
            return Err(input(format!(
                "the model takes {} input{} ({}), not {}",
                self.inputs.len(),
                if self.inputs.len() == 1 { "" } else { "s" },
                wanted(),
                given.len()
            )));
        }
        for (i, (name, t)) in given.into_iter().enumerate() {
            let at = match &name {
                None => i,
                Some(n) => self
                    .inputs
                    .iter()
                    .position(|(m, _)| m == n)
                    .ok_or_else(|| {
                        input(format!(
                            "the model has no input '{n}' (its inputs: {})",
                            wanted()
                        ))
                    })?,
            };
            let (n, ty) = &self.inputs[at];
            if slots[at].is_some() {
                return Err(input(format!("input '{n}' is given twice")));
            }
            if t.ty() != *ty {
                return Err(input(format!(
                    "input '{n}' is {ty}; the value given is {}",
                    t.ty()
                )));
            }
            slots[at] = Some(t);
        }
        slots
            .into_iter()
            .zip(&self.inputs)
            .map(|(t, (n, ty))| t.ok_or_else(|| input(format!("input '{n}' ({ty}) is missing"))))
            .collect()
    }

    /// Runs the model once on `inputs`, in the order of [`Model::inputs`]
    /// (see [`Model::arrange`]).
    pub fn run(&mut self, inputs: &[Tensor]) -> Result<Vec<Tensor>, Error> {
        let run = |e: String| error(ErrorKind::Run, e);
        if let Some(session) = &mut self.session {
            return session.run(inputs).map_err(run);
        }
        let driver = driver()?;
        let loaded = self.compiled.as_ref().expect("a compiled model");
        let mut env = driver.weights_env(loaded).map_err(failed(ErrorKind::Run))?;
        ircc_reference::run_function(
            &loaded.module,
            driver.registry(),
            "main",
            inputs.to_vec(),
            env.as_mut(),
        )
        .map_err(|d| error(ErrorKind::Run, d.to_string()))
    }

    /// Times `runs` runs after `warmup` on `inputs` (seeded random ones
    /// where none are given): `ircc bench --json`'s object.
    pub fn bench(
        &mut self,
        inputs: Option<&[Tensor]>,
        warmup: usize,
        runs: usize,
    ) -> Result<serde_json::Value, Error> {
        if runs == 0 {
            return Err(error(ErrorKind::Input, "runs must be at least 1"));
        }
        let random;
        let inputs = match inputs {
            Some(i) => i,
            None => {
                let types: Vec<TensorType> = self.inputs.iter().map(|(_, t)| t.clone()).collect();
                random = crate::inputs::random_tensors(&types, 0);
                &random
            }
        };
        let module = self.compiled.as_ref().map(|l| &l.module);
        let Some(session) = &mut self.session else {
            return Err(error(
                ErrorKind::Run,
                "bench times a device: this model was compiled for the reference backend",
            ));
        };
        crate::gpu::bench(session, module, inputs, warmup, runs, &mut |_, _| {})
            .map(|b| b.report)
            .map_err(failed(ErrorKind::Run))
    }

    /// Writes the model's bundle to `dir`, as `ircc compile -o DIR`.
    pub fn save(&self, dir: &Path) -> Result<(), Error> {
        let device = self.backend.device().ok_or_else(|| {
            error(
                ErrorKind::Run,
                "a bundle holds kernels: this model was compiled for the reference backend (compile it for wgpu or opencl)",
            )
        })?;
        let Some(loaded) = &self.compiled else {
            return Err(error(
                ErrorKind::Run,
                "this model was loaded from a bundle: copy its folder instead",
            ));
        };
        driver()?
            .emit_sources(loaded, device, Some(dir), &mut std::io::sink())
            .map_err(failed(ErrorKind::Run))
    }
}

/// `names` with each repeated name given a suffix (`y`, `y_1`), so that
/// every output has a key of its own.
fn unique(names: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    names
        .into_iter()
        .map(|name| {
            let mut candidate = name.clone();
            let mut n = 0;
            while !seen.insert(candidate.clone()) {
                n += 1;
                candidate = format!("{name}_{n}");
            }
            candidate
        })
        .collect()
}

/// An error unless `path` is a regular file: a FIFO would block the read,
/// a folder fail it less clearly.
fn regular_file(path: &Path) -> Result<(), Error> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(_) => Err(error(
            ErrorKind::Compile,
            format!("{} is not a regular file", path.display()),
        )),
        Err(e) => Err(error(
            ErrorKind::Compile,
            format!("cannot read {}: {e}", path.display()),
        )),
    }
}

/// The names and types of `func`'s results.
fn results(m: &Module, func: ircc_core::OpId) -> Vec<(String, TensorType)> {
    let names = unique(ircc_core::builtin::output_names(m, func));
    let types = match m.op(func).attr("function_type") {
        Some(ircc_core::Attribute::Type(Type::Function { results, .. })) => results.clone(),
        _ => Vec::new(),
    };
    names
        .into_iter()
        .zip(types)
        .filter_map(|(n, t)| Some((n, t.as_tensor()?.clone())))
        .collect()
}

/// `ircc check`: the interpreter before and after each pass of the
/// pipeline on seeded random inputs. Each pass with its relative
/// difference, or an error of kind `Check` naming the first pass that
/// changed the results by more than `rtol`.
pub fn check(
    path: &Path,
    pipeline: PipelineArgs,
    onnx: OnnxArgs,
    seed: u64,
    rtol: f64,
) -> Result<Vec<(String, f64)>, Error> {
    regular_file(path)?;
    let driver = driver()?;
    let args = CheckArgs {
        model: crate::ModelArgs {
            file: path.to_path_buf(),
            onnx,
            pipeline,
        },
        seed,
        rtol,
    };
    let mut rows = Vec::new();
    driver
        .check_passes(&args, &mut std::io::sink(), &mut |_, _, pass, diff| {
            if let Some(diff) = diff {
                rows.push((pass.to_string(), diff));
            }
        })
        .map_err(|f| {
            let kind = if rows
                .last()
                .is_some_and(|(_, d)| !crate::check::within(*d, rtol))
            {
                ErrorKind::Check
            } else {
                ErrorKind::Compile
            };
            failed(kind)(f)
        })?;
    Ok(rows)
}

/// IR in memory, as `ircc FILE --pipeline P` transforms and prints it.
pub struct Ir {
    loaded: Loaded,
}

impl Ir {
    /// Parses and verifies IR text; `name` is the file name diagnostics
    /// give.
    pub fn parse(text: &str, name: &str) -> Result<Ir, Error> {
        let driver = driver()?;
        let fail = |d: ircc_core::Diagnostics| {
            error(ErrorKind::Compile, d.render_styled(Some(text), false))
        };
        let module = ircc_core::parse_module(text, Some(name)).map_err(|d| fail(d.into()))?;
        ircc_core::verify::verify(&module, driver.registry(), Default::default()).map_err(fail)?;
        Ok(Ir {
            loaded: Loaded {
                module,
                source: Some(text.to_string()),
                weights: None,
                path: PathBuf::from(name),
                import_ms: 0.0,
                bound: Vec::new(),
                remarks: Vec::new(),
            },
        })
    }

    /// A copy of the module, to work on apart from this one.
    pub fn copy(&self) -> Ir {
        Ir {
            loaded: self.loaded.copy_without_weights(),
        }
    }

    /// Runs `pipeline` (its `pipeline` or `passes`) over the module; what
    /// it remarked on.
    pub fn run_pipeline(&mut self, pipeline: &PipelineArgs) -> Result<String, Error> {
        let mut remarks = Vec::new();
        driver()?
            .transform(
                &mut self.loaded,
                pipeline,
                None,
                None,
                Form::Pretty,
                &mut remarks,
            )
            .map_err(failed(ErrorKind::Compile))?;
        Ok(String::from_utf8_lossy(&remarks).into_owned())
    }

    /// The module's text in `form`.
    pub fn print(&self, form: Form) -> String {
        ircc_core::print_module(&self.loaded.module, form)
    }
}

/// Every pass `--list-passes` lists: name, summary, where it comes from
/// and its options with kinds, defaults and documentation.
pub fn passes() -> Result<serde_json::Value, Error> {
    let driver = driver()?;
    let passes = driver
        .passes()
        .passes
        .iter()
        .map(|(name, info)| {
            let options: Vec<serde_json::Value> = info
                .options
                .iter()
                .map(|o| {
                    serde_json::json!({
                        "name": o.name, "kind": o.kind, "default": o.default, "doc": o.doc,
                    })
                })
                .collect();
            serde_json::json!({
                "name": name, "summary": info.summary, "origin": info.origin, "options": options,
            })
        })
        .collect();
    Ok(serde_json::Value::Array(passes))
}

/// Every device profile `--list-devices` lists, with all its figures.
pub fn devices() -> Result<serde_json::Value, Error> {
    ircc_dialects::kernel::PROFILES
        .iter()
        .map(|(name, _)| {
            let profile = ircc_dialects::kernel::DeviceProfile::named(name)
                .map_err(|e| error(ErrorKind::Compile, e))?;
            serde_json::to_value(profile).map_err(|e| error(ErrorKind::Compile, e.to_string()))
        })
        .collect()
}

/// Every op `--list-ops` lists, with its DNNFusion mapping type, SmartMem
/// layout class and summary.
pub fn ops() -> Result<serde_json::Value, Error> {
    let driver = driver()?;
    let ops = driver
        .registry()
        .ops
        .iter()
        .map(|(name, def)| {
            let s = &def.spec;
            serde_json::json!({
                "name": name,
                "mapping": s.mapping.map(|m| m.name()),
                "layout": s.layout.map(|l| l.name()),
                "summary": s.summary,
            })
        })
        .collect();
    Ok(serde_json::Value::Array(ops))
}

/// Where the backend named `name` runs: `reference`, `wgpu` or `opencl`.
pub fn backend_named(name: &str) -> Result<Backend, Error> {
    match name {
        "reference" => Ok(Backend::Reference),
        "wgpu" => Ok(Backend::Wgpu),
        "opencl" => Ok(Backend::Opencl),
        other => Err(error(
            ErrorKind::Compile,
            format!("no backend '{other}' (backends: reference, wgpu, opencl)"),
        )),
    }
}
