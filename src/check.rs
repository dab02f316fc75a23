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
/// the expected one (its largest finite magnitude, at least 1). NaN where
/// one has a NaN the other has not, which every comparison with a
/// tolerance must refuse (`f64::max` would drop it); NaNs in the same
/// places agree.
pub(crate) fn relative_difference(got: &[Tensor], want: &[Tensor]) -> f64 {
    let most = |m: f64, x: f64| if x.is_nan() || x > m { x } else { m };
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            if g.shape() != w.shape() {
                return f64::INFINITY;
            }
            let (g, w) = (g.to_f64(), w.to_f64());
            let scale = w
                .iter()
                .filter(|v| v.is_finite())
                .fold(1.0f64, |m, v| m.max(v.abs()));
            g.iter()
                .zip(w.iter())
                .map(|(a, b)| {
                    if a == b || (a.is_nan() && b.is_nan()) {
                        0.0
                    } else {
                        (a - b).abs() / scale
                    }
                })
                .fold(0.0, most)
        })
        .fold(0.0, most)
}

/// Whether a difference is within tolerance `rtol`: never a NaN one.
pub(crate) fn within(diff: f64, rtol: f64) -> bool {
    diff <= rtol
}

/// What hears of each pass [`Driver::check_passes`] runs: its index, the
/// number of passes, its name, and its difference once checked.
pub(crate) type PassChecked<'a> = dyn FnMut(usize, usize, &str, Option<f64>) + 'a;

impl Driver {
    pub(crate) fn check_command(
        &self,
        args: &CheckArgs,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Outcome {
        let mut bar = None;
        let checked = self.check_passes(args, stderr, &mut |i, total, pass, diff| {
            let bar = bar.get_or_insert_with(|| {
                crate::progress::bar(
                    total as u64,
                    "checking {pos}/{len} passes [{bar:30}] {elapsed} {msg}",
                    args.model.pipeline.quiet,
                )
            });
            let Some(diff) = diff else {
                bar.set_message(pass.to_string());
                return;
            };
            bar.suspend(|| {
                let _ = writeln!(
                    stdout,
                    "{:>2}. {pass:<32} relative difference {diff:.2e}",
                    i + 1
                );
            });
            bar.inc(1);
        });
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        let _ = writeln!(
            stdout,
            "{} passes checked: the results agree within {:.0e}",
            checked?, args.rtol
        );
        Ok(())
    }

    /// Runs the pipeline `args` names a pass at a time, the interpreter
    /// on the same random inputs before and after each; `each(i, passes,
    /// pass, difference)` hears of every pass as it starts (no
    /// difference yet) and once it has been checked. The error names the
    /// first pass that changed the results by more than the tolerance;
    /// else the number of passes checked.
    pub(crate) fn check_passes(
        &self,
        args: &CheckArgs,
        stderr: &mut dyn Write,
        each: &mut PassChecked<'_>,
    ) -> Result<usize, Failure> {
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
        for (i, spec) in specs.iter().enumerate() {
            each(i, specs.len(), &spec.pass, None);
            let mut pm = PassManager::from_specs(&self.passes, std::slice::from_ref(spec))?;
            pm.run(&mut loaded.module, &self.registry, &options, stderr)
                .map_err(|d| Failure {
                    diagnostics: d,
                    source: loaded.source.clone(),
                    closed_pipe: false,
                })?;
            let after = run(self, &loaded)?;
            let diff = relative_difference(&after, &before);
            each(i, specs.len(), &spec.pass, Some(diff));
            if !within(diff, args.rtol) {
                return Err(Diagnostic::plain(format!(
                    "pass '{}' changed the results by {diff:.2e} (tolerance {:.0e})",
                    spec.pass, args.rtol
                ))
                .into());
            }
        }
        Ok(specs.len())
    }
}

#[cfg(test)]
mod tests {
    use super::relative_difference;
    use ircc_core::{ElemType, Tensor};

    fn t(values: &[f64]) -> Vec<Tensor> {
        let data = ndarray::ArrayD::from_shape_vec(vec![values.len()], values.to_vec()).unwrap();
        vec![Tensor::float(ElemType::F32, data)]
    }

    #[test]
    fn a_nan_on_one_side_is_a_difference_no_tolerance_passes() {
        let (nan, inf) = (f64::NAN, f64::INFINITY);
        assert!(relative_difference(&t(&[1.0, nan]), &t(&[1.0, 2.0])).is_nan());
        assert!(relative_difference(&t(&[1.0, 2.0]), &t(&[1.0, nan])).is_nan());
        assert_eq!(relative_difference(&t(&[nan, inf]), &t(&[nan, inf])), 0.0);
        assert_eq!(relative_difference(&t(&[1.0, inf]), &t(&[1.0, 3.0])), inf);
        // The scale is the largest finite magnitude.
        assert_eq!(relative_difference(&t(&[4.5, inf]), &t(&[4.0, inf])), 0.125);
    }
}
