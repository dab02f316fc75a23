//! The `ircc` driver as a library.
//!
//! [`Driver::new`] holds every dialect and pass ircc ships; a user crate can
//! add its own (through [`Driver::registry_mut`] and [`Driver::passes_mut`])
//! and call [`Driver::main`] to get an `ircc` of its own, the way one
//! builds a custom `mlir-opt`.

pub mod api;
mod bundle;
mod check;
mod cli;
mod commands;
mod describe;
pub mod dot;
pub mod figures;
mod gpu;
mod html;
mod inputs;
mod plugin;
mod probe;
mod progress;
mod roofline;
mod simulate;
mod stdout;
mod tune;

pub use gpu::{Device, GpuError};

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use ircc_core::interp::Env;
use ircc_core::pass::{
    PassManager, PassOptions, PassRegistry, PassTiming, RunOptions, parse_pipeline,
    parse_pipeline_file, timing_table,
};
use ircc_core::verify::{VerifyOptions, verify};
use ircc_core::{
    Attribute, Diagnostic, Diagnostics, Form, Module, Registry, StoredTensor, Tensor, parse_module,
};
use ircc_dialects::kernel::{DEFAULT_DEVICE, ModuleTarget};

pub use cli::{
    AttentionTemplate, Backend, BenchArgs, BundleArgs, BundleBoundsArgs, CheckArgs, Cli, Command,
    CompileArgs, DeviceBackend, Emit, ImportArgs, KernelArgs, ModelArgs, OnnxArgs, OpenClArgs,
    OutputFormat, PipelineArgs, Precision, RunArgs, SimulateAttentionArgs, StatsArgs,
};

/// The pipelines that ship inside the binary, by name.
pub const PIPELINES: &[(&str, &str)] = &[
    ("none", include_str!("../spec/pipelines/none.pipeline")),
    (
        "canonicalize",
        include_str!("../spec/pipelines/canonicalize.pipeline"),
    ),
    (
        "dnnfusion",
        include_str!("../spec/pipelines/dnnfusion.pipeline"),
    ),
    (
        "smartmem",
        include_str!("../spec/pipelines/smartmem.pipeline"),
    ),
    (
        "smartmem-gpu",
        include_str!("../spec/pipelines/smartmem-gpu.pipeline"),
    ),
];

pub struct Driver {
    registry: Registry,
    passes: PassRegistry,
    /// What the command spent its time on, row by row (import or parse,
    /// each pass, code generation, GPU setup and runs): `--timing`.
    phases: std::cell::RefCell<Vec<PassTiming>>,
    /// Whether diagnostics are coloured: only `main` sets it, where stderr
    /// is a terminal (see [`stderr_wants_color`]).
    color: bool,
    /// `--quiet`: no progress bars, for the command being run.
    quiet: std::cell::Cell<bool>,
}

/// A failure with what to show the user. `source` lets diagnostics print
/// the offending line.
pub(crate) struct Failure {
    diagnostics: Diagnostics,
    source: Option<String>,
    /// The reader closed the output pipe (`ircc ... | head`): no error of
    /// ircc's, so the command ends quietly with status 0.
    closed_pipe: bool,
}

impl From<Diagnostic> for Failure {
    fn from(d: Diagnostic) -> Self {
        Failure {
            diagnostics: d.into(),
            source: None,
            closed_pipe: false,
        }
    }
}

impl From<Diagnostics> for Failure {
    fn from(d: Diagnostics) -> Self {
        Failure {
            diagnostics: d,
            source: None,
            closed_pipe: false,
        }
    }
}

pub(crate) type Outcome = Result<(), Failure>;

/// A failure to write the command's output (a full disk, a closed pipe).
pub(crate) fn stdout_err(e: std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return Failure {
            diagnostics: Diagnostics(Vec::new()),
            source: None,
            closed_pipe: true,
        };
    }
    Diagnostic::plain(format!("cannot write the output: {e}")).into()
}

pub(crate) fn io_err(what: &str, path: &Path, e: std::io::Error) -> Failure {
    Diagnostic::plain(format!("cannot {what} {}: {e}", path.display())).into()
}

/// A module read from a file, with where its weights come from.
pub struct Loaded {
    pub module: Module,
    /// The text it was parsed from (none for an ONNX model).
    pub source: Option<String>,
    /// Weights of an imported model, as the model stores them (shared
    /// with its mapped files).
    pub weights: Option<Vec<(String, StoredTensor)>>,
    pub path: PathBuf,
    /// Milliseconds spent importing, for an ONNX model.
    pub import_ms: f64,
    /// The inputs the model was specialized on (`--bind`), each with the
    /// operand it feeds.
    pub bound: Vec<(String, String)>,
    /// The importer's remarks (`ircc_onnx::Imported::remarks`).
    pub remarks: Vec<String>,
}

