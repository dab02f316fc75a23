//! Bundles (`spec/plan.md`): `ircc compile MODEL -o DIR` writes one (as
//! `--emit wgsl|opencl -o DIR` does), and `ircc run DIR` runs one on the
//! device its sources are for.

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;

use clap::CommandFactory;
use clap::parser::ValueSource;
use ircc_core::{Diagnostic, Form};
use ircc_plan::Language;
use ircc_plan::bundle::{self, Bundle};

use crate::gpu::{Session, plain};
use crate::inputs::read_inputs;

use crate::{
    Backend, BenchArgs, BundleArgs, Cli, DeviceBackend, Driver, Outcome, OutputFormat, RunArgs,
    io_err,
};

/// The options of `ircc run` and `ircc bench` a bundle takes: everything
/// else was decided when it was compiled.
const BUNDLE_OPTIONS: &[(&str, &[&str])] = &[
    (
        "run",
        &[
            "file",
            "inputs",
            "output_dir",
            "output_format",
            "backend",
            "cl_options",
            "timing",
            "quiet",
            "max_invocations",
            "max_bytes",
            "max_source_bytes",
            "timeout",
        ],
    ),
    (
        "bench",
        &[
            "file",
            "inputs",
            "backend",
            "cl_options",
            "runs",
            "warmup",
            "json",
            "roofline",
            "timing",
            "quiet",
            "max_invocations",
            "max_bytes",
            "max_source_bytes",
        ],
    ),
];

/// The error for an `ircc run DIR` or `ircc bench DIR` command line that
/// gives a bundle an option it cannot take (a pipeline, a precision:
/// compiling options), or `ircc run` a reference backend; `None` where
/// the command is not given a bundle or is fine.
pub(crate) fn misapplied_option(args: &[OsString]) -> Option<String> {
    let matches = Cli::command().try_get_matches_from(args).ok()?;
    let (name, sub) = matches.subcommand()?;
    let (_, allowed) = BUNDLE_OPTIONS.iter().find(|(n, _)| *n == name)?;
    let dir = sub.try_get_one::<std::path::PathBuf>("file").ok()??;
    if !bundle::is_bundle(dir) {
        return None;
    }
    let command = Cli::command();
    let subcommand = command.find_subcommand(name)?;
    if name == "run"
        && sub.value_source("backend") == Some(ValueSource::CommandLine)
        && sub.get_one::<Backend>("backend") == Some(&Backend::Reference)
    {
        return Some(format!(
            "--backend reference does not apply to a bundle: {} holds kernels for a GPU",
            dir.display()
        ));
    }
    for id in sub.ids() {
        let id = id.as_str();
        if sub.value_source(id) != Some(ValueSource::CommandLine) || allowed.contains(&id) {
            continue;
        }
        // Ids without an argument are the groups of flattened options.
        let Some(long) = subcommand
            .get_arguments()
            .find(|a| a.get_id() == id)
            .and_then(|a| a.get_long())
        else {
            continue;
        };
        let takes: Vec<String> = allowed
            .iter()
            .filter_map(|&a| subcommand.get_arguments().find(|x| x.get_id() == a))
            .filter_map(|a| a.get_long())
            .map(|l| format!("--{l}"))
            .collect();
        return Some(format!(
            "--{long} does not apply to a bundle: {} was compiled when it was written (options a bundle takes: {})",
            dir.display(),
            takes.join(", ")
        ));
    }
    None
}

