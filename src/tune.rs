//! `ircc tune`: each matrix product's template parameters searched on the
//! GPU, the fastest per kernel signature recorded in a tuning database.
//!
//! A trial times the whole model once lowered: every tunable signature
//! takes its search's next candidate, and a kernel's time (per product,
//! its partial-sum kernel included) is charged to its signature, so one
//! compile and one timed run measure a candidate of every signature.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Write;
use std::rc::Rc;
#[cfg(feature = "wgpu")]
use std::time::Instant;

use ircc_core::Module;
use ircc_core::pass::{PassManager, PassOptions, PassRegistry, RunOptions};
use ircc_dialects::kernel::{DeviceProfile, Target};
use ircc_passes::conversion::graph_to_kernel::KernelLower;
use ircc_passes::decl::KernelLowerOptions;
#[cfg(feature = "wgpu")]
use ircc_passes::tuning::database::Entry;
use ircc_passes::tuning::database::TuningDb;
#[cfg(feature = "wgpu")]
use ircc_passes::tuning::search::{Search, Strategy};
use ircc_passes::tuning::space::{MatmulConfig, TuningSpec};
use ircc_passes::tuning::{SharedTuning, SpaceReport, Tunable, Tuning, space_of};

#[cfg(feature = "wgpu")]
use crate::cli::SearchKind;
use crate::cli::TuneArgs;
use crate::gpu::plain;
use crate::{Driver, Failure, Outcome};

/// The module after the pipeline's passes before `kernel.lower`, and
/// what lowers it again for each trial with the trial's table.
struct Lowerer {
    base: Module,
    specs: Vec<PassOptions>,
    passes: PassRegistry,
    tuning: SharedTuning,
}

impl Lowerer {
    /// The module lowered with `table`, and the tunable signatures met.
    fn lower(
        &self,
        driver: &Driver,
        table: BTreeMap<String, MatmulConfig>,
    ) -> Result<(Module, BTreeMap<String, Tunable>), Failure> {
        {
            let mut t = self.tuning.borrow_mut();
            t.table = table;
            t.seen.clear();
        }
        let mut m = self.base.clone();
        let mut pm = PassManager::from_specs(&self.passes, &self.specs)?;
        pm.run(
            &mut m,
            &driver.registry,
            &RunOptions::default(),
            &mut std::io::sink(),
        )?;
        let seen = std::mem::take(&mut self.tuning.borrow_mut().seen);
        Ok((m, seen))
    }
}