impl Loaded {
    /// The module as read, to transform apart from this one: the same
    /// source and path, no weights of an import's (they stay with this
    /// one) and none of its remarks.
    pub(crate) fn copy_without_weights(&self) -> Loaded {
        Loaded {
            module: self.module.clone(),
            source: self.source.clone(),
            weights: None,
            path: self.path.clone(),
            import_ms: self.import_ms,
            bound: Vec::new(),
            remarks: Vec::new(),
        }
    }
}

pub fn is_onnx(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

impl Driver {
    /// A driver with every dialect and pass of ircc.
    pub fn new() -> Result<Driver, Diagnostic> {
        let registry = ircc_dialects::registry()?;
        let mut passes = PassRegistry::new();
        passes.set_origin("built in");
        ircc_passes::register_all(&mut passes);
        passes.set_origin(String::new());
        Ok(Driver {
            registry,
            passes,
            phases: Default::default(),
            color: false,
            quiet: Default::default(),
        })
    }

    /// Runs `f`, recording its time as the `--timing` row `name`.
    pub(crate) fn phase<T>(&self, name: &str, f: impl FnOnce() -> T) -> T {
        let start = std::time::Instant::now();
        let out = f();
        self.record(name, start.elapsed(), std::time::Duration::ZERO);
        out
    }

    /// Adds the `--timing` row `name`.
    pub(crate) fn record(&self, name: &str, run: std::time::Duration, verify: std::time::Duration) {
        self.phases.borrow_mut().push(PassTiming {
            pass: name.to_string(),
            run,
            verify,
        });
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    pub fn passes(&self) -> &PassRegistry {
        &self.passes
    }

    pub fn passes_mut(&mut self) -> &mut PassRegistry {
        &mut self.passes
    }

    /// Both registries at once, as a plugin's register function takes them.
    pub fn registries_mut(&mut self) -> (&mut Registry, &mut PassRegistry) {
        (&mut self.registry, &mut self.passes)
    }

    /// Runs the command line of this process and returns its exit code.
    pub fn main(mut self) -> ExitCode {
        self.color = stderr_wants_color();
        let mut stderr = std::io::stderr().lock();
        let mut stdout = stdout::CheckedWriter::of_process();
        let mut code = self.run_cli(std::env::args_os(), &mut stdout, &mut stderr);
        // Output that never arrived fails a command that thought it had
        // succeeded (`ircc stats m.ir > /dev/full`; one that failed said
        // why); a reader that stopped reading (`| head`) fails none, as
        // everywhere here.
        if let Err(e) = stdout.finish()
            && e.kind() != std::io::ErrorKind::BrokenPipe
            && code == 0
        {
            let _ = writeln!(stderr, "error: cannot write the output: {e}");
            code = 1;
        }
        ExitCode::from(code as u8)
    }

    /// Runs a command line, writing to the given streams; returns the exit
    /// code (0 success, 1 an error in the input, 2 a usage error).
    pub fn run_cli<I, T>(&self, args: I, stdout: &mut dyn Write, stderr: &mut dyn Write) -> i32
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
        let cli = match Cli::try_parse_from(&args) {
            Ok(c) => c,
            Err(e) => {
                if let Some(hint) = misspelt_command(&args).filter(|_| e.use_stderr()) {
                    let _ = writeln!(stderr, "{hint}");
                    return 2;
                }
                if e.use_stderr() {
                    let _ = write!(stderr, "{}", e.render());
                    return 2;
                }
                let _ = write!(stdout, "{}", e.render());
                return 0;
            }
        };
        if let Some(e) = bundle::misapplied_option(&args) {
            let _ = writeln!(stderr, "error: {e}");
            return 2;
        }
        let plugins = &cli.pipeline().load_pass_plugin;
        if plugins.is_empty() {
            return self.dispatch(&cli, stdout, stderr);
        }
        let mut with_plugins = Driver {
            registry: self.registry.clone(),
            passes: self.passes.clone(),
            phases: Default::default(),
            color: self.color,
            quiet: Default::default(),
        };
        for path in plugins {
            if let Err(d) = with_plugins.load_pass_plugin(path) {
                let _ = write!(stderr, "{}", d.render_styled(None, self.color));
                return 1;
            }
        }
        with_plugins.dispatch(&cli, stdout, stderr)
    }

    /// Runs a parsed command line.
    fn dispatch(&self, cli: &Cli, stdout: &mut dyn Write, stderr: &mut dyn Write) -> i32 {
        self.quiet.set(cli.pipeline().quiet);
        let result = if cli.list_ops {
            write!(stdout, "{}", self.registry.ops_table()).map_err(stdout_err)
        } else if cli.list_onnx_ops {
            write!(stdout, "{}", ircc_onnx::operators::table()).map_err(stdout_err)
        } else if cli.list_passes {
            write!(stdout, "{}", self.passes.table()).map_err(stdout_err)
        } else if let Some(op) = &cli.describe_op {
            describe::describe_op(&self.registry, op)
                .map_err(|e| Failure::from(Diagnostic::plain(e)))
                .and_then(|t| write!(stdout, "{t}").map_err(stdout_err))
        } else if cli.list_fusion_tables {
            // The tables a --spec-dir names, else the built-in ones.
            let file = cli
                .compile
                .pipeline
                .spec_dir
                .as_deref()
                .map(|dir| spec_file(dir, "fusion.toml"))
                .transpose()
                .map(Option::flatten);
            let file = match file {
                Ok(file) => file,
                Err(d) => {
                    let _ = write!(stderr, "{}", d.render_styled(None, self.color));
                    return 1;
                }
            };
            let path = file
                .as_ref()
                .map_or(String::new(), |f| f.to_string_lossy().into_owned());
            let from = match &file {
                Some(f) => format!("# fusion tables from {}\n", f.display()),
                None => "# fusion tables built in (spec/fusion.toml)\n".to_string(),
            };
            let layout = ircc_passes::layout::cost::LayoutSpec::load().render();
            ircc_passes::graph::fusion::Tables::from_option(&path)
                .map_err(|e| Failure::from(Diagnostic::plain(e)))
                .and_then(|t| write!(stdout, "{from}{}\n{layout}", t.render()).map_err(stdout_err))
        } else if cli.list_devices {
            ircc_dialects::kernel::profiles_table()
                .map_err(|e| Failure::from(Diagnostic::plain(e)))
                .and_then(|t| write!(stdout, "{t}").map_err(stdout_err))
        } else {
            match &cli.command {
                Some(Command::Run(args)) => self.run_command(args, stdout, stderr),
                Some(Command::Import(args)) => self.import_command(args, stdout),
                Some(Command::Stats(args)) => self.stats_command(args, stdout, stderr),
                Some(Command::Check(args)) => self.check_command(args, stdout, stderr),
                Some(Command::Bench(args)) => self.bench_command(args, stdout, stderr),
                Some(Command::Compile(args)) => self.bundle_command(args, stdout, stderr),
                Some(Command::Tune(args)) => self.tune_command(args, stdout, stderr),
                Some(Command::Probe(args)) => probe::probe_command(args, stdout, stderr),
                Some(Command::SimulateAttention(args)) => {
                    simulate::simulate_attention(args, stdout)
                }
                Some(Command::Completions { shell }) => {
                    // clap_complete panics where its writer fails: the
                    // script is written whole, and a failure reported.
                    let mut command = <Cli as clap::CommandFactory>::command();
                    let mut script = Vec::new();
                    clap_complete::generate(*shell, &mut command, "ircc", &mut script);
                    stdout.write_all(&script).map_err(stdout_err)
                }
                None => self.compile_command(&cli.compile, stdout, stderr),
            }
        };
        let phases = self.phases.take();
        if cli.pipeline().timing && !phases.is_empty() {
            let _ = write!(stderr, "{}", timing_table(&phases));
        }
        match result {
            Ok(()) => 0,
            Err(f) if f.closed_pipe => 0,
            Err(f) => {
                let text = f.diagnostics.render_styled(f.source.as_deref(), self.color);
                let _ = write!(stderr, "{text}");
                1
            }
        }
    }

    /// Reads a module — parsing IR text or importing an ONNX model — and
    /// verifies it.
    pub fn load(
        &self,
        path: &Path,
        onnx: &OnnxArgs,
        allow_unregistered: bool,
    ) -> Result<Loaded, (Diagnostics, Option<String>)> {
        let plain =
            |m: String| -> (Diagnostics, Option<String>) { (Diagnostic::plain(m).into(), None) };
        if is_onnx(path) {
            let mut options = onnx_options(onnx).map_err(plain)?;
            let bar = progress::bar(
                0,
                "importing {pos}/{len} initializers and nodes [{bar:30}] {elapsed}",
                self.quiet.get(),
            );
            let reporter = bar.clone();
            options.progress = ircc_onnx::Progress::new(move |done, total| {
                reporter.set_length(total as u64);
                reporter.set_position(done as u64);
            });
            let start = std::time::Instant::now();
            let imported = ircc_onnx::import_file(path, &self.registry, &options);
            bar.finish_and_clear();
            let imported = imported.map_err(|e| plain(format!("{}: {e}", path.display())))?;
            let import = start.elapsed();
            let verified = verify(&imported.module, &self.registry, VerifyOptions::default());
            self.record("import (ONNX)", import, start.elapsed() - import);
            verified.map_err(|d| (d, None))?;
            let import_ms = import.as_secs_f64() * 1e3;
            return Ok(Loaded {
                module: imported.module,
                source: None,
                weights: Some(imported.weights),
                path: path.to_path_buf(),
                import_ms,
                bound: imported.bound,
                remarks: imported.remarks,
            });
        }
        if !onnx.input_shapes.is_empty() {
            return Err(plain(format!(
                "--input-shape fixes an ONNX model's symbolic dimensions; {} is textual IR, whose shapes are written in it",
                path.display()
            )));
        }
        if !onnx.binds.is_empty() {
            return Err(plain(format!(
                "--bind specializes an ONNX model on an input's value; {} is textual IR, whose constants are written in it",
                path.display()
            )));
        }
        let source = if path == Path::new("-") {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| plain(format!("cannot read stdin: {e}")))?;
            s
        } else {
            std::fs::read_to_string(path)
                .map_err(|e| plain(format!("cannot read {}: {e}", path.display())))?
        };
        let name = path.display().to_string();
        let start = std::time::Instant::now();
        let module = match parse_module(&source, Some(&name)) {
            Ok(m) => m,
            Err(d) => return Err((d.into(), Some(source))),
        };
        let parse = start.elapsed();
        let verified = verify(
            &module,
            &self.registry,
            VerifyOptions { allow_unregistered },
        );
        self.record("parse", parse, start.elapsed() - parse);
        if let Err(d) = verified {
            return Err((d, Some(source)));
        }
        Ok(Loaded {
            module,
            source: Some(source),
            weights: None,
            path: path.to_path_buf(),
            import_ms: 0.0,
            bound: Vec::new(),
            remarks: Vec::new(),
        })
    }

    /// The model `args` names, read for its pipeline.
    pub(crate) fn load_model(&self, args: &ModelArgs) -> Result<Loaded, Failure> {
        self.load_or_fail(
            &args.file,
            &args.onnx,
            args.pipeline.allow_unregistered_dialect,
        )
    }

    pub(crate) fn load_or_fail(
        &self,
        path: &Path,
        onnx: &OnnxArgs,
        allow_unregistered: bool,
    ) -> Result<Loaded, Failure> {
        self.load(path, onnx, allow_unregistered)
            .map_err(|(diagnostics, source)| Failure {
                diagnostics,
                source,
                closed_pipe: false,
            })
    }

    /// The passes a `--pipeline`/`--passes` choice stands for.
    pub fn pipeline_specs(&self, args: &PipelineArgs) -> Result<Vec<PassOptions>, Diagnostic> {
        self.device_pipeline_specs(args, None)
    }

    /// [`Driver::pipeline_specs`], ended for the GPU where `gpu` gives the
    /// kernel options and the module (whose printers read `--device` too).
    fn device_pipeline_specs(
        &self,
        args: &PipelineArgs,
        gpu: Option<(&KernelArgs, &ircc_core::Module)>,
    ) -> Result<Vec<PassOptions>, Diagnostic> {
        let mut specs = self.named_pipeline(args)?;
        if let Some((kernel, module)) = gpu {
            gpu::lower_for_gpu(&mut specs, kernel, module)?;
            if let Some(db) = &args.tuning_db
                && !gpu::schedules(&specs)
                && !gpu::is_lowered(module)
            {
                return Err(gpu::already_scheduled(&format!(
                    "--tuning-db {}",
                    db.display()
                )));
            }
        }
        if let Some(db) = &args.tuning_db {
            set_tuning_db(&mut specs, db)?;
        }
        if let Some(dir) = &args.spec_dir {
            set_spec_files(&mut specs, dir)?;
        }
        insert_rules(&mut specs, &args.load_rules);
        Ok(specs)
    }

    fn named_pipeline(&self, args: &PipelineArgs) -> Result<Vec<PassOptions>, Diagnostic> {
        if let Some(text) = &args.passes {
            return parse_pipeline(text).map_err(Diagnostic::plain);
        }
        let Some(name) = &args.pipeline else {
            return Ok(Vec::new());
        };
        let file = match args.spec_dir.as_deref() {
            Some(dir) => spec_file(dir, &format!("pipelines/{name}.pipeline"))?,
            None => None,
        };
        if let Some(path) = file {
            let text = ircc_core::files::read_spec_file(&path.to_string_lossy())
                .map_err(|e| Diagnostic::plain(format!("cannot read {e}")))?;
            return parse_pipeline_file(&text)
                .map_err(|e| Diagnostic::plain(format!("{}: {e}", path.display())));
        }
        if let Some((_, text)) = PIPELINES.iter().find(|(n, _)| n == name) {
            return parse_pipeline_file(text)
                .map_err(|e| Diagnostic::plain(format!("pipeline '{name}': {e}")));
        }
        let path = PathBuf::from(name);
        if path.is_file() {
            let text = ircc_core::files::read_spec_file(name)
                .map_err(|e| Diagnostic::plain(format!("cannot read {e}")))?;
            return parse_pipeline_file(&text)
                .map_err(|e| Diagnostic::plain(format!("{name}: {e}")));
        }
        let known: Vec<&str> = PIPELINES.iter().map(|(n, _)| *n).collect();
        Err(Diagnostic::plain(format!(
            "unknown pipeline '{name}' (known: {}; or give a path to a .pipeline file)",
            known.join(", ")
        )))
    }

    /// The target a module is compiled for: `--device NAME`'s profile; for
    /// a command that opens a device (`opens`), the profile matching its
    /// adapter unless `--device` names one; else the module's own target,
    /// or the default device's.
    pub(crate) fn choose_target(
        &self,
        args: &PipelineArgs,
        opens: Option<gpu::Device>,
        module: &ircc_core::Module,
    ) -> Result<ModuleTarget, Diagnostic> {
        let device = args.device.as_deref();
        if let Some(name) = device.filter(|&d| d != "auto") {
            let path = args.device_profile()?.unwrap_or_else(|| name.to_string());
            let target = ModuleTarget::named(&path, &format!("--device {name}")).map_err(|e| {
                Diagnostic::plain(format!("--device: {e}; see ircc --list-devices"))
            })?;
            if !path.ends_with(".toml") || target.profile.name == name {
                return Ok(target);
            }
            return Err(Diagnostic::plain(format!(
                "--device {name}: {path} describes '{}', not '{name}'",
                target.profile.name
            )));
        }
        if let Some(backend) = opens {
            let adapter = backend.adapter().map_err(Diagnostic::plain)?;
            let mut profiles = Vec::new();
            for (name, _) in ircc_dialects::kernel::PROFILES {
                let file = match args.spec_dir.as_deref() {
                    Some(dir) => spec_file(dir, &format!("devices/{name}.toml"))?,
                    None => None,
                };
                let path =
                    file.map_or_else(|| name.to_string(), |p| p.to_string_lossy().into_owned());
                let profile = ircc_dialects::kernel::DeviceProfile::named(&path)
                    .map_err(|e| Diagnostic::plain(format!("--device auto: {e}")))?;
                if profile.name != name {
                    return Err(Diagnostic::plain(format!(
                        "--device auto: {path} describes '{}', not '{name}'",
                        profile.name
                    )));
                }
                profiles.push(profile);
            }
            return Ok(ModuleTarget::for_adapter(&adapter, &profiles));
        }
        if device == Some("auto") {
            return Err(Diagnostic::plain(
                "--device auto: this command opens no device to match a profile against; name one (ircc --list-devices)",
            ));
        }
        if let Some(own) = ModuleTarget::of(module).map_err(Diagnostic::plain)? {
            return Ok(own);
        }
        ModuleTarget::named(
            DEFAULT_DEVICE,
            "the default of commands that open no device (--device names another)",
        )
        .map_err(Diagnostic::plain)
    }

    /// Attaches [`Driver::choose_target`]'s target to `module`, saying
    /// which and why under `--remarks`; returns it.
    pub(crate) fn attach_target(
        &self,
        args: &PipelineArgs,
        opens: Option<gpu::Device>,
        module: &mut ircc_core::Module,
        stderr: &mut dyn Write,
    ) -> Result<ModuleTarget, Diagnostic> {
        let target = self.choose_target(args, opens, module)?;
        if args.remarks {
            let _ = writeln!(
                stderr,
                "remark: compiling for device profile '{}': {}",
                target.profile.name, target.reason
            );
        }
        target.attach(module);
        Ok(target)
    }

    /// Runs the pipeline chosen by `args` over `module`. For the GPU
    /// (`gpu`), `kernel.schedule`, `kernel.lower` and `kernel.ace` end the
    /// pipeline, in the same pass manager so that `--print-ir-after`,
    /// `--dump-dir` and `--timing` show them; a pipeline that already
    /// schedules gets the options `gpu` sets. Where a pass reads the
    /// target, or kernels are made, the module gets its target first
    /// ([`Driver::choose_target`], `opens` being the device the command
    /// runs on). With
    /// `--dump-dir`, the module's weights are written there first, as
    /// [`DUMP_WEIGHTS_FILE`], for the dumped IR to name.
    pub(crate) fn transform(
        &self,
        loaded: &mut Loaded,
        args: &PipelineArgs,
        gpu: Option<&KernelArgs>,
        opens: Option<gpu::Device>,
        form: Form,
        stderr: &mut dyn Write,
    ) -> Outcome {
        for (name, what) in &loaded.bound {
            let _ = writeln!(
                stderr,
                "remark: input '{name}' is bound to the value given for it: it feeds {what}, which must be known when compiling"
            );
        }
        for remark in &loaded.remarks {
            let _ = writeln!(stderr, "remark: {remark}");
        }
        let specs = self.device_pipeline_specs(args, gpu.map(|kernel| (kernel, &loaded.module)))?;
        if let Some(kernel) = gpu {
            gpu::give_precision(&specs, kernel, &mut loaded.module);
        }
        let reads_target = specs
            .iter()
            .any(|s| ircc_passes::READS_TARGET.contains(&s.pass.as_str()));
        if reads_target || gpu.is_some() {
            self.attach_target(args, opens, &mut loaded.module, stderr)?;
        } else if let Some(device) = args.device.as_deref() {
            return Err(Diagnostic::plain(format!(
                "--device {device} does nothing: the pipeline has none of {}, and the command lowers to no kernels",
                ircc_passes::READS_TARGET.join(", ")
            ))
            .into());
        }
        // Dumped IR names the weights written beside it, so it runs; the
        // module names its own again once the pipeline is done.
        let own_weights = loaded.module.attrs.get("ircc.weights").cloned();
        if let Some(dir) = &args.dump_dir {
            std::fs::create_dir_all(dir).map_err(|e| io_err("create", dir, e))?;
            self.place_weights(loaded, &dir.join(DUMP_WEIGHTS_FILE))?;
        }
        if let Some(unknown) = args
            .print_ir_after
            .iter()
            .find(|name| !specs.iter().any(|s| &s.pass == *name))
        {
            let passes: Vec<&str> = specs.iter().map(|s| s.pass.as_str()).collect();
            return Err(Diagnostic::plain(format!(
                "--print-ir-after {unknown}: the pipeline runs no such pass (it runs: {})",
                if passes.is_empty() {
                    "nothing".to_string()
                } else {
                    passes.join(", ")
                }
            ))
            .into());
        }
        let mut pm = PassManager::from_specs(&self.passes, &specs)?;
        let options = RunOptions {
            verify_each: !args.no_verify_each,
            verify: VerifyOptions {
                allow_unregistered: args.allow_unregistered_dialect,
            },
            print_after_all: args.print_ir_after_all,
            print_after: args.print_ir_after.clone(),
            dump_dir: args.dump_dir.clone(),
            form,
            remarks: args.remarks,
        };
        let timings = pm
            .run(&mut loaded.module, &self.registry, &options, stderr)
            .map_err(|d| Failure {
                diagnostics: d,
                source: loaded.source.clone(),
                closed_pipe: false,
            })?;
        self.phases.borrow_mut().extend(timings);
        match own_weights {
            Some(w) => loaded.module.attrs.insert("ircc.weights".into(), w),
            None => loaded.module.attrs.shift_remove("ircc.weights"),
        };
        Ok(())
    }

    /// Writes the weights of `loaded` to `path` (an import's, or a copy of
    /// the file its `ircc.weights` names) and names that file in the
    /// module, relative to IR written beside it; nothing where it has
    /// none.
    pub(crate) fn place_weights(&self, loaded: &mut Loaded, path: &Path) -> Outcome {
        if let Some(weights) = &loaded.weights {
            ircc_reference::write_safetensors(path, weights).map_err(Diagnostic::plain)?;
        } else if let Some(Attribute::String(rel)) = loaded.module.attrs.get("ircc.weights") {
            let base = loaded.path.parent().unwrap_or(Path::new("."));
            let source = ircc_core::files::file_inside(base, rel).map_err(|e| {
                Diagnostic::plain(format!("the weights named by ircc.weights: {e}"))
            })?;
            let same = std::fs::canonicalize(path).is_ok_and(|p| p == source);
            if !same {
                // Replacing a link at `path`, as the weights of an import
                // are written.
                ircc_core::files::write_replacing(path, |file| {
                    let mut from = std::fs::File::open(&source)
                        .map_err(|e| format!("cannot read {}: {e}", source.display()))?;
                    std::io::copy(&mut from, file)
                        .map(|_| ())
                        .map_err(|e| format!("cannot write {}: {e}", path.display()))
                })
                .map_err(Diagnostic::plain)?;
            }
        } else {
            return Ok(());
        }
        let name = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        loaded
            .module
            .attrs
            .insert("ircc.weights".into(), Attribute::String(name));
        Ok(())
    }

    /// Where `graph.param` values come from: an import's weights, or the
    /// file named by the module attribute `ircc.weights` (relative to the IR file).
    pub(crate) fn weights_env(&self, loaded: &Loaded) -> Result<Box<dyn Env>, Failure> {
        if let Some(w) = &loaded.weights {
            return Ok(Box::new(ircc_reference::MemoryWeights(
                w.iter().cloned().collect::<HashMap<_, _>>(),
            )));
        }
        match loaded.module.attrs.get("ircc.weights") {
            None => Ok(Box::new(NoWeightsFile)),
            Some(Attribute::String(rel)) => {
                let base = loaded.path.parent().unwrap_or(Path::new("."));
                let path = ircc_core::files::file_inside(base, rel).map_err(|e| {
                    Diagnostic::plain(format!("the weights named by ircc.weights: {e}"))
                })?;
                let w =
                    ircc_reference::SafetensorsWeights::open(&path).map_err(Diagnostic::plain)?;
                Ok(Box::new(w))
            }
            Some(other) => Err(Diagnostic::plain(format!(
                "module attribute ircc.weights must be a string, not {other}"
            ))
            .into()),
        }
    }
}

