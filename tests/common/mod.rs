//! Helpers shared by ircc's integration tests in `tests/` (and the
//! benchmarks). Each test binary compiles this module and uses a part of
//! it, hence the allowance for the rest.

#![allow(dead_code)]

pub mod onnx;
pub mod special;

use std::path::{Path, PathBuf};

/// What one `ircc` invocation printed.
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the `ircc` command line in-process. A bundle it writes (`ircc
/// compile`, `--emit wgsl|opencl -o DIR`) has its plan.json checked
/// against `spec/plan.schema.json`, so every plan the tests write is.
pub fn ircc(args: &[&str]) -> Output {
    let driver = ircc::Driver::new().expect("the stock driver builds");
    let mut argv = vec!["ircc"];
    argv.extend_from_slice(args);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = driver.run_cli(argv, &mut out, &mut err);
    if code == 0 {
        check_written_plan(args);
    }
    Output {
        code,
        stdout: String::from_utf8_lossy(&out).into_owned(),
        stderr: String::from_utf8_lossy(&err).into_owned(),
    }
}

/// Fails unless the plan.json of the bundle `args` wrote, if any, follows
/// the JSON Schema.
fn check_written_plan(args: &[&str]) {
    static SCHEMA: std::sync::OnceLock<jsonschema::Validator> = std::sync::OnceLock::new();
    let writes_bundle = args.first() == Some(&"compile")
        || args
            .windows(2)
            .any(|w| w[0] == "--emit" && matches!(w[1], "wgsl" | "opencl"));
    let Some(dir) = args
        .windows(2)
        .find(|w| matches!(w[0], "-o" | "--output"))
        .map(|w| Path::new(w[1]))
        .filter(|_| writes_bundle)
    else {
        return;
    };
    let plan: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("plan.json")).expect("the bundle's plan.json"),
    )
    .expect("plan.json is JSON");
    let validator = SCHEMA.get_or_init(|| {
        let schema = std::fs::read_to_string(root().join("spec/plan.schema.json")).unwrap();
        jsonschema::validator_for(&serde_json::from_str(&schema).unwrap()).expect("a schema")
    });
    let errors: Vec<String> = validator
        .iter_errors(&plan)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{} breaks the schema: {errors:#?}",
        dir.display()
    );
}

/// The repository root (the root package's directory).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.ir` file under `dir` (relative to the root), sorted.
pub fn ir_files(dir: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    collect(&root().join(dir), &mut files);
    files.sort();
    files
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, files);
        } else if p.extension().is_some_and(|x| x == "ir") {
            files.push(p);
        }
    }
}

/// The arguments on a snapshot file's first line, `// RUN: ARGS`.
pub fn run_args(source: &str) -> Option<Vec<String>> {
    run_lines(source).into_iter().next()
}