#[cfg(feature = "wgpu")]
/// A stable seed per signature, so adding a kernel to a model does not
/// change the other signatures' trials (FNV-1a).
fn seed_of(seed: u64, key: &str) -> u64 {
    key.bytes().fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Driver {
    pub(crate) fn tune_command(
        &self,
        args: &TuneArgs,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Outcome {
        let pipeline = &args.model.pipeline;
        let device = pipeline.device_profile().ok_or_else(|| {
            plain("ircc tune needs --device NAME: the profile whose GPU it tunes for (ircc --list-devices), which names the database's entries")
        })?;
        let profile = DeviceProfile::named(&device).map_err(|e| plain(format!("--device: {e}")))?;
        let db_path = pipeline.tuning_db.as_ref().ok_or_else(|| {
            plain("ircc tune needs --tuning-db PATH: the database it writes the fastest parameters to (merged into it where it exists)")
        })?;
        let db_text = db_path.to_string_lossy().into_owned();
        let existing = if db_path.exists() {
            TuningDb::read(&db_text, &profile.name).map_err(plain)?
        } else {
            TuningDb::new(&profile.name)
        };
        // Found out now, not after the search: where the database goes.
        let folder = match db_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => std::path::Path::new("."),
        };
        let readonly = std::fs::metadata(db_path).is_ok_and(|m| m.permissions().readonly());
        if !folder.is_dir() || readonly {
            return Err(plain(format!(
                "--tuning-db {db_text}: not a writable file in an existing folder"
            )));
        }
        if args.budget == 0 || args.runs == 0 {
            return Err(plain("--budget and --runs must be at least 1"));
        }
        let mut loaded = self.load_model(&args.model)?;
        let lowerer = self.lowerer(&mut loaded, args)?;
        let (_, seen) = lowerer.lower(self, BTreeMap::new())?;
        if seen.is_empty() {
            return Err(plain(
                "the model has no matrix product to tune (matmul, gemm or a one-group convolution)",
            ));
        }
        let spec = tuning_spec(&args.model.pipeline)?;
        let spaces: BTreeMap<&String, SpaceReport> = seen
            .iter()
            .map(|(k, t)| (k, space_of(&spec, &t.facts, &profile, Target::webgpu())))
            .collect();
        if args.space_only {
            report_spaces(&spaces, &seen, args.json, stdout);
            return Ok(());
        }
        if !args.json {
            report_spaces(&spaces, &seen, false, stdout);
        }
        self.search(
            args, &loaded, &lowerer, &seen, &spaces, existing, &spec, stdout, stderr,
        )
    }

    /// Runs the pipeline up to `kernel.lower` on `loaded`, and returns
    /// what lowers the result for a trial.
    fn lowerer(&self, loaded: &mut crate::Loaded, args: &TuneArgs) -> Result<Lowerer, Failure> {
        let mut pipeline = args.model.pipeline.clone();
        pipeline.tuning_db = None;
        let specs = self.device_pipeline_specs(&pipeline, Some((&args.kernel, &loaded.module)))?;
        let at = specs
            .iter()
            .position(|s| s.pass == KernelLowerOptions::NAME)
            .ok_or_else(|| plain("the module is kernel IR already: tune its graph-level form"))?;
        let mut before = PassManager::from_specs(&self.passes, &specs[..at])?;
        before
            .run(
                &mut loaded.module,
                &self.registry,
                &RunOptions::default(),
                &mut std::io::sink(),
            )
            .map_err(|d| Failure {
                diagnostics: d,
                source: loaded.source.clone(),
                closed_pipe: false,
            })?;
        let tuning: SharedTuning = Rc::new(RefCell::new(Tuning {
            source: "ircc tune".into(),
            ..Default::default()
        }));
        let mut passes = self.passes.clone();
        let shared = tuning.clone();
        passes.register_decl(&KernelLowerOptions::DECL, move |o| {
            Ok(Box::new(KernelLower::tuned_by(
                KernelLowerOptions::parse(o)?,
                shared.clone(),
            )))
        });
        Ok(Lowerer {
            base: loaded.module.clone(),
            specs: specs[at..].to_vec(),
            passes,
            tuning,
        })
    }

    #[allow(clippy::too_many_arguments)]
    #[cfg(feature = "wgpu")]
    fn search(
        &self,
        args: &TuneArgs,
        loaded: &crate::Loaded,
        lowerer: &Lowerer,
        seen: &BTreeMap<String, Tunable>,
        spaces: &BTreeMap<&String, SpaceReport>,
        mut db: TuningDb,
        spec: &TuningSpec,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Outcome {
        let start = Instant::now();
        let strategy = match args.search {
            SearchKind::Genetic => Strategy::Genetic,
            SearchKind::Random => Strategy::Random,
        };
        let mut searches: BTreeMap<String, Search> = seen
            .iter()
            .map(|(key, t)| {
                let report = &spaces[key];
                let space = if args.no_prune {
                    report.valid.clone()
                } else {
                    report.kept.clone()
                };
                let search = Search::new(
                    strategy,
                    spec.search.clone(),
                    space,
                    t.default,
                    seed_of(args.seed, key),
                );
                (key.clone(), search)
            })
            .collect();
        let f16 = args.kernel.precision.is_some_and(|p| p.name() == "f16");
        let gpu = std::sync::Arc::new(ircc_wgsl::Gpu::open(f16).map_err(plain)?);
        let mut trial = Trial {
            driver: self,
            loaded,
            lowerer,
            gpu,
            profile: args.model.pipeline.device_profile(),
            runs: args.runs,
            inputs: None,
            reference: None,
            // The precision's rounding, summed in another order.
            tolerance: if f16 { 1e-2 } else { 1e-4 },
        };
        let bar = crate::progress::bar(
            args.budget as u64,
            "tuning {pos}/{len} trials per kernel [{bar:30}] {elapsed} {msg}",
            args.json || args.model.pipeline.quiet,
        );
        let mut default_us: BTreeMap<String, f64> = BTreeMap::new();
        // The products' time with the best point found so far, after each
        // trial: Romou's Fig. 18, the search's progress.
        let mut best_by_trial = Vec::new();
        for round in 0..args.budget {
            let table: BTreeMap<String, MatmulConfig> = searches
                .iter_mut()
                .filter_map(|(k, s)| Some((k.clone(), s.propose()?)))
                .collect();
            if table.is_empty() {
                break;
            }
            let times = trial.time(table.clone())?;
            for (key, config) in &table {
                let Some(&us) = times.get(key) else {
                    continue;
                };
                if round == 0 {
                    default_us.insert(key.clone(), us);
                }
                searches
                    .get_mut(key)
                    .expect("a search per key")
                    .report(*config, us);
            }
            let (before, best): (f64, f64) = searches
                .iter()
                .filter_map(|(k, s)| Some((default_us.get(k)?, s.best()?.1, seen[k].instances)))
                .fold((0.0, 0.0), |(a, b), (d, t, n)| {
                    (a + d * n as f64, b + t * n as f64)
                });
            best_by_trial.push(best);
            bar.set_message(format!(
                "{} kernels, products {:.3} ms -> {:.3} ms",
                searches.len(),
                before / 1e3,
                best / 1e3
            ));
            bar.inc(1);
        }
        bar.finish_and_clear();
        let search_s = start.elapsed().as_secs_f64();
        let mut found = TuningDb::new(&db.device);
        for (key, s) in &searches {
            let (Some((best, best_us)), Some(&default)) = (s.best(), default_us.get(key)) else {
                continue;
            };
            let (config, us) = if best_us < default * (1.0 - spec.search.min_gain) {
                (best, best_us)
            } else {
                (seen[key].default, default)
            };
            found.entries.insert(
                key.clone(),
                Entry {
                    config,
                    median_us: us,
                    default_us: default,
                    trials: s.trials() as u64,
                },
            );
        }
        db.merge(&found);
        let path = args
            .model
            .pipeline
            .tuning_db
            .as_ref()
            .expect("checked above");
        std::fs::write(path, db.to_text())
            .map_err(|e| plain(format!("{}: {e}", path.display())))?;
        // The model untuned and tuned, timed alternately in one session.
        let tuned = db.table();
        let (mut untuned_ms, mut tuned_ms) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            untuned_ms.push(trial.model_ms(BTreeMap::new())?);
            tuned_ms.push(trial.model_ms(tuned.clone())?);
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (untuned, tuned) = (median(untuned_ms), median(tuned_ms));
        let trials: usize = searches.values().map(Search::trials).sum();
        if args.json {
            let kernels: Vec<serde_json::Value> = found
                .entries
                .iter()
                .map(|(k, e)| {
                    serde_json::json!({
                        "key": k, "default_us": e.default_us, "tuned_us": e.median_us,
                        "trials": e.trials, "space": spaces[k].full,
                        "valid": spaces[k].valid.len(), "pruned": spaces[k].kept.len(),
                    })
                })
                .collect();
            let report = serde_json::json!({
                "device": db.device, "search": format!("{:?}", args.search).to_lowercase(),
                "pruned": !args.no_prune, "budget": args.budget, "trials": trials,
                "search_s": search_s, "untuned_ms": untuned, "tuned_ms": tuned,
                "products_us_by_trial": best_by_trial, "kernels": kernels,
            });
            let _ = writeln!(stdout, "{report}");
        } else {
            let _ = writeln!(
                stdout,
                "{trials} trials over {} kernel signatures in {search_s:.1} s; wrote {}",
                searches.len(),
                path.display()
            );
            let _ = writeln!(
                stdout,
                "model: untuned {untuned:.3} ms, tuned {tuned:.3} ms ({:.2}x)",
                untuned / tuned
            );
        }
        let _ = stderr.flush();
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    #[cfg(not(feature = "wgpu"))]
    fn search(
        &self,
        _: &TuneArgs,
        _: &crate::Loaded,
        _: &Lowerer,
        _: &BTreeMap<String, Tunable>,
        _: &BTreeMap<&String, SpaceReport>,
        _: TuningDb,
        _: &TuningSpec,
        _: &mut dyn Write,
        _: &mut dyn Write,
    ) -> Outcome {
        Err(plain(
            "this ircc was built without the wgpu backend (cargo feature 'wgpu'), which ircc tune measures on",
        ))
    }
}

/// Times lowered models on one device, its compiled kernels kept across
/// trials.
#[cfg(feature = "wgpu")]
struct Trial<'a> {
    driver: &'a Driver,
    loaded: &'a crate::Loaded,
    lowerer: &'a Lowerer,
    gpu: std::sync::Arc<ircc_wgsl::Gpu>,
    profile: Option<String>,
    runs: usize,
    inputs: Option<Vec<ircc_core::Tensor>>,
    /// The untuned model's outputs, which every trial's must match.
    reference: Option<Vec<ircc_core::Tensor>>,
    tolerance: f64,
}

#[cfg(feature = "wgpu")]
impl Trial<'_> {
    fn session(
        &mut self,
        table: BTreeMap<String, MatmulConfig>,
    ) -> Result<(ircc_wgsl::Session, BTreeMap<String, Tunable>), Failure> {
        let (module, seen) = self.lowerer.lower(self.driver, table)?;
        let func = crate::gpu::main_function(&module)?;
        if self.inputs.is_none() {
            self.inputs = Some(crate::inputs::random_inputs(&module, 0)?);
        }
        let lowered = crate::Loaded {
            module,
            source: None,
            weights: self.loaded.weights.clone(),
            path: self.loaded.path.clone(),
            import_ms: 0.0,
            bound: Vec::new(),
            remarks: Vec::new(),
        };
        let weights = self.driver.weights_of(&lowered, func)?;
        let plan = crate::gpu::Device::Wgpu
            .plan(&lowered.module, func, self.profile.as_deref())
            .map_err(plain)?;
        let outputs = crate::gpu::output_elems(&lowered.module, func);
        let lookup = |name: &str| {
            weights
                .get(name)
                .cloned()
                .ok_or_else(|| format!("no weight '{name}'"))
        };
        let session =
            ircc_wgsl::Session::on(self.gpu.clone(), plan, outputs, &lookup).map_err(plain)?;
        Ok((session, seen))
    }

    /// Each signature's time per product (the median over runs of its
    /// kernels' times, summed, over its products).
    fn time(
        &mut self,
        table: BTreeMap<String, MatmulConfig>,
    ) -> Result<BTreeMap<String, f64>, Failure> {
        let (mut session, seen) = self.session(table.clone())?;
        let inputs = self.inputs.clone().unwrap_or_default();
        let outputs = session.run(&inputs).map_err(plain)?;
        let warmup = self.warmup(&mut session, &inputs)?;
        match &self.reference {
            None => self.reference = Some(outputs),
            Some(want) => {
                let d = crate::check::relative_difference(&outputs, want);
                if d.is_nan() || d > self.tolerance {
                    let tried: Vec<String> =
                        table.iter().map(|(k, c)| format!("{k}: {c:?}")).collect();
                    return Err(plain(format!(
                        "a trial's outputs differ from the untuned model's by {d:e} (more than {:e}): a template bug; the trial's parameters were:\n  {}",
                        self.tolerance,
                        tried.join("\n  ")
                    )));
                }
            }
        }
        let timing = session.time(&inputs, warmup, self.runs).map_err(plain)?;
        if timing.per_kernel_us.iter().all(Vec::is_empty) {
            return Err(plain(format!(
                "adapter '{}' cannot time kernels (no timestamp queries), which ircc tune needs",
                self.gpu.adapter()
            )));
        }
        let mut by_kernel: BTreeMap<&str, f64> = BTreeMap::new();
        for (d, times) in session.plan().dispatches.iter().zip(&timing.per_kernel_us) {
            let mut t = times.clone();
            t.sort_by(f64::total_cmp);
            let median = t
                .get(t.len() / 2)
                .ok_or_else(|| plain(format!("kernel {} was not timed", d.kernel)))?;
            *by_kernel.entry(d.kernel.as_str()).or_default() += median;
        }
        seen.iter()
            .map(|(key, t)| {
                let mut total = 0.0;
                for k in &t.kernels {
                    total += by_kernel.get(k.as_str()).ok_or_else(|| {
                        plain(format!("kernel {k} of '{key}' is not in the plan"))
                    })?;
                }
                Ok((key.clone(), total / t.instances.max(1) as f64))
            })
            .collect()
    }

    /// Warm-up runs before timing `session`: a GPU left idle while the
    /// trial compiled has lowered its clocks, and takes about a quarter of
    /// a second of work to raise them again; the runs that measure how long
    /// that is are part of it.
    fn warmup(
        &self,
        session: &mut ircc_wgsl::Session,
        inputs: &[ircc_core::Tensor],
    ) -> Result<usize, Failure> {
        let mut runs = session.time(inputs, 0, self.runs).map_err(plain)?.runs_ms;
        runs.sort_by(f64::total_cmp);
        let once = runs[runs.len() / 2] / 1e3;
        Ok(((0.25 / once.max(1e-6)).ceil() as usize).clamp(1, 5000))
    }

    /// The model's median time in milliseconds.
    fn model_ms(&mut self, table: BTreeMap<String, MatmulConfig>) -> Result<f64, Failure> {
        let (mut session, _) = self.session(table)?;
        let inputs = self.inputs.clone().unwrap_or_default();
        let warmup = self.warmup(&mut session, &inputs)?;
        let timing = session.time(&inputs, warmup, self.runs).map_err(plain)?;
        let mut runs = timing.runs_ms;
        runs.sort_by(f64::total_cmp);
        Ok(runs[runs.len() / 2])
    }
}

/// The table of each signature's space, Romou's Fig. 18 figures: every
/// point, the valid ones, those pruning keeps, and how many each
/// criterion excludes (`-`: the profile lacks its figure).
fn report_spaces(
    spaces: &BTreeMap<&String, SpaceReport>,
    seen: &BTreeMap<String, Tunable>,
    json: bool,
    stdout: &mut dyn Write,
) {
    if json {
        let rows: Vec<serde_json::Value> = spaces
            .iter()
            .map(|(k, r)| {
                let criteria: serde_json::Map<String, serde_json::Value> = r
                    .by_criterion
                    .iter()
                    .map(|(n, c)| (n.to_string(), serde_json::json!(c)))
                    .collect();
                let shape = seen[*k].facts.shape;
                serde_json::json!({
                    "key": k, "products": seen[*k].instances, "space": r.full,
                    "m": shape.m, "n": shape.n, "k": shape.k, "batches": shape.batches,
                    "valid": r.valid.len(), "pruned": r.kept.len(), "excluded_by": criteria,
                })
            })
            .collect();
        let _ = writeln!(stdout, "{}", serde_json::json!({ "kernels": rows }));
        return;
    }
    let names: Vec<&str> = spaces
        .values()
        .next()
        .map(|r| r.by_criterion.iter().map(|(n, _)| *n).collect())
        .unwrap_or_default();
    let _ = write!(
        stdout,
        "{:>8} {:>7} {:>7} {:>7}",
        "products", "space", "valid", "pruned"
    );
    for n in &names {
        let _ = write!(stdout, " {n:>12}");
    }
    let _ = writeln!(stdout, "  kernel signature");
    let (mut full, mut valid, mut kept) = (0, 0, 0);
    for (k, r) in spaces {
        let _ = write!(
            stdout,
            "{:>8} {:>7} {:>7} {:>7}",
            seen[*k].instances,
            r.full,
            r.valid.len(),
            r.kept.len()
        );
        for (_, c) in &r.by_criterion {
            let c = c.map_or("-".to_string(), |c| c.to_string());
            let _ = write!(stdout, " {c:>12}");
        }
        let _ = writeln!(stdout, "  {k}");
        full += r.full;
        valid += r.valid.len();
        kept += r.kept.len();
    }
    let ratio = |n: usize| {
        if kept == 0 {
            "no point".to_string()
        } else {
            format!("1 point in {:.1}", n as f64 / kept as f64)
        }
    };
    let _ = writeln!(
        stdout,
        "{:>8} {full:>7} {valid:>7} {kept:>7}  all signatures: pruning keeps {} of the space, {} of the valid ones (a signature left none measures its default only)",
        "total",
        ratio(full),
        ratio(valid)
    );
}

/// The search space: `--spec-dir`'s tuning.toml where it has one, else the
/// built-in spec/tuning.toml.
fn tuning_spec(args: &crate::PipelineArgs) -> Result<TuningSpec, Failure> {
    let Some(path) = args
        .spec_dir
        .as_deref()
        .and_then(|dir| crate::spec_file(dir, "tuning.toml"))
    else {
        return Ok(TuningSpec::builtin());
    };
    let text =
        std::fs::read_to_string(&path).map_err(|e| plain(format!("{}: {e}", path.display())))?;
    TuningSpec::parse(&text).map_err(|e| plain(format!("{}: {e}", path.display())))
}