/// The weights of an imported model in a `--dump-dir` folder, named by
/// every IR file dumped there.
const DUMP_WEIGHTS_FILE: &str = "weights.safetensors";

/// The weights of a module that names no weights file: IR printed from an
/// ONNX model, or dumped by --dump-dir, holds its weights' names only.
struct NoWeightsFile;

impl Env for NoWeightsFile {
    fn param(&mut self, name: &str, _ty: &ircc_core::TensorType) -> Result<Tensor, String> {
        Err(format!(
            "weight '{name}' is not available: this module names no weights file (its ircc.weights attribute). IR printed from an ONNX model holds only the weights' names; run the .onnx model itself, or write the IR with `ircc import MODEL.onnx -o FILE.ir`, which writes the weights beside it (FILE.safetensors) and names them in the IR"
        ))
    }
}

/// The error for a first argument that is neither a file nor a command
/// but close to one (`ircc rn m.ir`), which clap would otherwise read as a
/// file and report confusingly.
fn misspelt_command(args: &[std::ffi::OsString]) -> Option<String> {
    use clap::CommandFactory;
    let first = args.iter().skip(1).find_map(|a| a.to_str())?;
    if first.starts_with('-') || first.contains(['.', '/']) || Path::new(first).exists() {
        return None;
    }
    let cli = Cli::command();
    let commands: Vec<&str> = cli.get_subcommands().map(|c| c.get_name()).collect();
    if commands.contains(&first) {
        return None;
    }
    let closest = closest(first, commands.iter().copied())?;
    Some(format!(
        "error: unknown command '{first}'; did you mean '{closest}'? (commands: {})",
        commands.join(", ")
    ))
}