/// The command lines of every `// RUN:` line that opens a filetest (one
/// or more, each run on the file).
pub fn run_lines(source: &str) -> Vec<Vec<String>> {
    source
        .lines()
        .map_while(|l| l.strip_prefix("// RUN:"))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// A path relative to the root, with `/` separators, for stable output.
pub fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

/// Every file under `dir`, as sorted paths relative to it with `/`
/// between components: what a command wrote.
pub fn files_under(dir: &Path) -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, base, out);
            } else if let Ok(relative) = p.strip_prefix(base) {
                out.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// A fresh, empty directory for one test, removed when dropped.
pub struct Scratch(tempfile::TempDir);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

pub fn scratch_dir(name: &str) -> Scratch {
    Scratch(
        tempfile::Builder::new()
            .prefix(&format!("ircc-{name}-"))
            .tempdir()
            .expect("create a scratch directory"),
    )
}

/// The shared networks, each with its torchscript and dynamo export.
pub const SHARED_MODELS: [&str; 8] = [
    "bert_l2_w64",
    "bert_l2_w64_dynamo",
    "vit_l4_w64",
    "vit_l4_w64_dynamo",
    "convnext_w16",
    "convnext_w16_dynamo",
    "swin_t_w24",
    "swin_t_w24_dynamo",
];

/// Every source file that the filetests under `dirs` emit with
/// `--emit LANGUAGE -o DIR` (`language` is `wgsl` or `opencl`), as
/// `(filetest, file name, text)`.
pub fn filetest_sources(dirs: &[&str], language: &str) -> Vec<(String, String, String)> {
    let mut sources = Vec::new();
    for dir in dirs {
        for file in ir_files(dir) {
            let source = std::fs::read_to_string(&file).unwrap();
            for args in run_lines(&source) {
                if !args.iter().any(|a| a == language) {
                    continue;
                }
                // Without -o the sources are printed, each under a line
                // `// ----- FILE: ...`; with -o a bundle would also need
                // the weights, which kernel filetests do not have.
                let mut argv = vec![file.to_str().unwrap()];
                argv.extend(args.iter().map(String::as_str));
                let r = ircc(&argv);
                assert_eq!(r.code, 0, "{}: {}", file.display(), r.stderr);
                for part in r.stdout.split("// ----- ").skip(1) {
                    let (head, text) = part.split_once('\n').unwrap_or((part, ""));
                    let name = head.split(':').next().unwrap_or(head).to_string();
                    sources.push((relative(&file), name, text.to_string()));
                }
            }
        }
    }
    sources
}

/// The shared models that are here, by name; a missing one fails the test
/// when `IRCC_REQUIRE_ONNX_TESTS` is set (CI sets it).
pub fn shared_models() -> Vec<(String, PathBuf)> {
    SHARED_MODELS
        .iter()
        .filter_map(|&n| match find_model(n) {
            Some(p) => Some((n.to_string(), p)),
            None => {
                assert!(
                    std::env::var_os("IRCC_REQUIRE_ONNX_TESTS").is_none(),
                    "{n}.onnx not found"
                );
                None
            }
        })
        .collect()
}

/// The largest difference between two `.npy` files relative to the
/// largest magnitude of `want` (at least 1).
pub fn max_relative(got: &Path, want: &Path) -> f64 {
    let g = ircc_reference::read_npy(got).unwrap();
    let w = ircc_reference::read_npy(want).unwrap();
    max_relative_tensors(&g, &w)
}

/// [`max_relative`] of two tensors.
pub fn max_relative_tensors(got: &ircc_core::Tensor, want: &ircc_core::Tensor) -> f64 {
    let (g, w) = (got.to_f64(), want.to_f64());
    assert_eq!(g.shape(), w.shape());
    let scale = w.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    g.iter()
        .zip(w.iter())
        .map(|(a, b)| match (a.is_nan(), b.is_nan()) {
            (false, false) => (a - b).abs() / scale,
            (true, true) => 0.0,
            // A NaN where the reference has a number (or the reverse) is
            // as far off as a result can be.
            _ => f64::INFINITY,
        })
        .fold(0.0, f64::max)
}

/// `NAME.onnx` from `tests/models/`, where every model a test reads is kept.
pub fn find_model(name: &str) -> Option<PathBuf> {
    Some(root().join("tests/models").join(format!("{name}.onnx"))).filter(|p| p.exists())
}

/// Whether wgpu finds an adapter here (the tiny MLP runs on it). Without
/// one this fails when `IRCC_REQUIRE_GPU` is set (CI sets it), so a GPU
/// test cannot pass by skipping there.
pub fn gpu_available() -> bool {
    device_available("wgpu", "no GPU adapter", "IRCC_REQUIRE_GPU")
}

/// Whether an OpenCL device runs the tiny MLP here. Without one this
/// fails when `IRCC_REQUIRE_OPENCL` is set (CI sets it).
pub fn opencl_available() -> bool {
    device_available("opencl", "no OpenCL device", "IRCC_REQUIRE_OPENCL")
}

/// Whether `--backend backend` runs the tiny MLP: false when it fails
/// saying `missing`, which fails the test instead where `require` is set.
fn device_available(backend: &str, missing: &str, require: &str) -> bool {
    let dir = scratch_dir("probe");
    let out = dir.join("o");
    let mlp = root().join("examples/mlp.ir");
    let x = root().join("tests/data/mlp_x.npy");
    let r = ircc(&[
        "run",
        mlp.to_str().unwrap(),
        "--backend",
        backend,
        "--input",
        &format!("x={}", x.display()),
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    if r.code != 0 && r.stderr.contains(missing) {
        assert!(
            std::env::var_os(require).is_none(),
            "{missing}: {}",
            r.stderr
        );
        return false;
    }
    assert_eq!(r.code, 0, "{}", r.stderr);
    true
}

/// A filetest of the kernel templates for the nvidia_vulkan profile (132
/// compute units), with its inputs' shapes and how many results it has.
pub struct TemplateCase {
    pub file: &'static str,
    pub inputs: &'static [(&'static str, &'static [usize])],
    pub results: usize,
}

/// Products whose K is split on the nvidia_vulkan profile.
pub const SPLIT_K: TemplateCase = TemplateCase {
    file: "tests/ir/kernel.schedule/matmul_split_k.ir",
    inputs: &[
        ("x", &[49, 3072]),
        ("w", &[3072, 64]),
        ("b", &[64]),
        ("p", &[2, 49, 3072]),
        ("q", &[2, 3072, 64]),
        ("a", &[49, 2168]),
        ("m", &[64, 2168]),
        ("c", &[64]),
        ("r", &[1, 49, 64]),
    ],
    results: 7,
};

/// The register attention template (`--attention rows`): ragged blocks of
/// queries and keys, a float mask, grouped heads and a window, fewer keys
/// than a tile, and two lanes per query.
pub const ATTENTION: TemplateCase = TemplateCase {
    file: "tests/ir/kernel.schedule/attention_rows.ir",
    inputs: &[
        ("q", &[1, 2, 37, 24]),
        ("k", &[1, 2, 41, 24]),
        ("v", &[1, 2, 41, 20]),
        ("m", &[37, 41]),
        ("q2", &[2, 4, 20, 64]),
        ("k2", &[2, 2, 20, 64]),
        ("v2", &[2, 2, 20, 64]),
        ("q3", &[1, 1, 3, 6]),
        ("k3", &[1, 1, 5, 6]),
        ("v3", &[1, 1, 5, 6]),
        ("q4", &[1, 2, 20, 6]),
        ("k4", &[1, 2, 37, 6]),
        ("v4", &[1, 2, 37, 6]),
        ("q5", &[1, 2, 9, 64]),
        ("k5", &[1, 2, 13, 64]),
        ("v5", &[1, 2, 13, 22]),
        ("m5", &[9, 13]),
    ],
    results: 5,
};

/// The tiled attention template (`--attention tiled`) on the same ops,
/// value columns shared out.
pub const ATTENTION_TILED: TemplateCase = TemplateCase {
    file: "tests/ir/kernel.schedule/attention_tiled.ir",
    inputs: ATTENTION.inputs,
    results: ATTENTION.results,
};

/// The register attention template with its keys split over workgroups:
/// ragged queries and keys, a mask, lanes, and splits that see no key.
pub const ATTENTION_SPLIT: TemplateCase = TemplateCase {
    file: "tests/ir/kernel.schedule/attention_split.ir",
    inputs: &[
        ("q", &[1, 2, 37, 24]),
        ("k", &[1, 2, 63, 24]),
        ("v", &[1, 2, 63, 20]),
        ("m", &[37, 63]),
        ("q2", &[1, 4, 20, 64]),
        ("k2", &[1, 2, 128, 64]),
        ("v2", &[1, 2, 128, 64]),
        ("q3", &[1, 2, 20, 6]),
        ("k3", &[1, 2, 64, 6]),
        ("v3", &[1, 2, 64, 6]),
    ],
    results: 3,
};

/// Both attention templates, each case with the arguments that pick it.
pub const ATTENTION_TEMPLATES: [(&TemplateCase, &[&str]); 3] = [
    (&ATTENTION, &["--attention", "rows"]),
    (&ATTENTION_SPLIT, &["--attention", "rows"]),
    (&ATTENTION_TILED, &["--attention", "tiled"]),
];

/// Tiled products whose results live in textures, as texture.map placed
/// them for Adreno 740: the products write them as texels.
pub const PRODUCT_TEXELS: TemplateCase = TemplateCase {
    file: "tests/ir/kernel.lower/matmul_texels.ir",
    inputs: &[
        ("a", &[2, 21, 40]),
        ("b", &[40, 30]),
        ("x", &[1, 3, 10, 10]),
        ("w", &[6, 3, 3, 3]),
        ("c", &[6]),
    ],
    results: 2,
};

/// A kernel reading a buffer four elements at a time (kernel.load4 of a
/// tensor argument) and one at a time beside.
pub const VECTOR_LOAD: TemplateCase = TemplateCase {
    file: "tests/ir/kernel/vector_load.ir",
    inputs: &[("x", &[8])],
    results: 1,
};

/// A kernel writing workgroup memory four elements at a time
/// (kernel.store4), reading it back by fours and one at a time.
pub const VECTOR_STORE: TemplateCase = TemplateCase {
    file: "tests/ir/kernel/vector_store.ir",
    inputs: &[("x", &[8])],
    results: 1,
};

/// Row kernels holding their rows in registers, or reading them again in
/// a loop where they are long.
pub const ROWS: TemplateCase = TemplateCase {
    file: "tests/ir/kernel.lower/row_registers.ir",
    inputs: &[
        ("x", &[5, 700]),
        ("r", &[5, 700]),
        ("g", &[700]),
        ("b", &[700]),
        ("y", &[3, 2600]),
        ("z", &[40, 16]),
    ],
    results: 3,
};

/// Column reductions: neighbouring invocations take neighbouring rows of
/// an input stored along the axes they keep.
pub const ROW_COLUMNS: TemplateCase = TemplateCase {
    file: "tests/ir/kernel.lower/row_columns.ir",
    inputs: &[
        ("x", &[1, 6, 5, 64]),
        ("y", &[1, 6, 5, 32]),
        ("r", &[1, 32, 6, 5]),
        ("z", &[37, 48]),
    ],
    results: 3,
};

/// Row kernels (two layer norms, a softmax along a middle axis, a long
/// softmax) writing their results as texels, lanes along the row.
pub const ROW_TEXELS: TemplateCase = TemplateCase {
    file: "tests/ir/kernel.lower/row_texels.ir",
    inputs: &[
        ("x", &[3, 5, 40]),
        ("r", &[3, 5, 40]),
        ("g", &[40]),
        ("b", &[40]),
        ("y", &[4, 36]),
        ("g2", &[36]),
        ("z", &[2, 12, 6]),
        ("u", &[2, 2600]),
    ],
    results: 4,
};

/// Products whose A is a layer_norm fused in as their prologue.
pub const NORM_PROLOGUE: TemplateCase = TemplateCase {
    file: "tests/ir/kernel.lower/matmul_norm_prologue.ir",
    inputs: &[
        ("x", &[2, 21, 72]),
        ("g", &[72]),
        ("be", &[72]),
        ("w", &[72, 30]),
        ("b", &[30]),
        ("y", &[37, 301]),
        ("g2", &[301]),
        ("w2", &[301, 24]),
        ("z", &[9, 256]),
        ("g3", &[256]),
        ("w3", &[256, 20]),
        ("u", &[2, 6, 16]),
        ("g4", &[16]),
        ("w4", &[16, 8]),
    ],
    results: 5,
};

/// A normalizing product whose rows lie far from zero: f32 only.
pub const NORM_FAR: TemplateCase = TemplateCase {
    file: "tests/ir/kernel.lower/matmul_norm_far.ir",
    inputs: &[("y", &[37, 41]), ("g2", &[41]), ("w2", &[41, 24])],
    results: 1,
};

/// [`NORM_FAR`] on `backend` (none: the kernel interpreter) beside the
/// reference interpreter, in f32 (the default): the largest relative
/// difference.
pub fn norm_far_difference(backend: &[&str]) -> f64 {
    let mut args = vec!["--passes", "graph.eliminate-layout-ops,kernel.lower"];
    args.extend_from_slice(backend);
    template_difference_on(&NORM_FAR, None, &args)
}

/// Depthwise convolutions by the template that stages their input window.
pub const DEPTHWISE: TemplateCase = TemplateCase {
    file: "tests/ir/kernel.lower/conv_depthwise.ir",
    inputs: &[
        ("x", &[1, 6, 13, 11]),
        ("s", &[6, 1, 1]),
        ("w", &[6, 1, 7, 7]),
        ("b", &[6]),
        ("x2", &[2, 5, 9, 10]),
        ("w2", &[5, 1, 3, 3]),
        ("x3", &[1, 9, 10, 12]),
        ("w3", &[12, 1, 3, 3]),
        ("x4", &[1, 6, 7, 12]),
        ("y4", &[1, 6, 7, 12]),
        ("w4", &[12, 1, 5, 5]),
    ],
    results: 4,
};

/// Grouped convolutions of narrow groups in register blocks of channels
/// and columns (`tests/ir/kernel.lower/conv_grouped_blocks.ir`).
pub const GROUPED_BLOCKS: TemplateCase = TemplateCase {
    file: "tests/ir/kernel.lower/conv_grouped_blocks.ir",
    inputs: &[
        ("x", &[1, 8, 13, 11]),
        ("s", &[8, 1, 1]),
        ("w", &[8, 4, 3, 3]),
        ("b", &[8]),
        ("x2", &[2, 6, 9, 10]),
        ("w2", &[12, 2, 3, 3]),
        ("x3", &[1, 9, 10, 8]),
        ("w3", &[8, 2, 3, 3]),
        ("x4", &[1, 4, 7, 20]),
        ("w4", &[4, 2, 2, 5]),
    ],
    results: 4,
};

/// Grouped convolutions as batches of implicit GEMMs
/// (`tests/ir/kernel.lower/conv_grouped.ir`): a fused relu and bias,
/// register tiles, a split K; and one of four channels a group, per
/// element.
pub const GROUPED_CONV: TemplateCase = TemplateCase {
    file: "tests/ir/kernel.lower/conv_grouped.ir",
    inputs: &[
        ("x", &[1, 64, 9, 9]),
        ("w", &[64, 32, 3, 3]),
        ("b", &[64]),
        ("x2", &[2, 96, 7, 7]),
        ("w2", &[144, 32, 3, 3]),
        ("x3", &[1, 16, 6, 6]),
        ("w3", &[16, 4, 3, 3]),
    ],
    results: 3,
};

/// `case`, whose ops carry their schedules (and layouts), lowered for
/// adreno740 (its layout ops made views first) on a device backend at f32
/// and f16, within the GPU tests' tolerance.
pub fn assert_lowered_matches(case: &TemplateCase, backend: &[&str]) {
    for (precision, tolerance) in [("f32", 1e-4), ("f16", 1e-2)] {
        let mut args = vec![
            "--passes",
            "graph.eliminate-layout-ops,kernel.lower",
            "--precision",
            precision,
        ];
        args.extend_from_slice(backend);
        let diff = template_difference_on(case, Some("adreno740"), &args);
        assert!(
            diff <= tolerance,
            "{} {backend:?} {precision}: {diff:e}",
            case.file
        );
    }
}

/// `case` run for the nvidia_vulkan profile with `extra` (a pipeline, a
/// backend, a precision), beside the reference interpreter on the same
/// inputs: the largest relative difference of its results.
pub fn template_difference(case: &TemplateCase, extra: &[&str]) -> f64 {
    template_difference_on(case, Some("nvidia_vulkan"), extra)
}

/// [`template_difference`] for the profile `device` (none: the module's
/// own).
pub fn template_difference_on(case: &TemplateCase, device: Option<&str>, extra: &[&str]) -> f64 {
    let file = root().join(case.file);
    let dir = scratch_dir("template");
    let mut inputs = Vec::new();
    for (k, (name, shape)) in case.inputs.iter().enumerate() {
        let n: usize = shape.iter().product();
        // A fixed sequence in [-1, 1): no two inputs alike.
        let values: Vec<f64> = (0..n)
            .map(|i| ((i * 7919 + k * 104_729) % 2000) as f64 / 1000.0 - 1.0)
            .collect();
        let path = dir.join(format!("{name}.npy"));
        let tensor = ircc_core::Tensor::float(
            ircc_core::ElemType::F32,
            ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(shape), values).unwrap(),
        );
        ircc_reference::write_npy(&path, &tensor).unwrap();
        inputs.push(format!("{name}={}", path.display()));
    }
    let run = |out: &Path, extra: &[&str]| {
        let mut args = vec![
            "run",
            file.to_str().unwrap(),
            "--output-dir",
            out.to_str().unwrap(),
        ];
        for input in &inputs {
            args.extend(["--input", input.as_str()]);
        }
        args.extend_from_slice(extra);
        let r = ircc(&args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    };
    let (want, got) = (dir.join("want"), dir.join("got"));
    run(&want, &[]);
    let mut args = match device {
        Some(device) => vec!["--device", device],
        None => Vec::new(),
    };
    args.extend_from_slice(extra);
    run(&got, &args);
    (0..case.results)
        .map(|r| {
            let r = format!("result{r}.npy");
            max_relative(&got.join(&r), &want.join(&r))
        })
        .fold(0.0, f64::max)
}

/// [`template_difference`] through `smartmem` on a device backend
/// (`backend`: `--backend` and its options) at f32 and f16, each within
/// the GPU tests' tolerance (1e-4 and 1e-2 of the output's scale). The
/// profile is the H100's as probed before the probe listed its matrix
/// units (`nvidia_h100_probed`): the FMA and attention templates at the
/// H100's figures, which lavapipe and PoCL run (nvidia_vulkan's f16
/// products take cooperative matrices, which they have not).
pub fn assert_template_matches(case: &TemplateCase, backend: &[&str]) {
    for (precision, tolerance) in [("f32", 1e-4), ("f16", 1e-2)] {
        let mut args = vec!["--pipeline", "smartmem", "--precision", precision];
        args.extend_from_slice(backend);
        let diff = template_difference_on(case, Some("nvidia_h100_probed"), &args);
        assert!(
            diff <= tolerance,
            "{} {backend:?} {precision}: {diff:e}",
            case.file
        );
    }
}

/// `ircc run FILE --input INPUT --output-dir OUT EXTRA...`.
pub fn run(file: &Path, input: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "run",
        file.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--output-dir",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    ircc(&args)
}

/// `ircc run` of `file` on `input` into `out`, which must succeed: its
/// `count` unnamed results.
fn run_results(
    file: &Path,
    input: &Path,
    out: &Path,
    extra: &[&str],
    count: usize,
) -> Vec<ircc_core::Tensor> {
    let r = run(file, input, out, extra);
    assert_eq!(r.code, 0, "{extra:?}: {}", r.stderr);
    (0..count)
        .map(|i| ircc_reference::read_npy(&out.join(format!("result{i}.npy"))).unwrap())
        .collect()
}

/// `ircc run` of `file` on named `inputs` into `out`, which must succeed:
/// its `count` unnamed results.
fn run_named(
    file: &Path,
    inputs: &[(&str, &Path)],
    out: &Path,
    extra: &[&str],
    count: usize,
) -> Vec<ircc_core::Tensor> {
    let inputs: Vec<String> = inputs
        .iter()
        .map(|(name, path)| format!("{name}={}", path.display()))
        .collect();
    let mut args = vec![
        "run",
        file.to_str().unwrap(),
        "--output-dir",
        out.to_str().unwrap(),
    ];
    for i in &inputs {
        args.extend(["--input", i.as_str()]);
    }
    args.extend_from_slice(extra);
    let r = ircc(&args);
    assert_eq!(r.code, 0, "{extra:?}: {}", r.stderr);
    (0..count)
        .map(|i| ircc_reference::read_npy(&out.join(format!("result{i}.npy"))).unwrap())
        .collect()
}

/// `tests/ir/kernel/reduce_int.ir` on `backend` gives the interpreter's
/// integers exactly: rows whose max is negative and whose min is
/// positive, which a wrong starting value would change.
pub fn integer_reductions_match(backend: &str) {
    let dir = scratch_dir("reduce-int");
    let rows: Vec<i64> = vec![
        -5,
        -3,
        -9,
        -1,
        -7,
        -2, // max -1
        4,
        8,
        6,
        9,
        5,
        7, // min 4
        0,
        0,
        0,
        0,
        0,
        0, //
        -2147483648,
        2147483647,
        3,
        -3,
        1,
        -1,
    ];
    let x = ircc_core::Tensor::int(
        ircc_core::ElemType::I32,
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[4, 6]), rows).unwrap(),
    );
    let input = dir.join("x.npy");
    ircc_reference::write_npy(&input, &x).unwrap();
    let file = root().join("tests/ir/kernel/reduce_int.ir");
    let want = run_results(&file, &input, &dir.join("want"), &[], 2);
    let got = run_results(
        &file,
        &input,
        &dir.join("got"),
        &["--pipeline", "smartmem", "--backend", backend],
        2,
    );
    assert_eq!(got, want, "{backend}");
    assert_eq!(
        want[0].to_i64().iter().copied().collect::<Vec<_>>(),
        vec![-1, 9, 0, 2147483647]
    );
}

/// `tests/ir/kernel/product_int.ir` on `backend`: integer products whose
/// sums (3001 · 255 · ±127) pass 2^24 come out exact, as the interpreter's.
pub fn integer_products_match(backend: &str) {
    let dir = scratch_dir("product-int");
    let x = ircc_core::Tensor::int(
        ircc_core::ElemType::I32,
        ndarray::ArrayD::from_elem(ndarray::IxDyn(&[1, 3001]), 255),
    );
    let input = dir.join("x.npy");
    ircc_reference::write_npy(&input, &x).unwrap();
    let file = root().join("tests/ir/kernel/product_int.ir");
    let values = |results: Vec<ircc_core::Tensor>| {
        results
            .iter()
            .flat_map(|t| t.to_i64().iter().copied().collect::<Vec<_>>())
            .collect::<Vec<_>>()
    };
    let want = values(run_results(&file, &input, &dir.join("want"), &[], 2));
    assert_eq!(want, [97187385, 97187385, -97187385, -97187385]);
    let extra = ["--pipeline", "smartmem", "--backend", backend];
    let got = values(run_results(&file, &input, &dir.join("got"), &extra, 2));
    assert_eq!(got, want, "{backend}");
}

/// `tests/ir/kernel/nms.ir` on `backend` keeps the interpreter's boxes
/// exactly: crowded boxes whose scores tie often (logits in steps of a
/// quarter, exact in f32), so the order of ties and the overlaps decide,
/// and some NaN.
pub fn suppression_matches(backend: &str) {
    let dir = scratch_dir("nms");
    // A fixed sequence in [0, 1): 1/16ths, from a multiplicative hash.
    let step = |i: usize, salt: usize| ((i * 2654435761 + salt * 40503) >> 7) % 16;
    let boxes: Vec<f32> = (0..2 * 200 * 4)
        .map(|i| 0.2 + step(i, 1) as f32 / 32.0)
        .collect();
    // Some scores NaN: they rank below every other, in both.
    let logits: Vec<f32> = (0..2 * 3 * 200)
        .map(|i| {
            if i % 37 == 5 {
                f32::NAN
            } else {
                step(i, 2) as f32 / 4.0 - 2.0
            }
        })
        .collect();
    let tensor = |shape: &[usize], v: Vec<f32>| {
        let v = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(shape), v).unwrap();
        ircc_core::Tensor::float(ircc_core::ElemType::F32, v.mapv(f64::from))
    };
    let (b, l) = (dir.join("boxes.npy"), dir.join("logits.npy"));
    ircc_reference::write_npy(&b, &tensor(&[2, 200, 4], boxes)).unwrap();
    ircc_reference::write_npy(&l, &tensor(&[2, 3, 200], logits)).unwrap();
    let file = root().join("tests/ir/kernel/nms.ir");
    let inputs = [("boxes", b.as_path()), ("logits", l.as_path())];
    let results = |out: &str, extra: &[&str]| {
        run_named(&file, &inputs, &dir.join(out), extra, 2)
            .iter()
            .map(|t| t.to_i64().iter().copied().collect::<Vec<i64>>())
            .collect::<Vec<_>>()
    };
    let want = results("want", &[]);
    for rows in &want {
        let kept = rows.chunks(3).filter(|r| r[0] >= 0).count();
        assert!(
            kept > 0 && kept < rows.len() / 3,
            "{kept} kept: not a telling case"
        );
    }
    let got = results("got", &["--pipeline", "smartmem", "--backend", backend]);
    assert_eq!(got, want, "{backend}");
}

