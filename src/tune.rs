//! `ircc tune`: each matrix product's template parameters searched on the
//! GPU, the fastest per kernel signature recorded in a tuning database.
//!
//! A candidate is timed on its kernel alone, as Ansor's and TVM's measure
//! loops time one: each signature's harness (`ircc_passes::tuning::harness`)
//! is its first product cut out of the model with what feeds it, its
//! operands arguments of the real shapes. Each round lowers every
//! signature's harness with its next candidate, each on a thread of its
//! own (lowering is most of a round's work), compiles the new kernels in
//! parallel, then runs each harness once to check its outputs against its
//! default's and times its kernels by timestamp queries (a product's
//! partial-sum kernel charged to it), the harnesses back to back after
//! one warm-up. At the end the whole model is lowered untuned and tuned
//! once each: their outputs must agree, and they are timed alternately,
//! the gain checked where it counts. `--timing` and the JSON report
//! (`seconds_by_step`) say where the time went.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Write;
use std::rc::Rc;
#[cfg(feature = "wgpu")]
use std::time::Instant;

use ircc_core::Module;
use ircc_core::pass::{PassManager, PassOptions, PassRegistry, RunOptions};
use ircc_dialects::kernel::Target;
use ircc_passes::conversion::graph_to_kernel::KernelLower;
#[cfg(feature = "wgpu")]
use ircc_passes::decl::KernelAceOptions;
use ircc_passes::decl::KernelLowerOptions;
#[cfg(feature = "wgpu")]
use ircc_passes::tuning::database::Entry;
use ircc_passes::tuning::database::TuningDb;
#[cfg(feature = "wgpu")]
use ircc_passes::tuning::harness::harness;
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

