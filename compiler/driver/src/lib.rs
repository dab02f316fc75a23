//! The `ircc` driver as a library.
//!
//! [`Driver::new`] holds every dialect and pass ircc ships; a user crate can
//! add its own (through [`Driver::registry_mut`] and [`Driver::passes_mut`])
//! and call [`Driver::main`] to get an `ircc` of its own, the way one
//! builds a custom `mlir-opt`.

mod cli;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use ircc_core::pass::{
    PassManager, PassOptions, PassRegistry, RunOptions, parse_pipeline, parse_pipeline_file,
    timing_table,
};
use ircc_core::verify::{VerifyOptions, verify};
use ircc_core::{
    Diagnostic, Diagnostics, Form, Module, Registry, Tensor, parse_module, print_module,
};

pub use cli::{Cli, Command, CompileArgs, Emit, PipelineArgs, RunArgs};

/// The pipelines that ship inside the binary, by name.
pub const PIPELINES: &[(&str, &str)] = &[
    (
        "none",
        include_str!("../../../spec/pipelines/none.pipeline"),
    ),
    (
        "canonicalize",
        include_str!("../../../spec/pipelines/canonicalize.pipeline"),
    ),
];

pub struct Driver {
    registry: Registry,
    passes: PassRegistry,
}

/// A failure with what to show the user. `source` lets diagnostics print
/// the offending line.
struct Failure {
    diagnostics: Diagnostics,
    source: Option<String>,
}

impl From<Diagnostic> for Failure {
    fn from(d: Diagnostic) -> Self {
        Failure {
            diagnostics: d.into(),
            source: None,
        }
    }
}

impl From<Diagnostics> for Failure {
    fn from(d: Diagnostics) -> Self {
        Failure {
            diagnostics: d,
            source: None,
        }
    }
}

type Outcome = Result<(), Failure>;

fn io_err(what: &str, path: &Path, e: std::io::Error) -> Failure {
    Diagnostic::plain(format!("cannot {what} {}: {e}", path.display())).into()
}

impl Driver {
    /// A driver with every dialect and pass of ircc.
    pub fn new() -> Result<Driver, Diagnostic> {
        let registry = ircc_dialects::registry()?;
        let mut passes = PassRegistry::new();
        ircc_passes::register_all(&mut passes);
        Ok(Driver { registry, passes })
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    pub fn passes_mut(&mut self) -> &mut PassRegistry {
        &mut self.passes
    }

    /// Runs the command line of this process and returns its exit code.
    pub fn main(&self) -> ExitCode {
        let code = self.run_cli(
            std::env::args_os(),
            &mut std::io::stdout().lock(),
            &mut std::io::stderr().lock(),
        );
        ExitCode::from(code as u8)
    }

    /// Runs a command line, writing to the given streams; returns the exit
    /// code (0 success, 1 an error in the input, 2 a usage error).
    pub fn run_cli<I, T>(&self, args: I, stdout: &mut dyn Write, stderr: &mut dyn Write) -> i32
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let cli = match Cli::try_parse_from(args) {
            Ok(c) => c,
            Err(e) => {
                if e.use_stderr() {
                    let _ = write!(stderr, "{}", e.render());
                    return 2;
                }
                let _ = write!(stdout, "{}", e.render());
                return 0;
            }
        };
        let result = if cli.list_ops {
            let _ = write!(stdout, "{}", self.registry.ops_table());
            Ok(())
        } else if cli.list_passes {
            let _ = write!(stdout, "{}", self.passes.table());
            Ok(())
        } else {
            match &cli.command {
                Some(Command::Run(args)) => self.run_command(args, stdout, stderr),
                None => self.compile_command(&cli.compile, stdout, stderr),
            }
        };
        match result {
            Ok(()) => 0,
            Err(f) => {
                let _ = write!(stderr, "{}", f.diagnostics.render(f.source.as_deref()));
                1
            }
        }
    }