impl Driver {
    /// `ircc compile MODEL -o DIR`: the bundle of the model compiled with
    /// the pipeline, for the backend's runtime.
    pub(crate) fn bundle_command(
        &self,
        args: &BundleArgs,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Outcome {
        let mut loaded = self.load_model(&args.model)?;
        let pipeline = &args.model.pipeline;
        self.transform(
            &mut loaded,
            pipeline,
            Some(&args.kernel),
            None,
            Form::Pretty,
            stderr,
        )?;
        let device = args.backend.device();
        self.emit_sources(&loaded, device, Some(&args.output), stdout)
    }

    /// Runs the bundle in `args.model.file` on its inputs and writes its
    /// outputs as `ircc run` does.
    pub(crate) fn run_bundle(&self, args: &RunArgs, stdout: &mut dyn Write) -> Outcome {
        let dir = &args.model.file;
        let bundle = self.phase("read the bundle", || open(dir, &Bounds::of(&args.bounds)))?;
        // --backend reference was refused with the command line; the
        // default (reference) means the bundle's own device.
        let asked = match args.backend {
            Backend::Reference => None,
            Backend::Wgpu => Some(DeviceBackend::Wgpu),
            Backend::Opencl => Some(DeviceBackend::Opencl),
        };
        check_backend(&bundle, dir, asked, &args.opencl.cl_options)?;
        let inputs = read_inputs(&args.inputs, &input_types(&bundle)?)?;
        let output_names = bundle.plan.output_names.clone();
        let outputs = self.phase("GPU setup and run", || {
            session(bundle, &args.opencl.cl_options).and_then(|mut s| s.run(&inputs).map_err(plain))
        })?;
        write_outputs(
            &args.output_dir,
            &output_names,
            &outputs,
            args.output_format,
            stdout,
        )
    }

    /// Times the bundle in `args.model.file` on its inputs (seeded random
    /// ones where none are given) as `ircc bench` times a model: the
    /// kernels as they were compiled, per kernel where the adapter times
    /// them.
    pub(crate) fn bench_bundle(
        &self,
        args: &BenchArgs,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Outcome {
        let dir = &args.model.file;
        let bundle = self.phase("read the bundle", || open(dir, &Bounds::of(&args.bounds)))?;
        check_backend(&bundle, dir, args.backend, &args.opencl.cl_options)?;
        let types = input_types(&bundle)?;
        let inputs = if args.inputs.is_empty() {
            let types: Vec<_> = types.into_iter().map(|(_, t)| t).collect();
            crate::inputs::random_tensors(&types, 0)
        } else {
            read_inputs(&args.inputs, &types)?
        };
        let precision = bundle.plan.precision.clone();
        let mut session = self.phase("GPU setup", || session(bundle, &args.opencl.cl_options))?;
        let measured = self.phase("GPU runs (warm-up and timed)", || {
            crate::gpu::bench(
                &mut session,
                None,
                &inputs,
                args.warmup,
                args.runs,
                &mut |_, _| {},
            )
        })?;
        crate::gpu::print_bench(args, measured, ("bundle", &precision), stdout, stderr);
        Ok(())
    }
}

/// Refuses a backend `asked` for other than the one `bundle`'s sources
/// are for, and OpenCL options for WGSL sources.
fn check_backend(
    bundle: &Bundle,
    dir: &Path,
    asked: Option<DeviceBackend>,
    cl_options: &str,
) -> Result<(), crate::Failure> {
    let language = bundle.language;
    let expected = match language {
        Language::Wgsl => DeviceBackend::Wgpu,
        Language::Opencl => DeviceBackend::Opencl,
    };
    if asked.is_some_and(|b| b != expected) {
        return Err(plain(format!(
            "bundle {} holds {language} sources, which run on --backend {}",
            dir.display(),
            if expected == DeviceBackend::Wgpu {
                "wgpu"
            } else {
                "opencl"
            }
        )));
    }
    if language == Language::Wgsl && !cl_options.is_empty() {
        return Err(plain(format!(
            "--cl-options does not apply: bundle {} holds WGSL sources",
            dir.display()
        )));
    }
    Ok(())
}

/// The name and type of each of `bundle`'s inputs, in order.
fn input_types(bundle: &Bundle) -> Result<Vec<(String, ircc_core::TensorType)>, crate::Failure> {
    bundle
        .plan
        .inputs
        .iter()
        .map(|&id| {
            let b = &bundle.plan.buffers[id];
            let elem = ircc_core::ElemType::from_name(&b.elem).ok_or_else(|| {
                plain(format!(
                    "input '{}' has no element type '{}'",
                    b.name, b.elem
                ))
            })?;
            Ok((
                b.name.clone(),
                ircc_core::TensorType::new(b.shape.clone(), elem),
            ))
        })
        .collect()
}

/// The bounds `ircc run` holds a bundle to before it sets anything up
/// (its `--max-*` options).
pub(crate) struct Bounds {
    pub(crate) max_source_bytes: u64,
    pub(crate) max_invocations: u64,
    pub(crate) max_bytes: u64,
}

impl Bounds {
    /// The bounds a command line gives.
    pub(crate) fn of(args: &crate::BundleBoundsArgs) -> Bounds {
        Bounds {
            max_source_bytes: args.max_source_bytes,
            max_invocations: args.max_invocations,
            max_bytes: args.max_bytes,
        }
    }

    /// The command line's defaults.
    pub(crate) const DEFAULT: Bounds = Bounds {
        max_source_bytes: 16 << 20,
        max_invocations: 1 << 34,
        max_bytes: 16 << 30,
    };
}

/// Reads the bundle in `dir` and checks it against `bounds`.
pub(crate) fn open(dir: &Path, bounds: &Bounds) -> Result<Bundle, crate::Failure> {
    let bundle = bundle::read(dir, bounds.max_source_bytes)
        .map_err(|e| plain(format!("bundle {}: {e}", dir.display())))?;
    let (invocations, bytes) = (bundle.plan.invocations(), bundle.plan.device_bytes());
    if invocations > u128::from(bounds.max_invocations) {
        return Err(plain(format!(
            "bundle {}: its dispatches run {invocations} invocations a run, more than --max-invocations {} (raise it to run the bundle)",
            dir.display(),
            bounds.max_invocations
        )));
    }
    if bytes > u128::from(bounds.max_bytes) {
        return Err(plain(format!(
            "bundle {}: its buffers take {bytes} bytes, more than --max-bytes {} (raise it to run the bundle)",
            dir.display(),
            bounds.max_bytes
        )));
    }
    Ok(bundle)
}

/// Sets `bundle` up on the device its sources are for; `cl_options` go to
/// the OpenCL compiler.
#[cfg_attr(
    not(all(feature = "wgpu", feature = "opencl")),
    allow(unused_variables)
)]
pub(crate) fn session(bundle: Bundle, cl_options: &str) -> Result<Session, crate::Failure> {
    match bundle.language {
        #[cfg(feature = "wgpu")]
        Language::Wgsl => ircc_wgsl::Session::from_bundle(bundle).map(Session::Wgpu),
        #[cfg(feature = "opencl")]
        Language::Opencl => {
            let Bundle {
                plan,
                weights,
                output_elems,
                ..
            } = bundle;
            let weight = |name: &str| bundle::weight_named(&weights, name);
            ircc_opencl::Session::new(plan, output_elems, &weight, cl_options).map(Session::OpenCl)
        }
        #[allow(unreachable_patterns)]
        other => Err(format!(
            "this ircc was built without the runtime that runs {other}"
        )),
    }
    .map_err(plain)
}

