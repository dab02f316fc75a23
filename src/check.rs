//! `ircc check`: differential testing of a pipeline, pass by pass. The
//! module runs through the interpreter on seeded random inputs before the
//! first pass and after each one; the first pass whose results move beyond
//! the tolerance is named.

use std::io::Write;

use ircc_core::pass::{PassManager, RunOptions};
use ircc_core::verify::VerifyOptions;
use ircc_core::{Diagnostic, Form, Tensor};

use crate::inputs::random_inputs;
use crate::{CheckArgs, Driver, Failure, Loaded, Outcome};

/// The largest difference between two results, relative to the scale of
/// the expected one (its largest magnitude, at least 1); NaN where either
/// has a NaN, which `f64::max` would drop.
pub(crate) fn relative_difference(got: &[Tensor], want: &[Tensor]) -> f64 {
    let most = |m: f64, x: f64| if x.is_nan() || x > m { x } else { m };
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            if g.shape() != w.shape() {
                return f64::INFINITY;
            }
            let (g, w) = (g.to_f64(), w.to_f64());
            let scale = w.iter().fold(1.0f64, |m, v| most(m, v.abs()));
            g.iter()
                .zip(w.iter())
                .map(|(a, b)| if a == b { 0.0 } else { (a - b).abs() / scale })
                .fold(0.0, most)
        })
        .fold(0.0, most)
}

impl Driver {
    pub(crate) fn check_command(
        &self,
        args: &CheckArgs,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Outcome {
        let mut loaded = self.load_model(&args.model)?;
        let inputs = random_inputs(&loaded.module, args.seed)?;
        let run = |driver: &Driver, loaded: &Loaded| -> Result<Vec<Tensor>, Failure> {
            let mut env = driver.weights_env(loaded)?;
            ircc_reference::run_function(
                &loaded.module,
                &driver.registry,
                "main",
                inputs.clone(),
                env.as_mut(),
            )
            .map_err(|d| Failure {
                diagnostics: d.into(),
                source: loaded.source.clone(),
                closed_pipe: false,
            })
        };
        let before = run(self, &loaded)?;
        let specs = self.pipeline_specs(&args.model.pipeline)?;
        if specs
            .iter()
            .any(|s| ircc_passes::READS_TARGET.contains(&s.pass.as_str()))
        {
            self.attach_target(&args.model.pipeline, None, &mut loaded.module, stderr)?;
        }
        let options = RunOptions {
            verify_each: true,
            verify: VerifyOptions {
                allow_unregistered: args.model.pipeline.allow_unregistered_dialect,
            },
            form: Form::Pretty,
            ..RunOptions::default()
        };
        let bar = crate::progress::bar(
            specs.len() as u64,
            "checking {pos}/{len} passes [{bar:30}] {elapsed} {msg}",
            args.model.pipeline.quiet,
        );
        for (i, spec) in specs.iter().enumerate() {
            bar.set_message(spec.pass.clone());
            let mut pm = PassManager::from_specs(&self.passes, std::slice::from_ref(spec))?;
            pm.run(&mut loaded.module, &self.registry, &options, stderr)
                .map_err(|d| Failure {
                    diagnostics: d,
                    source: loaded.source.clone(),
                    closed_pipe: false,
                })?;
            let after = run(self, &loaded)?;
            let diff = relative_difference(&after, &before);
            bar.suspend(|| {
                let _ = writeln!(
                    stdout,
                    "{:>2}. {:<32} relative difference {diff:.2e}",
                    i + 1,
                    spec.pass
                );
            });
            bar.inc(1);
            if diff > args.rtol {
                return Err(Diagnostic::plain(format!(
                    "pass '{}' changed the results by {diff:.2e} (tolerance {:.0e})",
                    spec.pass, args.rtol
                ))
                .into());
            }
        }
        bar.finish_and_clear();
        let _ = writeln!(
            stdout,
            "{} passes checked: the results agree within {:.0e}",
            specs.len(),
            args.rtol
        );
        Ok(())
    }
}
