//! The subcommands: compile (the default), run, import, stats.

use std::io::Write;
use std::time::Instant;

use ircc_core::{Diagnostic, Form, print_module};

use crate::figures::{self, graph_op_count};
use crate::inputs::read_inputs;

use crate::{
    CompileArgs, Driver, Emit, Failure, ImportArgs, Outcome, RunArgs, StatsArgs, io_err, is_onnx,
};

/// `onnx` with each of `inputs` (`NAME=PATH`, or a path for the model's
/// inputs in order) bound as `--bind` would bind it.
fn bind_inputs(onnx: &crate::OnnxArgs, inputs: &[String]) -> crate::OnnxArgs {
    let mut onnx = onnx.clone();
    onnx.run_inputs = inputs.to_vec();
    onnx
}

impl Driver {
    pub(crate) fn compile_command(
        &self,
        args: &CompileArgs,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Outcome {
        let file = args
            .file
            .as_deref()
            .ok_or_else(|| Diagnostic::plain("no input file"))?;
        let mut loaded =
            self.load_or_fail(file, &args.onnx, args.pipeline.allow_unregistered_dialect)?;
        let form = match args.emit {
            Emit::Ir | Emit::Dot | Emit::Html | Emit::Wgsl | Emit::Opencl => Form::Pretty,
            Emit::Generic => Form::Generic,
        };
        if let Some(device) = args.emit.device() {
            self.pipeline_lowers(&args.pipeline, &loaded.module, args.emit)?;
            self.transform(
                &mut loaded,
                &args.pipeline,
                Some(&args.kernel),
                None,
                form,
                stderr,
            )?;
            return self.emit_sources(&loaded, device, args.output.as_deref(), stdout);
        }
        // Printing runs the pipeline as written (with its kernel.schedule's
        // own options, where it has one): a kernel option given beside it
        // would change nothing printed.
        let options = [
            args.kernel.precision.map(|p| ("precision", p.name())),
            args.kernel.attention.map(|a| ("attention", a.name())),
        ];
        if let Some((key, value)) = options.into_iter().flatten().next() {
            return Err(Diagnostic::plain(format!(
                "--{key} {value} is an option of the kernels a GPU backend runs (--emit wgsl|opencl, run or bench --backend, compile, stats); printing IR runs the pipeline as written, so give it to the pipeline's own scheduler instead: kernel.schedule{{{key}={value}}} in --passes"
            ))
            .into());
        }
        self.transform(&mut loaded, &args.pipeline, None, None, form, stderr)?;
        if matches!(args.emit, Emit::Ir | Emit::Generic) {
            self.name_weights(&mut loaded, args.output.as_deref())?;
        }
        let text = match args.emit {
            Emit::Dot => crate::dot::to_dot(&loaded.module),
            Emit::Html => crate::html::to_html(
                &loaded.module,
                &format!(
                    "{} ({})",
                    file.display(),
                    args.pipeline.pipeline.as_deref().unwrap_or("no pipeline")
                ),
            ),
            _ => print_module(&loaded.module, form),
        };
        match &args.output {
            // A path named exactly is written where it leads (`-o /dev/stdout`).
            Some(path) => std::fs::write(path, text).map_err(|e| io_err("write", path, e))?,
            None => stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
                .map_err(crate::stdout_err)?,
        }
        Ok(())
    }

    /// Where printed IR finds its weights: written beside `-o FILE.ir`
    /// as FILE.safetensors and named in the module's `ircc.weights`. IR
    /// of an imported model printed to stdout names none (the error for
    /// running it says how to get IR that does).
    fn name_weights(
        &self,
        loaded: &mut crate::Loaded,
        output: Option<&std::path::Path>,
    ) -> Outcome {
        match output {
            Some(path) => {
                let weights_path = path.with_extension("safetensors");
                if weights_path == path {
                    return Err(Diagnostic::plain(format!(
                        "-o {} must name the IR file to write (FILE.ir); its weights go beside it as FILE.safetensors",
                        path.display()
                    ))
                    .into());
                }
                self.place_weights(loaded, &weights_path)
            }
            None => {
                if loaded.weights.is_some() {
                    loaded.module.attrs.shift_remove("ircc.weights");
                }
                Ok(())
            }
        }
    }

    pub(crate) fn run_command(
        &self,
        args: &RunArgs,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Outcome {
        if let Some(seconds) = args.timeout {
            start_watchdog(seconds)?;
        }
        if ircc_plan::bundle::is_bundle(&args.model.file) {
            return self.run_bundle(args, stdout);
        }
        if let (None, Some(p)) = (args.backend.device(), args.kernel.precision) {
            return Err(Diagnostic::plain(format!(
                "--precision {} sets the precision of GPU kernels; the reference backend computes in the graph's own types (use --backend wgpu or opencl)",
                p.name()
            ))
            .into());
        }
        let mut loaded = if is_onnx(&args.model.file) {
            // The inputs given are bound where the model needs a value when
            // compiling, as --bind would.
            let onnx = bind_inputs(&args.model.onnx, &args.inputs);
            self.load_or_fail(
                &args.model.file,
                &onnx,
                args.model.pipeline.allow_unregistered_dialect,
            )?
        } else {
            self.load_model(&args.model)?
        };
        let gpu = args.backend.device().map(|_| &args.kernel);
        self.transform(
            &mut loaded,
            &args.model.pipeline,
            gpu,
            args.backend.device(),
            Form::Pretty,
            stderr,
        )?;
        let module = &loaded.module;
        let func = module.lookup_symbol(&args.entry).ok_or_else(|| {
            Diagnostic::plain(format!(
                "no function '@{}' in {}",
                args.entry,
                args.model.file.display()
            ))
        })?;
        let inputs = read_inputs(&args.inputs, &crate::inputs::params(module, func))?;
        let outputs = match args.backend.device() {
            None => {
                let mut env = self.weights_env(&loaded)?;
                let bar = crate::progress::bar(
                    0,
                    "interpreting {pos}/{len} ops [{bar:30}] {elapsed}",
                    args.model.pipeline.quiet,
                );
                let outputs = ircc_reference::run_function_with_progress(
                    module,
                    &self.registry,
                    &args.entry,
                    inputs,
                    env.as_mut(),
                    &mut |done, total| {
                        bar.set_length(total as u64);
                        bar.set_position(done as u64);
                    },
                );
                bar.finish_and_clear();
                outputs.map_err(|d| Failure {
                    diagnostics: d.into(),
                    source: loaded.source.clone(),
                    closed_pipe: false,
                })?
            }
            Some(device) => {
                crate::gpu::run_lowered(self, &loaded, device, &args.opencl.cl_options, &inputs)?
            }
        };
        let names = ircc_reference::output_names(&loaded.module, func);
        crate::bundle::write_outputs(
            &args.output_dir,
            &names,
            &outputs,
            args.output_format,
            stdout,
        )
    }

    pub(crate) fn import_command(&self, args: &ImportArgs, stdout: &mut dyn Write) -> Outcome {
        if !is_onnx(&args.file) {
            return Err(
                Diagnostic::plain(format!("{} is not an .onnx file", args.file.display())).into(),
            );
        }
        let weights_path = args.output.with_extension("safetensors");
        let names_a_dir =
            args.output.is_dir() || args.output.to_string_lossy().ends_with(['/', '\\']);
        if names_a_dir || args.output.as_os_str().is_empty() {
            return Err(Diagnostic::plain(format!(
                "-o {} must name the IR file to write (MODEL.ir); the weights go beside it as {}",
                args.output.display(),
                weights_path.display()
            ))
            .into());
        }
        let mut loaded = self.load_or_fail(&args.file, &args.onnx, false)?;
        let weights = loaded.weights.get_or_insert_default().len();
        self.name_weights(&mut loaded, Some(&args.output))?;
        ircc_core::files::write_file(&args.output, print_module(&loaded.module, Form::Pretty))
            .map_err(Diagnostic::plain)?;
        let _ = writeln!(
            stdout,
            "wrote {} ({} graph ops) and {} ({} weights)",
            args.output.display(),
            graph_op_count(&loaded.module),
            weights_path.display(),
            weights
        );
        Ok(())
    }

    pub(crate) fn stats_command(
        &self,
        args: &StatsArgs,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Outcome {
        let loaded = self.load_model(&args.model)?;
        if let Some(db) = &args.model.pipeline.tuning_db {
            // Read here, so that a bad database is an error and not a
            // missing dispatch count.
            let target = self.choose_target(&args.model.pipeline, None, &loaded.module)?;
            ircc_passes::tuning::database::TuningDb::read(
                &db.to_string_lossy(),
                &target.profile.name,
            )
            .map_err(Diagnostic::plain)?;
        }
        let graph_ops = figures::graph_op_count(&loaded.module);
        let chosen = args.model.pipeline.pipeline.is_some() || args.model.pipeline.passes.is_some();
        // Without a pipeline, the table compares the three named ones.
        let runs: Vec<(String, crate::PipelineArgs)> = if chosen || args.json {
            vec![(args.model.pipeline.label(), args.model.pipeline.clone())]
        } else {
            ["none", "dnnfusion", "smartmem"]
                .iter()
                .map(|p| {
                    (
                        p.to_string(),
                        crate::PipelineArgs {
                            pipeline: Some(p.to_string()),
                            ..args.model.pipeline.clone()
                        },
                    )
                })
                .collect()
        };
        let mut rows = Vec::new();
        for (name, pipeline) in runs {
            // The import's remarks are made once, with the first pipeline.
            let remarks = rows.is_empty();
            let stats = self.pipeline_stats(&loaded, &pipeline, &args.kernel, remarks, stderr)?;
            rows.push((name, stats));
        }
        if args.json {
            let stats = rows[0].1.to_json(graph_ops, loaded.import_ms);
            let _ = writeln!(stdout, "{stats}");
            return Ok(());
        }
        let _ = writeln!(
            stdout,
            "{}: {graph_ops} graph ops after import ({:.1} ms)",
            args.model.file.display(),
            loaded.import_ms
        );
        let _ = write!(stdout, "{:<22}", "");
        for (name, _) in &rows {
            let _ = write!(stdout, "{name:>16}");
        }
        let _ = writeln!(stdout);
        let line =
            |out: &mut dyn Write, label: &str, f: &dyn Fn(&figures::Traffic, f64) -> String| {
                let _ = write!(out, "{label:<22}");
                for (_, r) in &rows {
                    let _ = write!(out, "{:>16}", f(&r.traffic, r.compile_ms));
                }
                let _ = writeln!(out);
            };
        line(stdout, "kernels", &|t, _| t.kernels.to_string());
        let _ = write!(stdout, "{:<22}", "dispatches");
        for (_, r) in &rows {
            let d = r.dispatches.map_or("-".to_string(), |(d, _)| d.to_string());
            let _ = write!(stdout, "{d:>16}");
        }
        let _ = writeln!(stdout);
        if args.model.pipeline.tuning_db.is_some() {
            let _ = write!(stdout, "{:<22}", "tuned kernels");
            for (_, r) in &rows {
                let t = r.dispatches.map_or("-".to_string(), |(_, t)| t.to_string());
                let _ = write!(stdout, "{t:>16}");
            }
            let _ = writeln!(stdout);
        }
        line(stdout, "bytes moved (MB)", &|t, _| {
            format!("{:.2}", t.bytes_moved as f64 / 1e6)
        });
        line(stdout, "intermediate (MB)", &|t, _| {
            format!("{:.2}", t.intermediate_bytes as f64 / 1e6)
        });
        line(stdout, "compile (ms)", &|_, ms| format!("{ms:.1}"));
        let _ = write!(stdout, "{:<22}", "textures");
        for (_, r) in &rows {
            let _ = write!(stdout, "{:>16}", r.layouts.texture_tensors);
        }
        let _ = writeln!(stdout);
        let _ = write!(stdout, "{:<22}", "peak memory (MB)");
        for (_, r) in &rows {
            let peak = r
                .layouts
                .peak_bytes
                .map_or("-".to_string(), |b| format!("{:.2}", b as f64 / 1e6));
            let _ = write!(stdout, "{peak:>16}");
        }
        let _ = writeln!(stdout);
        Ok(())
    }
}

/// What `ircc stats` reports of one pipeline run over a model.
pub(crate) struct PipelineStats {
    traffic: figures::Traffic,
    layouts: figures::Layouts,
    addresses: Option<serde_json::Value>,
    /// Dispatches and tuned kernels, where the module lowers.
    dispatches: Option<(usize, usize)>,
    target: ircc_dialects::kernel::ModuleTarget,
    /// Import and pipeline, in milliseconds.
    compile_ms: f64,
}

impl PipelineStats {
    /// `ircc stats --json`'s object, `graph_ops` being the model's
    /// before the pipeline.
    pub(crate) fn to_json(&self, graph_ops: usize, import_ms: f64) -> serde_json::Value {
        let (t, l) = (&self.traffic, &self.layouts);
        let mut stats = serde_json::json!({
            "graph_ops": graph_ops,
            "kernels": t.kernels,
            "dispatches": self.dispatches.map(|(d, _)| d),
            "tuned_kernels": self.dispatches.map(|(_, t)| t),
            "bytes_moved": t.bytes_moved,
            "intermediate_bytes": t.intermediate_bytes,
            "import_ms": import_ms,
            "compile_ms": self.compile_ms,
            "layout_cost": l.layout_cost,
            "layout_cost_pbqp": l.layout_cost_pbqp,
            "copies": l.copies,
            "texture_tensors": l.texture_tensors,
            "peak_bytes": l.peak_bytes,
            "pooled_bytes": l.pooled_bytes,
            "memory_intermediate_bytes": l.intermediate_bytes,
            "copy_bytes": l.copy_bytes,
            "target": {
                "device": self.target.profile.name,
                "reason": self.target.reason,
            },
        });
        if let Some(a) = &self.addresses {
            stats["addresses"] = a.clone();
        }
        stats
    }
}

impl Driver {
    /// Runs `pipeline` over a copy of `loaded` (at the graph level, unless
    /// the pipeline lowers itself) and measures the result; `kernel` sets
    /// the schedules of the dispatches counted. With `remarks`, the
    /// import's remarks are printed to `stderr`.
    pub(crate) fn pipeline_stats(
        &self,
        loaded: &crate::Loaded,
        pipeline: &crate::PipelineArgs,
        kernel: &crate::KernelArgs,
        remarks: bool,
        stderr: &mut dyn Write,
    ) -> Result<PipelineStats, Failure> {
        let start = Instant::now();
        let mut run = loaded.copy_without_weights();
        if remarks {
            run.bound = loaded.bound.clone();
            run.remarks = loaded.remarks.clone();
        }
        // The database is the schedule's: the pipeline's where it
        // schedules, else the one the dispatch count runs.
        let schedules = self
            .pipeline_specs(&crate::PipelineArgs {
                tuning_db: None,
                ..pipeline.clone()
            })?
            .iter()
            .any(|s| s.pass == ircc_passes::decl::KernelScheduleOptions::NAME);
        let graph_level = crate::PipelineArgs {
            tuning_db: pipeline.tuning_db.clone().filter(|_| schedules),
            ..pipeline.clone()
        };
        self.transform(&mut run, &graph_level, None, None, Form::Pretty, stderr)?;
        let compile_ms = loaded.import_ms + start.elapsed().as_secs_f64() * 1e3;
        let dispatches = if schedules && (kernel.precision.is_some() || kernel.attention.is_some())
        {
            // The pipeline schedules at the graph level without the
            // kernel options: its kernels are counted as a command that
            // lowers makes them.
            let mut lowered = loaded.copy_without_weights();
            let sink = &mut std::io::sink();
            self.transform(
                &mut lowered,
                pipeline,
                Some(kernel),
                None,
                Form::Pretty,
                sink,
            )?;
            self.dispatches(&lowered.module, pipeline, kernel)
        } else {
            self.dispatches(&run.module, pipeline, kernel)
        };
        Ok(PipelineStats {
            compile_ms,
            dispatches,
            target: self.choose_target(pipeline, None, &run.module)?,
            traffic: figures::traffic(&run.module),
            layouts: figures::layouts(&run.module),
            addresses: figures::addresses(&run.module),
        })
    }
}

/// Ends the process with an error once `seconds` have passed (`ircc run
/// --timeout`): a run on a device cannot be interrupted from the host, so
/// the process that submitted it ends.
fn start_watchdog(seconds: f64) -> Result<(), Failure> {
    let limit = std::time::Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            Diagnostic::plain(format!(
                "--timeout {seconds}: not a positive number of seconds"
            ))
        })?;
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        // Written past std's stderr, whose lock the command holds, and
        // ended by _exit, not std::process::exit: that runs the exit
        // handlers, and a driver's may wait for the very work that
        // overran (lavapipe's threads, mid-dispatch).
        let message =
            format!("error: the command ran longer than --timeout {seconds} s, and was stopped\n");
        // SAFETY: write(2) reads `message`'s bytes, alive for the call;
        // _exit ends the process at once, and nothing after it runs.
        unsafe {
            libc::write(2, message.as_ptr().cast(), message.len());
            libc::_exit(1)
        }
    });
    Ok(())
}