/// Whether `path` can be written: opened for appending (which changes
/// nothing in a file that exists), and a file this made removed again.
fn writable(path: &std::path::Path) -> bool {
    let existed = path.exists();
    let opened = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .is_ok();
    if opened && !existed {
        let _ = std::fs::remove_file(path);
    }
    opened
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
        let db_path = pipeline.tuning_db.as_ref().ok_or_else(|| {
            plain("ircc tune needs --tuning-db PATH: the database it writes the fastest parameters to (merged into it where it exists)")
        })?;
        let db_text = db_path.to_string_lossy().into_owned();
        // Found out now, not after the search: where the database goes.
        let folder = match db_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => std::path::Path::new("."),
        };
        let readonly = std::fs::metadata(db_path).is_ok_and(|m| m.permissions().readonly());
        if !folder.is_dir() || readonly || !writable(db_path) {
            return Err(plain(format!(
                "--tuning-db {db_text}: not a writable file in an existing folder"
            )));
        }
        if args.budget == 0 || args.runs == 0 {
            return Err(plain("--budget and --runs must be at least 1"));
        }
        let mut loaded = self.load_model(&args.model)?;
        // The profile of the GPU it tunes on, which names the database's
        // entries: --device's, else the one matching wgpu's adapter.
        let profile = self
            .attach_target(
                pipeline,
                Some(crate::gpu::Device::Wgpu),
                &mut loaded.module,
                stderr,
            )?
            .profile;
        let existing = if db_path.exists() {
            TuningDb::read(&db_text, &profile.name).map_err(plain)?
        } else {
            TuningDb::new(&profile.name)
        };
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
        if crate::gpu::is_scheduled(&loaded.module) && !crate::gpu::schedules(&specs) {
            return Err(crate::gpu::already_scheduled(
                "ircc tune searches the parameters kernel.schedule chooses",
            )
            .into());
        }
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
            KernelLowerOptions::parse(o)?;
            Ok(Box::new(KernelLower::tuned_by(shared.clone())))
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
        // Each signature is timed on its first product, alone.
        let mut bench = Bench {
            driver: self,
            // A harness is lowered to kernels as the model is, by
            // kernel.lower and kernel.ace (with passes of each thread's own).
            specs: lowerer
                .specs
                .iter()
                .filter(|s| {
                    [KernelLowerOptions::NAME, KernelAceOptions::NAME].contains(&s.pass.as_str())
                })
                .cloned()
                .collect(),
            harnesses: BTreeMap::new(),
            gpu,
            runs: args.runs,
            inputs: BTreeMap::new(),
            reference: BTreeMap::new(),
            // The precision's rounding, summed in another order.
            tolerance: if f16 { 1e-2 } else { 1e-4 },
            spent: BTreeMap::new(),
        };
        for (key, t) in seen {
            if let Some(&op) = t.ops.first() {
                let module = harness(&lowerer.base, &[op]).map_err(plain)?;
                bench.harnesses.insert(key.clone(), module);
            }
        }
        let candidates: usize = searches.values().map(|s| s.points().min(args.budget)).sum();
        let bar = crate::progress::bar(
            candidates as u64,
            "tuning {pos}/{len} trials [{bar:30}] {per_sec} {elapsed} {msg}",
            args.json || args.model.pipeline.quiet,
        );
        let mut default_us: BTreeMap<String, f64> = BTreeMap::new();
        // The products' time with the best point found so far, after each
        // round: Romou's Fig. 18, the search's progress.
        let mut best_by_trial = Vec::new();
        for round in 0..args.budget {
            let table: BTreeMap<String, MatmulConfig> = searches
                .iter_mut()
                .filter_map(|(k, s)| Some((k.clone(), s.propose()?)))
                .collect();
            if table.is_empty() {
                break;
            }
            let times = bench.time(table.clone())?;
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
            bar.inc(table.len() as u64);
        }
        bar.finish_and_clear();
        let search_s = start.elapsed().as_secs_f64();
        let trials: usize = searches.values().map(Search::trials).sum();
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
        // The whole model, untuned and tuned: the same outputs, and the
        // gain where it counts.
        let (untuned, tuned) = bench.step("the whole model, untuned and tuned", |b| {
            b.models(lowerer, loaded, &db.table())
        })?;
        for (step, d) in &bench.spent {
            self.record(&format!("tune: {step}"), *d, std::time::Duration::ZERO);
        }
        let seconds_by_step: serde_json::Map<String, serde_json::Value> = bench
            .spent
            .iter()
            .map(|(k, d)| (k.to_string(), serde_json::json!(d.as_secs_f64())))
            .collect();
        let path = args
            .model
            .pipeline
            .tuning_db
            .as_ref()
            .expect("checked above");
        // The path the user named, written where it leads (a database
        // kept among one's dotfiles through a link stays one).
        std::fs::write(path, db.to_text()).map_err(|e| {
            plain(format!(
                "cannot write the tuning database {}: {e}",
                path.display()
            ))
        })?;
        let per_s = trials as f64 / search_s.max(1e-9);
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
                "search_s": search_s, "trials_per_s": per_s, "total_s": start.elapsed().as_secs_f64(),
                "untuned_ms": untuned, "tuned_ms": tuned,
                "products_us_by_trial": best_by_trial, "kernels": kernels,
                "seconds_by_step": seconds_by_step,
            });
            let _ = writeln!(stdout, "{report}");
        } else {
            let _ = writeln!(
                stdout,
                "{trials} trials over {} kernel signatures in {search_s:.1} s ({per_s:.1} trials/s); wrote {}",
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

/// Times candidates on one device, its compiled kernels kept across
/// rounds: each round lowers every signature's harness with its
/// candidate (each on a thread of its own: lowering is most of a round's
/// work), compiles the kernels (in parallel too), and times each
/// harness's kernels back to back.
#[cfg(feature = "wgpu")]
struct Bench<'a> {
    driver: &'a Driver,
    /// `kernel.lower` and what follows it in the pipeline.
    specs: Vec<PassOptions>,
    /// Each signature's harness: its first product alone.
    harnesses: BTreeMap<String, Module>,
    gpu: std::sync::Arc<ircc_wgsl::Gpu>,
    runs: usize,
    /// Each harness's inputs.
    inputs: BTreeMap<String, Vec<ircc_core::Tensor>>,
    /// Each harness's outputs with its signature's default, which every
    /// candidate's must match.
    reference: BTreeMap<String, Vec<ircc_core::Tensor>>,
    tolerance: f64,
    /// Where the time went, by step (`--timing`, and the JSON report).
    spent: BTreeMap<&'static str, std::time::Duration>,
}

#[cfg(feature = "wgpu")]
impl Bench<'_> {
    /// Runs `f`, its time added to `step`'s.
    fn step<T>(&mut self, step: &'static str, f: impl FnOnce(&mut Self) -> T) -> T {
        let start = Instant::now();
        let out = f(self);
        *self.spent.entry(step).or_default() += start.elapsed();
        out
    }

    /// A session of `module` (lowered) on the bench's device.
    fn session(
        &self,
        module: &Module,
        weights: &std::collections::HashMap<String, ircc_core::StoredTensor>,
    ) -> Result<ircc_wgsl::Session, Failure> {
        let func = crate::gpu::main_function(module)?;
        let plan = crate::gpu::Device::Wgpu.plan(module, func).map_err(plain)?;
        let outputs = crate::gpu::output_elems(module, func);
        let lookup = |name: &str| ircc_plan::bundle::weight_named(weights, name);
        ircc_wgsl::Session::on(self.gpu.clone(), plan, outputs, &lookup).map_err(plain)
    }

    /// Untimed runs that raise a GPU's clocks (about a quarter of a second
    /// of work after it idled while candidates compiled); one on a CPU.
    fn warmup(
        &self,
        session: &mut ircc_wgsl::Session,
        inputs: &[ircc_core::Tensor],
    ) -> Result<(), Failure> {
        if self.gpu.is_cpu() {
            return session.wall_ms(inputs, 1, 0).map(drop).map_err(plain);
        }
        let mut runs = session.wall_ms(inputs, 1, 3).map_err(plain)?;
        runs.sort_by(f64::total_cmp);
        let once = runs[1] / 1e3;
        let more = ((0.25 / once.max(1e-6)).ceil() as usize).clamp(1, 5000);
        session.wall_ms(inputs, more, 0).map(drop).map_err(plain)
    }

    /// Each signature's time (the median over runs of its kernels' times,
    /// summed) with `table`'s candidate, after checking its harness's
    /// outputs against its default's.
    fn time(
        &mut self,
        table: BTreeMap<String, MatmulConfig>,
    ) -> Result<BTreeMap<String, f64>, Failure> {
        let lowered = self.step("lowering candidates", |b| b.lower_all(&table))?;
        let sources: Vec<(String, String)> = lowered
            .iter()
            .flat_map(|(_, (plan, _))| plan.sources.iter().cloned())
            .collect();
        self.step("compiling and binding kernels", |b| {
            b.gpu.precompile(&sources, true)
        });
        let mut times = BTreeMap::new();
        let mut warm = false;
        for (key, (plan, tunable)) in lowered {
            let module = &self.harnesses[&key];
            let func = crate::gpu::main_function(module)?;
            let outputs = crate::gpu::output_elems(module, func);
            if !self.inputs.contains_key(&key) {
                let inputs = crate::inputs::random_inputs(module, 0)?;
                self.inputs.insert(key.clone(), inputs);
            }
            let inputs = self.inputs[&key].clone();
            let mut session = self.step("compiling and binding kernels", |b| {
                let no_weights = |name: &str| -> Result<ircc_core::StoredTensor, String> {
                    Err(format!(
                        "a harness reads no weight, yet '{name}' was asked for"
                    ))
                };
                ircc_wgsl::Session::on(b.gpu.clone(), plan, outputs, &no_weights).map_err(plain)
            })?;
            let got = self.step("checking outputs", |_| session.run(&inputs).map_err(plain))?;
            match self.reference.get(&key) {
                None => {
                    self.reference.insert(key.clone(), got);
                }
                Some(want) => {
                    let d = crate::check::relative_difference(&got, want);
                    if d.is_nan() || d > self.tolerance {
                        return Err(plain(format!(
                            "the outputs of '{key}' with {:?} differ from its default's by {d:e} (more than {:e}): a template bug",
                            table[&key], self.tolerance
                        )));
                    }
                }
            }
            // The harnesses are timed back to back: one warm-up raises the
            // clocks for all of them.
            if !warm {
                self.step("warming up", |b| b.warmup(&mut session, &inputs))?;
                warm = true;
            }
            let adapter = self.gpu.adapter().to_string();
            let runs = self.runs;
            let per_kernel = self.step("timing kernels", |_| {
                session
                    .profile(&inputs, 1, runs)
                    .map_err(|e| plain(format!("adapter '{adapter}': {e}, which ircc tune needs")))
            })?;
            let mut total = 0.0;
            for k in &tunable.kernels {
                let d = session
                    .plan()
                    .dispatches
                    .iter()
                    .position(|d| &d.kernel == k)
                    .ok_or_else(|| plain(format!("kernel {k} of '{key}' is not in the plan")))?;
                let mut t = per_kernel[d].clone();
                t.sort_by(f64::total_cmp);
                total += t
                    .get(t.len() / 2)
                    .ok_or_else(|| plain(format!("kernel {k} was not timed")))?;
            }
            times.insert(key, total);
        }
        // This round's kernels are not met again: memory stays flat
        // however many rounds there are.
        self.gpu.forget_pipelines();
        Ok(times)
    }

    /// Each of `table`'s signatures' harness lowered with its candidate,
    /// and its plan: on as many threads as the machine has cores, each
    /// with passes of its own (a pass registry is not shared between
    /// threads).
    fn lower_all(&self, table: &BTreeMap<String, MatmulConfig>) -> Result<Vec<Lowered>, Failure> {
        let jobs: Vec<(&String, &MatmulConfig, &Module)> = table
            .iter()
            .filter_map(|(k, c)| Some((k, c, self.harnesses.get(k)?)))
            .collect();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let per_thread = jobs.len().div_ceil(threads).max(1);
        let (registry, specs) = (&self.driver.registry, &self.specs);
        let results: Vec<Result<Lowered, String>> = std::thread::scope(|s| {
            let workers: Vec<_> = jobs
                .chunks(per_thread)
                .map(|chunk| {
                    s.spawn(move || {
                        chunk
                            .iter()
                            .map(|&(key, config, module)| {
                                lower_one(registry, specs, key, *config, module)
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        results.into_iter().map(|r| r.map_err(plain)).collect()
    }

    /// The whole model with no table and with `tuned`: their outputs must
    /// agree, and each one's median time in milliseconds, runs of the two
    /// alternating (the clock's drift falls on both).
    fn models(
        &self,
        lowerer: &Lowerer,
        loaded: &crate::Loaded,
        tuned: &BTreeMap<String, MatmulConfig>,
    ) -> Result<(f64, f64), Failure> {
        let (untuned_module, _) = lowerer.lower(self.driver, BTreeMap::new())?;
        let (tuned_module, _) = lowerer.lower(self.driver, tuned.clone())?;
        let with_weights = |module: Module| crate::Loaded {
            module,
            source: None,
            weights: loaded.weights.clone(),
            path: loaded.path.clone(),
            import_ms: 0.0,
            bound: Vec::new(),
            remarks: Vec::new(),
        };
        let (untuned_model, tuned_model) =
            (with_weights(untuned_module), with_weights(tuned_module));
        let func = crate::gpu::main_function(&untuned_model.module)?;
        let weights = self.driver.weights_of(&untuned_model, func)?;
        let mut untuned = self.session(&untuned_model.module, &weights)?;
        let mut tuned = self.session(&tuned_model.module, &weights)?;
        let inputs = crate::inputs::random_inputs(&untuned_model.module, 0)?;
        let want = untuned.run(&inputs).map_err(plain)?;
        let got = tuned.run(&inputs).map_err(plain)?;
        let d = crate::check::relative_difference(&got, &want);
        if d.is_nan() || d > self.tolerance {
            return Err(plain(format!(
                "the tuned model's outputs differ from the untuned one's by {d:e} (more than {:e}): a template bug; nothing was written",
                self.tolerance
            )));
        }
        self.warmup(&mut untuned, &inputs)?;
        self.warmup(&mut tuned, &inputs)?;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..self.runs.max(3) {
            a.extend(untuned.wall_ms(&inputs, 0, 1).map_err(plain)?);
            b.extend(tuned.wall_ms(&inputs, 0, 1).map_err(plain)?);
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        Ok((median(a), median(b)))
    }
}

/// A signature's harness lowered with a candidate: the signature, the
/// plan, and what lowering met of the signature (its kernels).
#[cfg(feature = "wgpu")]
type Lowered = (String, (ircc_plan::Plan, Tunable));

/// `module` (a harness) lowered by `specs` with `config` for signature
/// `key`, and its plan with the signature's kernels: what a thread of
/// [`Bench::lower_all`] does, with passes and a tuning of its own.
#[cfg(feature = "wgpu")]
fn lower_one(
    registry: &ircc_core::Registry,
    specs: &[PassOptions],
    key: &str,
    config: MatmulConfig,
    module: &Module,
) -> Result<Lowered, String> {
    let tuning: SharedTuning = Rc::new(RefCell::new(Tuning {
        source: "ircc tune".into(),
        table: BTreeMap::from([(key.to_string(), config)]),
        ..Default::default()
    }));
    let mut passes = PassRegistry::new();
    ircc_passes::register_all(&mut passes);
    let shared = tuning.clone();
    passes.register_decl(&KernelLowerOptions::DECL, move |o| {
        KernelLowerOptions::parse(o)?;
        Ok(Box::new(KernelLower::tuned_by(shared.clone())))
    });
    let mut m = module.clone();
    let mut pm = PassManager::from_specs(&passes, specs).map_err(|d| d.to_string())?;
    let options = RunOptions {
        verify_each: false,
        ..Default::default()
    };
    pm.run(&mut m, registry, &options, &mut std::io::sink())
        .map_err(|d| d.to_string())?;
    let tunable = tuning
        .borrow_mut()
        .seen
        .remove(key)
        .ok_or_else(|| format!("lowering its harness met no product of '{key}'"))?;
    let func = crate::gpu::main_function(&m).map_err(|f| f.diagnostics.to_string())?;
    let plan = crate::gpu::Device::Wgpu.plan(&m, func)?;
    Ok((key.to_string(), (plan, tunable)))
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
    let file = match args.spec_dir.as_deref() {
        Some(dir) => crate::spec_file(dir, "tuning.toml")?,
        None => None,
    };
    let Some(path) = file else {
        return Ok(TuningSpec::builtin());
    };
    let text = ircc_core::files::read_spec_file(&path.to_string_lossy()).map_err(plain)?;
    TuningSpec::parse(&text).map_err(|e| plain(format!("{}: {e}", path.display())))
}