    /// Reads and parses a module, then verifies it.
    pub fn load(
        &self,
        path: &Path,
        allow_unregistered: bool,
    ) -> Result<(Module, String), (Diagnostics, Option<String>)> {
        let source = if path == Path::new("-") {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s).map_err(|e| {
                (
                    Diagnostic::plain(format!("cannot read stdin: {e}")).into(),
                    None,
                )
            })?;
            s
        } else {
            std::fs::read_to_string(path).map_err(|e| {
                (
                    Diagnostic::plain(format!("cannot read {}: {e}", path.display())).into(),
                    None,
                )
            })?
        };
        let name = path.display().to_string();
        let module = match parse_module(&source, Some(&name)) {
            Ok(m) => m,
            Err(d) => return Err((d.into(), Some(source))),
        };
        if let Err(d) = verify(
            &module,
            &self.registry,
            VerifyOptions { allow_unregistered },
        ) {
            return Err((d, Some(source)));
        }
        Ok((module, source))
    }

    fn load_or_fail(
        &self,
        path: &Path,
        allow_unregistered: bool,
    ) -> Result<(Module, String), Failure> {
        self.load(path, allow_unregistered)
            .map_err(|(diagnostics, source)| Failure {
                diagnostics,
                source,
            })
    }

    /// The passes a `--pipeline`/`--passes` choice stands for.
    pub fn pipeline_specs(&self, args: &PipelineArgs) -> Result<Vec<PassOptions>, Diagnostic> {
        if let Some(text) = &args.passes {
            return parse_pipeline(text).map_err(Diagnostic::plain);
        }
        let Some(name) = &args.pipeline else {
            return Ok(Vec::new());
        };
        if let Some((_, text)) = PIPELINES.iter().find(|(n, _)| n == name) {
            return parse_pipeline_file(text)
                .map_err(|e| Diagnostic::plain(format!("pipeline '{name}': {e}")));
        }
        let path = PathBuf::from(name);
        if path.is_file() {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| Diagnostic::plain(format!("cannot read {name}: {e}")))?;
            return parse_pipeline_file(&text)
                .map_err(|e| Diagnostic::plain(format!("{name}: {e}")));
        }
        let known: Vec<&str> = PIPELINES.iter().map(|(n, _)| *n).collect();
        Err(Diagnostic::plain(format!(
            "unknown pipeline '{name}' (known: {}; or give a path to a .pipeline file)",
            known.join(", ")
        )))
    }

    /// Runs the pipeline chosen by `args` over `module`.
    fn transform(
        &self,
        module: &mut Module,
        args: &PipelineArgs,
        form: Form,
        stderr: &mut dyn Write,
    ) -> Outcome {
        let specs = self.pipeline_specs(args)?;
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
        };
        let timings = pm.run(module, &self.registry, &options, stderr)?;
        if args.timing {
            let _ = write!(stderr, "{}", timing_table(&timings));
        }
        Ok(())
    }

    fn compile_command(
        &self,
        args: &CompileArgs,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Outcome {
        let file = args
            .file
            .as_deref()
            .ok_or_else(|| Diagnostic::plain("no input file"))?;
        let (mut module, source) =
            self.load_or_fail(file, args.pipeline.allow_unregistered_dialect)?;
        let form = match args.emit {
            Emit::Ir => Form::Pretty,
            Emit::Generic => Form::Generic,
        };
        self.transform(&mut module, &args.pipeline, form, stderr)
            .map_err(|mut f| {
                f.source = Some(source);
                f
            })?;
        let text = print_module(&module, form);
        match &args.output {
            Some(path) => std::fs::write(path, text).map_err(|e| io_err("write", path, e))?,
            None => {
                let _ = stdout.write_all(text.as_bytes());
            }
        }
        Ok(())
    }

    fn run_command(
        &self,
        args: &RunArgs,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Outcome {
        let (mut module, source) =
            self.load_or_fail(&args.file, args.pipeline.allow_unregistered_dialect)?;
        self.transform(&mut module, &args.pipeline, Form::Pretty, stderr)
            .map_err(|mut f| {
                f.source = Some(source.clone());
                f
            })?;
        let func = module.lookup_symbol(&args.entry).ok_or_else(|| {
            Diagnostic::plain(format!(
                "no function '@{}' in {}",
                args.entry,
                args.file.display()
            ))
        })?;
        let names = ircc_reference::input_names(&module, func);
        let inputs = self.read_inputs(&args.inputs, &names)?;
        let mut env = self.weights_env(&module, &args.file)?;
        let outputs = ircc_reference::run_function(
            &module,
            &self.registry,
            &args.entry,
            inputs,
            env.as_mut(),
        )
        .map_err(|d| Failure {
            diagnostics: d.into(),
            source: Some(source),
        })?;
        std::fs::create_dir_all(&args.output_dir)
            .map_err(|e| io_err("create", &args.output_dir, e))?;
        for (name, t) in ircc_reference::output_names(&module, func)
            .iter()
            .zip(&outputs)
        {
            let file: String = name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || "._-".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let path = args.output_dir.join(format!("{file}.npy"));
            ircc_reference::write_npy(&path, t).map_err(Diagnostic::plain)?;
            let _ = writeln!(stdout, "wrote {} ({})", path.display(), t.ty());
        }
        Ok(())
    }

    fn read_inputs(&self, specs: &[String], names: &[String]) -> Result<Vec<Tensor>, Failure> {
        let mut slots: Vec<Option<Tensor>> = vec![None; names.len()];
        let mut next_positional = 0;
        for spec in specs {
            let (index, path) = match spec.split_once('=') {
                Some((name, path)) => {
                    let i = names.iter().position(|n| n == name).ok_or_else(|| {
                        Diagnostic::plain(format!(
                            "no input named '{name}' (inputs: {})",
                            names.join(", ")
                        ))
                    })?;
                    (i, path)
                }
                None => {
                    let i = next_positional;
                    next_positional += 1;
                    (i, spec.as_str())
                }
            };
            if index >= names.len() {
                return Err(Diagnostic::plain(format!(
                    "too many inputs: the function takes {}",
                    names.len()
                ))
                .into());
            }
            slots[index] =
                Some(ircc_reference::read_npy(Path::new(path)).map_err(Diagnostic::plain)?);
        }
        slots
            .into_iter()
            .zip(names)
            .map(|(t, n)| {
                t.ok_or_else(|| {
                    Diagnostic::plain(format!("missing input '{n}' (give --input {n}=PATH.npy)"))
                        .into()
                })
            })
            .collect()
    }

    /// The weights named by the module's `ircc.weights` attribute, relative
    /// to the IR file.
    fn weights_env(
        &self,
        module: &Module,
        file: &Path,
    ) -> Result<Box<dyn ircc_core::interp::Env>, Failure> {
        match module.attrs.get("ircc.weights") {
            None => Ok(Box::new(ircc_core::interp::NoWeights)),
            Some(ircc_core::Attribute::String(rel)) => {
                let base = file.parent().unwrap_or(Path::new("."));
                let w = ircc_reference::SafetensorsWeights::open(&base.join(rel))
                    .map_err(Diagnostic::plain)?;
                Ok(Box::new(w))
            }
            Some(other) => Err(Diagnostic::plain(format!(
                "module attribute ircc.weights must be a string, not {other}"
            ))
            .into()),
        }
    }
}