/// The candidate closest to a misspelt `name`, within two edits.
pub(crate) fn closest<'a>(
    name: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .map(|c| (strsim::levenshtein(name, c), c))
        .min()
        .filter(|&(distance, _)| distance <= 2)
        .map(|(_, c)| c)
}

fn onnx_options(args: &OnnxArgs) -> Result<ircc_onnx::ImportOptions, String> {
    let mut options = ircc_onnx::ImportOptions::default();
    for spec in &args.input_shapes {
        let (name, shape) = spec
            .split_once('=')
            .ok_or_else(|| format!("--input-shape '{spec}' must be NAME=DIMSxDIMS"))?;
        let dims = shape
            .split('x')
            .map(|d| d.parse::<i64>().ok().filter(|&v| v >= 0))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                format!("--input-shape '{spec}': '{shape}' is not a shape like 1x3x224x224")
            })?;
        options.input_shapes.insert(name.to_string(), dims);
    }
    if let Some(spec) = args.binds.iter().find(|s| !s.contains('=')) {
        return Err(format!("--bind '{spec}' must be NAME=FILE.npy"));
    }
    let (bound, _) = crate::inputs::known_values(&args.binds, true)?;
    for (name, value) in bound {
        match options.known_inputs.get(&name) {
            Some(earlier) if *earlier != value => {
                return Err(format!(
                    "input '{name}' is given twice, with another value each time"
                ));
            }
            _ => options.known_inputs.insert(name, value),
        };
    }
    let (given, in_order) = crate::inputs::known_values(&args.run_inputs, false)?;
    if let Some((name, _)) = given
        .iter()
        .find(|(name, v)| options.known_inputs.get(name).is_some_and(|b| b != v))
    {
        return Err(format!(
            "input '{name}' is given twice, with another value each time"
        ));
    }
    options.given = given.into_iter().collect();
    options.given_in_order = in_order;
    Ok(options)
}