/// The file `--output-format safetensors` writes the outputs to.
pub(crate) const OUTPUTS_FILE: &str = "outputs.safetensors";

/// Writes each output in its own type, as `DIR/NAME.npy` or all in
/// `DIR/outputs.safetensors` by name, and says so on `stdout`.
pub(crate) fn write_outputs(
    dir: &Path,
    names: &[String],
    outputs: &[ircc_core::Tensor],
    format: OutputFormat,
    stdout: &mut dyn Write,
) -> Outcome {
    std::fs::create_dir_all(dir).map_err(|e| io_err("create", dir, e))?;
    let stems = ircc_core::files::unique_stems(names.iter().map(String::as_str));
    if format == OutputFormat::Safetensors {
        let path = dir.join(OUTPUTS_FILE);
        // A result returned twice is stored twice, under names as the
        // .npy files are named.
        let stored: Vec<_> = stems
            .iter()
            .zip(outputs)
            .map(|(n, t)| (n.clone(), ircc_core::StoredTensor::from_tensor(t)))
            .collect();
        ircc_reference::write_safetensors(&path, &stored).map_err(Diagnostic::plain)?;
        let what: Vec<String> = stems
            .iter()
            .zip(outputs)
            .map(|(n, t)| format!("'{n}' {}", t.ty()))
            .collect();
        let _ = writeln!(stdout, "wrote {} ({})", path.display(), what.join(", "));
        return Ok(());
    }
    for ((name, stem), t) in names.iter().zip(&stems).zip(outputs) {
        let path = dir.join(format!("{stem}.npy"));
        ircc_reference::write_npy(&path, t).map_err(Diagnostic::plain)?;
        let renamed = if stem == name {
            String::new()
        } else {
            format!(", output '{name}'")
        };
        let _ = writeln!(stdout, "wrote {} ({}{renamed})", path.display(), t.ty());
    }
    Ok(())
}
