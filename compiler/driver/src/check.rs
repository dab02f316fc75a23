//! `ircc check`: differential testing of a pipeline, pass by pass. The
//! module runs through the interpreter on seeded random inputs before the
//! first pass and after each one; the first pass whose results move beyond
//! the tolerance is named.

use std::io::Write;

use ircc_core::pass::{PassManager, RunOptions};
use ircc_core::verify::VerifyOptions;
use ircc_core::{Diagnostic, ElemType, Form, Module, Tensor, Type};
use ndarray::{ArrayD, IxDyn};

use crate::{CheckArgs, Driver, Failure, Loaded, Outcome};

/// Seeded inputs: floats in [-1, 1), integers in [0, 4), random booleans.
pub(crate) fn random_inputs(module: &Module, seed: u64) -> Result<Vec<Tensor>, Diagnostic> {
    let f = module
        .lookup_symbol("main")
        .ok_or_else(|| Diagnostic::plain("no function '@main'"))?;
    let entry = module
        .entry_block(f)
        .ok_or_else(|| Diagnostic::plain("'@main' has no body"))?;
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    module.blocks[entry]
        .args
        .iter()
        .map(|&a| {
            let Type::Tensor(t) = module.value_type(a) else {
                return Err(Diagnostic::plain("check needs tensor inputs"));
            };
            let shape = IxDyn(&t.shape.iter().map(|&d| d as usize).collect::<Vec<_>>());
            let n = t.num_elements() as usize;
            Ok(match t.elem {
                e if e.is_float() => Tensor::float(
                    e,
                    ArrayD::from_shape_vec(shape, (0..n).map(|_| next() * 2.0 - 1.0).collect())
                        .expect("sized"),
                ),
                ElemType::I1 => Tensor::bool(
                    ArrayD::from_shape_vec(shape, (0..n).map(|_| next() < 0.5).collect())
                        .expect("sized"),
                ),
                e => Tensor::int(
                    e,
                    ArrayD::from_shape_vec(shape, (0..n).map(|_| (next() * 4.0) as i64).collect())
                        .expect("sized"),
                ),
            })
        })
        .collect()
}

/// The largest difference between two results, relative to the scale of
/// the expected one (its largest magnitude, at least 1).
pub(crate) fn relative_difference(got: &[Tensor], want: &[Tensor]) -> f64 {
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            if g.shape() != w.shape() {
                return f64::INFINITY;
            }
            let (g, w) = (g.to_f64(), w.to_f64());
            let scale = w.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            g.iter()
                .zip(w.iter())
                .map(|(a, b)| if a == b { 0.0 } else { (a - b).abs() / scale })
                .fold(0.0, f64::max)
        })
        .fold(0.0, f64::max)
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
            })
        };
        let before = run(self, &loaded)?;
        let specs = self.pipeline_specs(&args.model.pipeline)?;
        let options = RunOptions {
            verify_each: true,
            verify: VerifyOptions {
                allow_unregistered: args.model.pipeline.allow_unregistered_dialect,
            },
            form: Form::Pretty,
            ..RunOptions::default()
        };
        for (i, spec) in specs.iter().enumerate() {
            let mut pm = PassManager::from_specs(&self.passes, std::slice::from_ref(spec))?;
            pm.run(&mut loaded.module, &self.registry, &options, stderr)
                .map_err(|d| Failure {
                    diagnostics: d,
                    source: loaded.source.clone(),
                })?;
            let after = run(self, &loaded)?;
            let diff = relative_difference(&after, &before);
            let _ = writeln!(
                stdout,
                "{:>2}. {:<32} relative difference {diff:.2e}",
                i + 1,
                spec.pass
            );
            if diff > args.rtol {
                return Err(Diagnostic::plain(format!(
                    "pass '{}' changed the results by {diff:.2e} (tolerance {:.0e})",
                    spec.pass, args.rtol
                ))
                .into());
            }
        }
        let _ = writeln!(
            stdout,
            "{} passes checked: the results agree within {:.0e}",
            specs.len(),
            args.rtol
        );
        Ok(())
    }
}