/// `FILE` in the spec folder `dir`: `None` where the folder has no such
/// entry (the built-in one is used), an error where it has one that is
/// not a regular file inside it (a FIFO, a folder, a link leading out or
/// nowhere), which ircc would otherwise pass over in silence.
fn spec_file(dir: &Path, file: &str) -> Result<Option<PathBuf>, Diagnostic> {
    let refuse = |e: String| Diagnostic::plain(format!("--spec-dir: {e}"));
    let entry = dir.join(file);
    match std::fs::symlink_metadata(&entry) {
        Ok(_) => ircc_core::files::file_inside(dir, file)
            .map(Some)
            .map_err(refuse),
        // Absent, unless a folder on the way (`pipelines/`) is something
        // else: a file, a FIFO, a link to nowhere.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = Path::new(file)
                .parent()
                .filter(|p| !p.as_os_str().is_empty());
            if let Some(parent) = parent.map(|p| dir.join(p))
                && std::fs::symlink_metadata(&parent).is_ok()
                && !parent.is_dir()
            {
                return Err(refuse(format!("{} is not a folder", parent.display())));
            }
            Ok(None)
        }
        Err(e) => Err(refuse(format!("cannot read {}: {e}", entry.display()))),
    }
}

/// `--spec-dir DIR`: its files for the passes that read them, unless the
/// pipeline names other files — fusion.toml as the fusion passes' tables,
/// rules/algebra.rules as graph.math-rewrite's rules, rules/dnnfusion.rules
/// as the rules pass's file.
fn set_spec_files(specs: &mut [PassOptions], dir: &Path) -> Result<(), Diagnostic> {
    use ircc_passes::decl::{
        GraphClassifyOptions, GraphEliminateLayoutOpsOptions, GraphFuseOptions,
        GraphMathRewriteOptions, RulesOptions,
    };
    if !dir.is_dir() {
        return Err(Diagnostic::plain(format!(
            "--spec-dir {}: not a directory",
            dir.display()
        )));
    }
    let files: [(&str, &str, &[&str]); 3] = [
        (
            "fusion.toml",
            "tables",
            &[
                GraphClassifyOptions::NAME,
                GraphEliminateLayoutOpsOptions::NAME,
                GraphFuseOptions::NAME,
            ],
        ),
        (
            "rules/algebra.rules",
            "rules",
            &[GraphMathRewriteOptions::NAME],
        ),
        ("rules/dnnfusion.rules", "file", &[RulesOptions::NAME]),
    ];
    for (file, option, readers) in files {
        let Some(path) = spec_file(dir, file)? else {
            continue;
        };
        let path = path.to_string_lossy().into_owned();
        for spec in specs
            .iter_mut()
            .filter(|s| readers.contains(&s.pass.as_str()))
        {
            spec.values
                .entry(option.into())
                .or_insert_with(|| path.clone());
        }
    }
    Ok(())
}

