//! Tuning (issue 18): every point of the matmul template's space a
//! database can give a product computes it (kernel interpreter, wgpu);
//! databases of another device, format or template version, or corrupt
//! ones, are refused; `ircc tune` on lavapipe times each candidate on its
//! kernel alone, in a harness cut out of the model, and writes what
//! `ircc stats` then finds.

mod common;

use common::{TemplateCase, ircc, root, scratch_dir};
use ircc_dialects::kernel::Target;
use ircc_passes::tuning::database::{Entry, TuningDb};
use ircc_passes::tuning::space::{MatmulConfig, ProductShape, TuningSpec};

const PRODUCTS: TemplateCase = TemplateCase {
    file: "tests/data/tuned_products.ir",
    inputs: &[
        ("x", &[13, 37]),
        ("w", &[37, 10]),
        ("p", &[2, 9, 20]),
        ("q", &[2, 20, 6]),
        ("i", &[1, 3, 9, 9]),
        ("k", &[5, 3, 3, 3]),
        ("kb", &[5]),
    ],
    results: 3,
};

/// `ircc tune --space-only --json` of `file` on `device`.
fn space_report(file: &str, device: &str) -> serde_json::Value {
    space_report_with(file, device, &[])
}

/// [`space_report`] with more arguments.
fn space_report_with(file: &str, device: &str, extra: &[&str]) -> serde_json::Value {
    let dir = scratch_dir("space");
    let db = dir.join("db.toml");
    let mut args = vec![
        "tune",
        file,
        "--pipeline",
        "smartmem",
        "--device",
        device,
        "--tuning-db",
        db.to_str().unwrap(),
        "--space-only",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = ircc(&args);
    assert_eq!(out.code, 0, "{}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

/// Each signature of `file` and its product.
fn signatures(file: &str, device: &str) -> Vec<(String, ProductShape)> {
    space_report(file, device)["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let n = |f: &str| k[f].as_i64().unwrap();
            let shape = ProductShape {
                m: n("m"),
                n: n("n"),
                k: n("k"),
                batches: n("batches"),
            };
            (k["key"].as_str().unwrap().to_string(), shape)
        })
        .collect()
}

/// A database giving each signature the `i`th of `samples` points spread
/// over its valid ones.
fn sampled_db(signatures: &[(String, ProductShape)], i: usize, samples: usize) -> TuningDb {
    let points = TuningSpec::builtin().matmul_tiled.points();
    let mut db = TuningDb::new("nvidia_vulkan");
    for (key, shape) in signatures {
        let valid: Vec<MatmulConfig> = points
            .iter()
            .filter(|c| c.invalid(shape, Target::webgpu()).is_none())
            .copied()
            .collect();
        // A stride coprime to most lengths, so the samples differ in
        // every parameter.
        let config = valid[(i * valid.len() / samples + i * 7919) % valid.len()];
        let entry = Entry {
            config,
            median_us: 1.0,
            default_us: 1.0,
            trials: 1,
        };
        db.entries.insert(key.clone(), entry);
    }
    db
}

#[test]
fn sampled_points_of_the_space_compute_the_products() {
    let file = root().join(PRODUCTS.file);
    let file = file.to_str().unwrap();
    let signatures = signatures(file, "nvidia_vulkan");
    assert_eq!(signatures.len(), 3, "{signatures:?}");
    let dir = scratch_dir("sampled");
    let samples = 24;
    let mut used = Vec::new();
    for i in 0..samples {
        let db = sampled_db(&signatures, i, samples);
        used.extend(db.entries.values().map(|e| e.config));
        let path = dir.join(format!("db{i}.toml"));
        std::fs::write(&path, db.to_text()).unwrap();
        let out = ircc(&[
            "check",
            file,
            "--pipeline",
            "smartmem-gpu",
            "--device",
            "nvidia_vulkan",
            "--tuning-db",
            path.to_str().unwrap(),
        ]);
        assert_eq!(
            out.code,
            0,
            "{}\n{}{}",
            db.to_text(),
            out.stdout,
            out.stderr
        );
    }
    // The samples cover both paths, both vector reads, and split K.
    let any = |f: &dyn Fn(&MatmulConfig) -> bool| used.iter().any(f);
    assert!(any(&|c| !c.local_memory) && any(&|c| c.local_memory));
    assert!(any(&|c| c.vec4_rows()) && any(&|c| c.vec4_cols() && !c.vec4_rows()));
    assert!(any(&|c| c.splits > 1) && any(&|c| c.rows != c.cols));
}

#[test]
fn tuned_kernels_match_the_interpreter_on_wgpu() {
    if !common::gpu_available() {
        return;
    }
    let file = root().join(PRODUCTS.file);
    let signatures = signatures(file.to_str().unwrap(), "nvidia_vulkan");
    let dir = scratch_dir("sampled_gpu");
    for i in [0, 5, 11, 17] {
        let path = dir.join(format!("db{i}.toml"));
        std::fs::write(&path, sampled_db(&signatures, i, 24).to_text()).unwrap();
        let args = [
            "--pipeline",
            "smartmem",
            "--backend",
            "wgpu",
            "--tuning-db",
            path.to_str().unwrap(),
        ];
        let diff = common::template_difference(&PRODUCTS, &args);
        assert!(diff <= 1e-5, "sample {i}: {diff:e}");
    }
}

/// `--spec-dir`'s tuning.toml replaces the search space: one value of
/// splits instead of six leaves a sixth of every signature's points, and
/// a space that does not parse is refused naming the file.
#[test]
fn a_spec_dir_tuning_toml_replaces_the_space() {
    let file = root().join(PRODUCTS.file);
    let file = file.to_str().unwrap();
    let builtin = include_str!("../spec/tuning.toml");
    let dir = scratch_dir("tuning-spec");
    let one_split = builtin.replace("splits = [1, 2, 3, 4, 6, 8]", "splits = [1]");
    assert_ne!(one_split, builtin, "the built-in space lists six splits");
    std::fs::write(dir.join("tuning.toml"), one_split).unwrap();
    let dir_arg = dir.to_str().unwrap();
    let spaces = |report: serde_json::Value| -> Vec<i64> {
        report["kernels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["space"].as_i64().unwrap())
            .collect()
    };
    let all = spaces(space_report(file, "nvidia_vulkan"));
    let unsplit = spaces(space_report_with(
        file,
        "nvidia_vulkan",
        &["--spec-dir", dir_arg],
    ));
    assert!(!all.is_empty());
    assert_eq!(all.iter().map(|n| n / 6).collect::<Vec<_>>(), unsplit);
    std::fs::write(dir.join("tuning.toml"), "[matmul_tiled]\nrows = []\n").unwrap();
    let db = dir.join("db.toml");
    let out = ircc(&[
        "tune",
        file,
        "--pipeline",
        "smartmem",
        "--device",
        "nvidia_vulkan",
        "--tuning-db",
        db.to_str().unwrap(),
        "--space-only",
        "--spec-dir",
        dir_arg,
    ]);
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("tuning.toml"), "{}", out.stderr);
}

/// A tuning database changes the products' schedules and nothing else:
/// the IR after kernel.schedule with and without it differs only inside
/// `kernel.schedule` attributes, and in at least one.
#[test]
fn a_tuning_database_changes_only_schedules() {
    let file = root().join("tests/ir/kernel.schedule/tuned.ir");
    let db = root().join("tests/ir/kernel.schedule/tuned.toml");
    let file = file.to_str().unwrap();
    let after_schedule = |extra: &[&str]| {
        let args = [
            &[
                file,
                "--pipeline",
                "smartmem",
                "--device",
                "nvidia_vulkan",
                "--print-ir-after",
                ircc_passes::decl::KernelScheduleOptions::NAME,
            ][..],
            extra,
        ]
        .concat();
        let out = ircc(&args);
        assert_eq!(out.code, 0, "{}", out.stderr);
        out.stderr
    };
    let untuned = after_schedule(&[]);
    let tuned = after_schedule(&["--tuning-db", db.to_str().unwrap()]);
    let (a, b): (Vec<&str>, Vec<&str>) = (untuned.lines().collect(), tuned.lines().collect());
    assert_eq!(a.len(), b.len());
    let without_schedule = |line: &str| match line.split_once("kernel.schedule = {") {
        Some((head, rest)) => format!("{head}{}", rest.split_once('}').map_or("", |r| r.1)),
        None => line.to_string(),
    };
    let mut differing = 0;
    for (x, y) in a.iter().zip(&b) {
        if x != y {
            differing += 1;
            assert_eq!(without_schedule(x), without_schedule(y), "{x}\n{y}");
            assert!(y.contains("tuned = true"), "{y}");
        }
    }
    assert_eq!(differing, 1, "{tuned}");
}

#[test]
fn bad_databases_are_refused_naming_the_file() {
    let file = root().join(PRODUCTS.file);
    let file = file.to_str().unwrap();
    let dir = scratch_dir("bad_db");
    let signatures = signatures(file, "nvidia_vulkan");
    let good = sampled_db(&signatures, 0, 24).to_text();
    let cases = [
        ("format = 1", "format = 2", "format 2"),
        (
            "device = \"nvidia_vulkan\"",
            "device = \"lavapipe\"",
            "measured on device 'lavapipe'",
        ),
        (
            "templates = \"matmul_tiled/1\"",
            "templates = \"matmul_tiled/0\"",
            "stale",
        ),
        ("[[kernel]]", "[[kernel]", "not readable"),
        ("splits = ", "splits = 4096 #", "do not fit"),
        // Parameters that would unroll a huge kernel are refused, not built.
        ("rows = ", "rows = 256 #", "rows = 256 is not within"),
        (
            "k_step = ",
            "k_step = 100000 #",
            "k_step = 100000 is not within",
        ),
    ];
    for (from, to, expected) in cases {
        let path = dir.join("db.toml");
        std::fs::write(&path, good.replacen(from, to, 1)).unwrap();
        let out = ircc(&[
            file,
            "--pipeline",
            "smartmem-gpu",
            "--device",
            "nvidia_vulkan",
            "--tuning-db",
            path.to_str().unwrap(),
        ]);
        assert_ne!(out.code, 0, "{from} -> {to}");
        assert!(
            out.stderr.contains(expected) && out.stderr.contains("db.toml"),
            "{from} -> {to}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    }
    // Where the database cannot be written is found before any search.
    let out = ircc(&[
        "tune",
        file,
        "--pipeline",
        "smartmem",
        "--device",
        "nvidia_vulkan",
        "--tuning-db",
        "no/such/folder/db.toml",
    ]);
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("not a writable file"), "{}", out.stderr);
    // A pipeline that does not schedule kernels reads no database, and
    // says so.
    let out = ircc(&[file, "--pipeline", "dnnfusion", "--tuning-db", "db.toml"]);
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("does nothing"), "{}", out.stderr);
}

/// On lavapipe, `ircc tune` measures each candidate on its kernel alone
/// (a few trials per signature of the reduced Swin-T and of BERT), checks
/// the tuned model against the untuned one, and writes a database whose
/// every entry `ircc stats` then finds. Times are reported, not asserted:
/// they are the benchmark's (`ircc tune --json`), and a CPU's vary.
#[test]
fn tuning_on_lavapipe_times_each_kernel_alone() {
    if !common::gpu_available() {
        return;
    }
    for model in ["swin_t_w24_dynamo", "bert_l2_w64"] {
        let file = root().join(format!("tests/models/{model}.onnx"));
        let file = file.to_str().unwrap();
        let dir = scratch_dir(&format!("tune_{model}"));
        let db = dir.join("lavapipe.toml");
        let db = db.to_str().unwrap();
        let budget = 3;
        let out = ircc(&[
            "tune",
            file,
            "--pipeline",
            "smartmem",
            "--device",
            "lavapipe",
            "--tuning-db",
            db,
            "--budget",
            &budget.to_string(),
            // An odd count, so that each time is a true median.
            "--runs",
            "3",
            "--json",
        ]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        let number = |k: &str| {
            report[k]
                .as_f64()
                .unwrap_or_else(|| panic!("{k}: {report}"))
        };
        assert!(
            number("untuned_ms") > 0.0 && number("tuned_ms") > 0.0,
            "{report}"
        );
        assert!(number("trials_per_s") > 0.0, "{report}");
        let kernels = report["kernels"].as_array().unwrap();
        // Every signature measured its budget's worth of candidates, or
        // its whole pruned space where that is smaller.
        let trials: u64 = kernels.iter().map(|k| k["trials"].as_u64().unwrap()).sum();
        assert_eq!(report["trials"].as_u64(), Some(trials));
        for k in kernels {
            let (pruned, valid) = (k["pruned"].as_u64().unwrap(), k["valid"].as_u64().unwrap());
            assert!(0 < pruned && pruned < valid, "{k}");
            assert!(k["trials"].as_u64().unwrap() <= budget, "{k}");
            assert!(
                k["tuned_us"].as_f64().unwrap() <= k["default_us"].as_f64().unwrap(),
                "{k}"
            );
        }
        // The search's progress, a round at a time, never gets worse.
        let curve: Vec<f64> = report["products_us_by_trial"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_f64().unwrap())
            .collect();
        assert_eq!(curve.len() as u64, budget, "{curve:?}");
        assert!(curve.windows(2).all(|w| w[1] <= w[0]), "{curve:?}");
        let read = TuningDb::read(db, "lavapipe").unwrap();
        assert_eq!(read.entries.len(), kernels.len());
        // The database is canonical: read and written back, it is the same.
        assert_eq!(read.to_text(), std::fs::read_to_string(db).unwrap());
        let stats = ircc(&[
            "stats",
            file,
            "--pipeline",
            "smartmem",
            "--device",
            "lavapipe",
            "--tuning-db",
            db,
            "--json",
        ]);
        assert_eq!(stats.code, 0, "{}", stats.stderr);
        let stats: serde_json::Value = serde_json::from_str(&stats.stdout).unwrap();
        // Every product of every signature in the database took its entry.
        let products: u64 = space_report(file, "lavapipe")["kernels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["products"].as_u64().unwrap())
            .sum();
        assert_eq!(stats["tuned_kernels"].as_u64(), Some(products));
    }
}

/// The harness a signature is timed in is a model of its own: the
/// products of `tuned_products.ir` cut out of it after `smartmem` verify,
/// take the operands they read in the model as arguments and return
/// their results, and lowered to kernels compute what the interpreter
/// computes (`ircc check` through kernel.lower).
#[test]
fn a_harness_is_its_products_alone() {
    use ircc_core::{Module, OpId, parse_module};
    let file = root().join(PRODUCTS.file);
    let out = ircc(&[
        file.to_str().unwrap(),
        "--pipeline",
        "smartmem",
        "--device",
        "nvidia_vulkan",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let module = parse_module(&out.stdout, None).unwrap();
    let registry = ircc_dialects::registry().unwrap();
    let func = module.lookup_symbol("main").unwrap();
    let block = module.entry_block(func).unwrap();
    let is_product = |m: &Module, op: OpId| {
        let products = ["graph.matmul", "graph.gemm", "graph.conv"];
        let mut found = products.contains(&m.op(op).name.as_str());
        for &r in &m.op(op).regions {
            for &b in &m.regions[r].blocks {
                m.walk_block(b, &mut |o| {
                    found |= products.contains(&m.op(o).name.as_str())
                });
            }
        }
        found
    };
    let products: Vec<OpId> = module.blocks[block]
        .ops
        .iter()
        .copied()
        .filter(|&op| is_product(&module, op))
        .collect();
    assert_eq!(products.len(), 3);
    for one in &products {
        let h = ircc_passes::tuning::harness::harness(&module, &[*one]).unwrap();
        ircc_core::verify::verify(&h, &registry, Default::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let hf = h.lookup_symbol("main").unwrap();
        let hb = h.entry_block(hf).unwrap();
        let names: Vec<&str> = h.blocks[hb]
            .ops
            .iter()
            .map(|&o| h.op(o).name.as_str())
            .collect();
        // The product and its return; no other computation came along.
        assert_eq!(
            names.iter().filter(|n| is_product_name(n)).count(),
            1,
            "{names:?}"
        );
        assert_eq!(names.last(), Some(&"func.return"));
        let results: Vec<_> = h.op(*h.blocks[hb].ops.last().unwrap()).operands.clone();
        let want: Vec<_> = module
            .op(*one)
            .results
            .iter()
            .map(|&r| module.value_type(r).clone())
            .collect();
        let got: Vec<_> = results.iter().map(|&r| h.value_type(r).clone()).collect();
        assert_eq!(got, want);
    }
    let all = ircc_passes::tuning::harness::harness(&module, &products).unwrap();
    let dir = scratch_dir("harness");
    let path = dir.join("harness.ir");
    std::fs::write(
        &path,
        ircc_core::print_module(&all, ircc_core::Form::Pretty),
    )
    .unwrap();
    let check = ircc(&[
        "check",
        path.to_str().unwrap(),
        "--passes",
        "kernel.schedule,kernel.lower",
        "--device",
        "nvidia_vulkan",
        "--quiet",
    ]);
    assert_eq!(check.code, 0, "{}", check.stderr);
}

fn is_product_name(name: &str) -> bool {
    ["graph.matmul", "graph.gemm", "graph.conv", "graph.fused"].contains(&name)
}

/// `ircc probe --quick` measures the adapter (lavapipe in CI) within a
/// minute, and what it writes reads as a device profile whose every figure
/// says how it was measured.
#[test]
fn the_quick_probe_writes_a_profile() {
    if !common::gpu_available() {
        return;
    }
    let dir = scratch_dir("probe_profile");
    let path = dir.join("probed.toml");
    let start = std::time::Instant::now();
    let out = ircc(&["probe", "--quick", "-o", path.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(start.elapsed().as_secs() < 60, "{:?}", start.elapsed());
    let text = std::fs::read_to_string(&path).unwrap();
    let profile = ircc_dialects::kernel::DeviceProfile::parse(&text)
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(profile.name, "probed");
    assert!(profile.compute_units > 0 && profile.memory_bandwidth_gbs > 0.0);
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if !l.is_empty() && !l.starts_with('#') && !l.starts_with("unknown") {
            assert!(lines[i - 1].starts_with("# method: "), "no method for {l}");
        }
    }
}