/// `tests/ir/kernel/byte_inputs.ir` on `backend` reads its byte-stored
/// inputs and constant as the interpreter does: i8 and ui8 extremes at
/// every position of a word (a pattern of five over words of four), 25
/// elements (the last word partly padding).
pub fn byte_inputs_match(backend: &str) {
    let dir = scratch_dir("byte-inputs");
    let values = |lo: i64, hi: i64| -> Vec<i64> {
        (0..25)
            .map(|i| [lo, hi, 0, lo + 1, hi - 1][i % 5])
            .collect()
    };
    let tensor = |elem, v: Vec<i64>| {
        ircc_core::Tensor::int(
            elem,
            ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[5, 5]), v).unwrap(),
        )
    };
    let (x, y) = (dir.join("x.npy"), dir.join("y.npy"));
    ircc_reference::write_npy(&x, &tensor(ircc_core::ElemType::I8, values(-128, 127))).unwrap();
    ircc_reference::write_npy(&y, &tensor(ircc_core::ElemType::U8, values(0, 255))).unwrap();
    let file = root().join("tests/ir/kernel/byte_inputs.ir");
    let inputs = [("x", x.as_path()), ("y", y.as_path())];
    let results = |out: &str, extra: &[&str]| run_named(&file, &inputs, &dir.join(out), extra, 2);
    let want = results("want", &[]);
    assert_eq!(want[0].to_f64()[[0, 0]], -128.0, "x[0,0] - y[0,0]");
    // 127 + 127 wraps to -2 in i8.
    assert_eq!(
        want[1].to_i64()[[0, 1]],
        127 * 255 - 2,
        "x[0,1]·y[0,1] + (x[0,1] + k[1])"
    );
    let got = results("got", &["--pipeline", "smartmem", "--backend", backend]);
    assert_eq!(got, want, "{backend}");
}