/// `--load-rules FILE`: `rules{file=FILE}` before the pipeline's
/// graph.math-rewrite (where DNNFusion rewrites), or first.
fn insert_rules(specs: &mut Vec<PassOptions>, files: &[PathBuf]) {
    use ircc_passes::decl::{GraphMathRewriteOptions, RulesOptions};
    let at = specs
        .iter()
        .position(|s| s.pass == GraphMathRewriteOptions::NAME)
        .unwrap_or(0);
    for (i, file) in files.iter().enumerate() {
        let mut spec = PassOptions {
            pass: RulesOptions::NAME.to_string(),
            ..Default::default()
        };
        spec.values
            .insert("file".into(), file.to_string_lossy().into_owned());
        specs.insert(at + i, spec);
    }
}

/// Whether diagnostics on this process's stderr should be coloured: where
/// it is a terminal, unless `NO_COLOR` is set (no-color.org) or `TERM` is
/// `dumb`; `CLICOLOR_FORCE` (not `0`) colours them anywhere, short of
/// `NO_COLOR`.
fn stderr_wants_color() -> bool {
    use std::io::IsTerminal;
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    if set("NO_COLOR") {
        return false;
    }
    if std::env::var_os("CLICOLOR_FORCE").is_some_and(|v| !v.is_empty() && v != "0") {
        return true;
    }
    std::io::stderr().is_terminal() && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
}

/// `--tuning-db PATH`: the database `kernel.schedule` reads.
pub(crate) fn set_tuning_db(specs: &mut [PassOptions], db: &Path) -> Result<(), Diagnostic> {
    use ircc_passes::decl::KernelScheduleOptions;
    let path = db.to_string_lossy().into_owned();
    let mut used = false;
    for spec in specs
        .iter_mut()
        .filter(|s| s.pass == KernelScheduleOptions::NAME)
    {
        match spec.values.get("tuning-db") {
            Some(d) if *d != path => {
                return Err(Diagnostic::plain(format!(
                    "--tuning-db {path} contradicts the pipeline's {}{{tuning-db={d}}}",
                    spec.pass
                )));
            }
            _ => {
                spec.values.insert("tuning-db".into(), path.clone());
            }
        }
        used = true;
    }
    if used {
        Ok(())
    } else {
        Err(Diagnostic::plain(format!(
            "--tuning-db {path} does nothing: the pipeline does not schedule kernels (name one with {}, such as smartmem, or run on a device: --backend wgpu, ircc bench, ircc compile)",
            KernelScheduleOptions::NAME
        )))
    }
}
