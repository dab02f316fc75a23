//! The kernel level runs like every other level: `ircc check` with the
//! `smartmem-gpu` pipeline interprets each shared model before every pass
//! and after it, `kernel.lower` included (the kernel interpreter runs each
//! `kernel.launch`), and the results agree within check's tolerance.

mod common;

use common::{SHARED_MODELS, find_model, ircc};

#[test]
fn shared_models_check_through_kernel_lower() {
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for name in SHARED_MODELS {
        let Some(path) = find_model(name) else {
            assert!(
                std::env::var_os("IRCC_REQUIRE_ONNX_TESTS").is_none(),
                "{name}.onnx not found"
            );
            skipped += 1;
            continue;
        };
        let path = path.to_string_lossy().into_owned();
        let out = ircc(&["check", &path, "--pipeline", "smartmem-gpu"]);
        let lowered = out
            .stdout
            .contains(ircc_passes::decl::KernelLowerOptions::NAME);
        if out.code == 0 && lowered {
            passed += 1;
        } else {
            failed += 1;
            eprintln!("{name}: exit {}\n{}{}", out.code, out.stdout, out.stderr);
        }
    }
    eprintln!("{passed} passed, {failed} failed, {skipped} skipped");
    assert_eq!(failed, 0);
}

/// Runs kernel IR file `file` in the interpreter on one-dimensional
/// `inputs` (name, element type, values), in scratch folder `name`: each
/// result's values, in order.
fn interpret(
    name: &str,
    file: &str,
    inputs: &[(&str, ircc_core::ElemType, &[f64])],
) -> Vec<Vec<f64>> {
    let dir = common::scratch_dir(name);
    let path = common::root().join(file);
    let mut args = vec![
        "run".to_string(),
        path.to_string_lossy().into_owned(),
        "--pipeline".to_string(),
        "none".to_string(),
    ];
    for &(input, elem, values) in inputs {
        let at = dir.join(format!("{input}.npy"));
        let t = ircc_core::Tensor::float(
            elem,
            ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[values.len()]), values.to_vec())
                .unwrap(),
        );
        ircc_reference::write_npy(&at, &t).unwrap();
        args.extend(["--input".to_string(), format!("{input}={}", at.display())]);
    }
    args.extend([
        "--output-dir".to_string(),
        dir.to_string_lossy().into_owned(),
    ]);
    let out = ircc(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(out.code, 0, "{}", out.stderr);
    let mut results = Vec::new();
    while let Ok(y) = ircc_reference::read_npy(&dir.join(format!("result{}.npy", results.len()))) {
        results.push(y.to_f64().iter().copied().collect());
    }
    results
}

#[test]
fn kernel_ir_runs_in_the_interpreter() {
    let x: Vec<f64> = (0..64).map(|i| f64::from(i) - 20.0).collect();
    let y = interpret(
        "kernel-run",
        "tests/ir/kernel/roundtrip.ir",
        &[("x", ircc_core::ElemType::F32, &x)],
    );
    let want: Vec<f64> = x.iter().map(|&v| 2.0 * v).collect();
    assert_eq!(y, [want]);
}

/// kernel.store4 writes four elements of workgroup memory in order from
/// its offset: each invocation stores its four inputs reversed and reads
/// the other's back (tests/ir/kernel/vector_store.ir).
#[test]
fn vector_stores_write_four_elements_in_order() {
    let x: Vec<f64> = (0..8).map(f64::from).collect();
    let y = interpret(
        "kernel-store4",
        "tests/ir/kernel/vector_store.ir",
        &[("x", ircc_core::ElemType::F32, &x)],
    );
    // Invocation 0 reads [7, 6, 5, 4] and element 5 (6), 1 reads [3, 2, 1,
    // 0] and element 1 (2); each adds the element to its last.
    assert_eq!(y, [vec![7.0, 6.0, 5.0, 10.0, 3.0, 2.0, 1.0, 2.0]]);
}

/// Tiles staged by store4 and read by matrix ops give A x B whether WGSL
/// declares them arrays of vec4 or of elements
/// (tests/ir/kernel/matrix_vectors.ir): the interpreter runs all three
/// kernels on the same operands.
#[test]
fn staged_matrices_multiply_whatever_their_tiles_are_declared() {
    let values = |seed: usize| -> Vec<f64> {
        (0..256)
            .map(|i| (((i * 7 + seed * 13) % 23) as f64 - 11.0) / 8.0)
            .collect()
    };
    let (a, b) = (values(1), values(2));
    let f16 = ircc_core::ElemType::F16;
    let results = interpret(
        "kernel-matrix-vectors",
        "tests/ir/kernel/matrix_vectors.ir",
        &[("a", f16, &a), ("b", f16, &b)],
    );
    let want: Vec<f64> = (0..256)
        .map(|e| {
            (0..16)
                .map(|k| a[e / 16 * 16 + k] * b[k * 16 + e % 16])
                .sum()
        })
        .collect();
    assert_eq!(results.len(), 3);
    for (i, got) in results.iter().enumerate() {
        // Eighths of small integers: exact in f16, and their sums in f32.
        assert_eq!(got, &want, "result{i}");
    }
}

/// Products split along K (on the nvidia_vulkan profile): the kernel
/// interpreter runs the partial products and their sum, and the results
/// agree with the graph's, in `ircc check` and in `ircc run`.
#[test]
fn products_split_along_k_check_in_the_kernel_interpreter() {
    let file = common::root().join("tests/ir/kernel.schedule/matmul_split_k.ir");
    let file = file.to_string_lossy();
    let out = ircc(&[
        "check",
        &file,
        "--pipeline",
        "smartmem-gpu",
        "--device",
        "nvidia_vulkan",
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let lowered = ircc(&[
        &file,
        "--pipeline",
        "smartmem-gpu",
        "--device",
        "nvidia_vulkan",
    ]);
    assert_eq!(lowered.code, 0, "{}", lowered.stderr);
    // The products of K = 3072 split 24 ways, the gemms of K = 2168 17
    // ways; a kernel sums each one's partials, except the fourth's, whose
    // readers (reading it along its rows) sum them.
    let tiles = |splits: i64| {
        let tile = format!("tile = array<i64: 64, 64, 16, 4, 4, {splits}>");
        lowered.stdout.matches(&tile).count()
    };
    assert_eq!((tiles(24), tiles(17)), (3, 2));
    let launches: Vec<&str> = lowered
        .stdout
        .lines()
        .filter(|l| l.contains(ircc_dialects::kernel::KernelOp::Launch.name()))
        .collect();
    assert_eq!(launches.len(), 12, "{launches:#?}");
    let partials = "tensor<24x49x64xf32>, tensor<64xf32>";
    let readers = |kernel: &str| {
        launches
            .iter()
            .any(|l| l.contains(kernel) && l.contains(partials))
    };
    assert!(
        readers("_layer_norm") && readers("_softmax"),
        "{launches:#?}"
    );
    let diff = common::template_difference(&common::SPLIT_K, &["--pipeline", "smartmem-gpu"]);
    assert!(diff <= 1e-5, "{diff:e}");
}

/// Products normalizing their rows (tests/ir/kernel.lower/
/// matmul_norm_prologue.ir) in the kernel interpreter, beside the graph
/// interpreter: invocations holding their share of a row for both
/// moments, and one whose share is too long to hold, read twice.
#[test]
fn normalizing_products_match_the_interpreter() {
    let case = &common::NORM_PROLOGUE;
    let diff = common::template_difference_on(
        case,
        None,
        &["--passes", "graph.eliminate-layout-ops,kernel.lower"],
    );
    assert!(diff <= 1e-5, "{diff:e}");
}

/// A product normalizing rows that lie far from zero beside their
/// deviation (tests/ir/kernel.lower/matmul_norm_far.ir) in the kernel
/// interpreter (which rounds every operation to f32): its moments, the mean
/// and then the squared distances from it, keep the deviation (2.0e-5 off
/// the f64 reference) that one pass of sums about zero would cancel
/// (1.9e-3).
#[test]
fn normalizing_products_keep_the_deviation_of_rows_far_from_zero() {
    let diff = common::norm_far_difference(&[]);
    assert!(diff <= 1e-4, "{diff:e}");
}

/// `ircc stats` reports the fused groups (`kernels`) and the kernels a GPU
/// run dispatches (`dispatches`), the number the plan holds: a split
/// product adds the kernel that sums its partials, where its readers do
/// not; `--precision` counts the kernels of that precision.
#[test]
fn stats_count_the_dispatches_the_plan_runs() {
    let file = common::root().join("tests/ir/kernel.schedule/matmul_split_k.ir");
    let file = file.to_string_lossy();
    for (device, want) in [("nvidia_vulkan", 12), ("lavapipe", 8)] {
        let args = [&file[..], "--pipeline", "smartmem", "--device", device];
        let out = ircc(&[&["stats", "--json"][..], &args].concat());
        assert_eq!(out.code, 0, "{}", out.stderr);
        let stats: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(stats["kernels"], 8, "{device}: {stats}");
        assert_eq!(stats["dispatches"], want, "{device}: {stats}");
        let dir = common::scratch_dir("dispatches");
        let lowering = [&file[..], "--pipeline", "smartmem-gpu", "--device", device];
        let emit = ["--emit", "wgsl", "-o", dir.to_str().unwrap()];
        let emitted = ircc(&[&lowering[..], &emit[..]].concat());
        assert_eq!(emitted.code, 0, "{}", emitted.stderr);
        let plan: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("plan.json")).unwrap()).unwrap();
        assert_eq!(
            plan["dispatches"].as_array().unwrap().len(),
            want,
            "{device}"
        );
    }
    // A normalization feeding a product: the f32 template stages its
    // moments, the f16 cooperative one leaves it a kernel of its own.
    let dir = common::scratch_dir("dispatches_by_precision");
    let file = dir.join("ln.ir");
    std::fs::write(
        &file,
        "func.func @main(%x: tensor<1x512x256xf32>, %g: tensor<256xf32>, %b: tensor<256xf32>, %w: tensor<256x512xf32>) -> tensor<1x512x512xf32> {\n\
         %n = graph.layer_norm %x, %g, %b {axis = -1, epsilon = 1.0e-5 : f32} : tensor<1x512x256xf32>, tensor<256xf32>, tensor<256xf32> -> tensor<1x512x256xf32>\n\
         %m = graph.matmul %n, %w : tensor<1x512x256xf32>, tensor<256x512xf32> -> tensor<1x512x512xf32>\n\
         func.return %m : tensor<1x512x512xf32>\n}\n",
    )
    .unwrap();
    let file = file.to_string_lossy();
    for (precision, want) in [("f32", 1), ("f16", 2)] {
        let args = [
            &file[..],
            "--pipeline",
            "smartmem",
            "--device",
            "nvidia_vulkan",
            "--precision",
            precision,
        ];
        let out = ircc(&[&["stats", "--json"][..], &args].concat());
        assert_eq!(out.code, 0, "{}", out.stderr);
        let stats: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(stats["dispatches"], want, "{precision}: {stats}");
        let bundle = dir.join(precision);
        let compiled = ircc(&[&["compile", "-o", bundle.to_str().unwrap()][..], &args].concat());
        assert_eq!(compiled.code, 0, "{}", compiled.stderr);
        let plan: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(bundle.join("plan.json")).unwrap())
                .unwrap();
        assert_eq!(
            plan["dispatches"].as_array().unwrap().len(),
            want,
            "{precision}"
        );
    }
}

/// Both attention templates in the kernel interpreter, beside the graph
/// interpreter: ragged query and key blocks, value columns shared out
/// (tiled) or keys split over two lanes (rows), a float
/// mask, grouped heads and a causal window.
#[test]
fn attention_templates_match_the_interpreter() {
    let passes =
        |template: &str| format!("kernel.schedule{{attention={template}}},kernel.lower,kernel.ace");
    for (case, template) in [
        (&common::ATTENTION, "rows"),
        (&common::ATTENTION_TILED, "tiled"),
    ] {
        let file = common::root().join(case.file);
        // template_difference compiles for nvidia_vulkan too.
        let pipeline = ["--passes", &passes(template)];
        let on_nvidia = ["--device", "nvidia_vulkan", file.to_str().unwrap()];
        let out = ircc(&[&pipeline[..], &on_nvidia[..]].concat());
        assert_eq!(out.code, 0, "{}", out.stderr);
        let pick = format!("template = \"attention_{template}\"");
        assert_eq!(out.stdout.matches(&pick).count(), 5, "{template}");
        if template == "rows" {
            // The second and fifth ops' keys split over two lanes; the
            // others' key tiles are too small to combine two lanes through.
            assert_eq!(out.stdout.matches("tile = array<i64: 64, 2, 8>").count(), 2);
            assert_eq!(out.stdout.matches("tile = array<i64: 64, 1, 8>").count(), 3);
        }
        let diff = common::template_difference(case, &pipeline);
        assert!(diff <= 1e-5, "{template}: {diff:e}");
    }
}

/// The register template with its key tiles split over workgroups, in the
/// kernel interpreter beside the graph interpreter: each split's partials,
/// combined by the kernel that reads the result (one for each op).
#[test]
fn split_attention_matches_the_interpreter() {
    let case = &common::ATTENTION_SPLIT;
    let passes = "kernel.schedule{attention=rows},kernel.lower,kernel.ace";
    let file = common::root().join(case.file);
    let pipeline = ["--passes", passes];
    let on_nvidia = ["--device", "nvidia_vulkan", file.to_str().unwrap()];
    let out = ircc(&[&pipeline[..], &on_nvidia[..]].concat());
    assert_eq!(out.code, 0, "{}", out.stderr);
    for tile in ["64, 1, 8, 2", "64, 2, 8, 4"] {
        assert!(
            out.stdout.contains(&format!("tile = array<i64: {tile}>")),
            "{tile}"
        );
    }
    assert_eq!(out.stdout.matches("template = \"elementwise\"").count(), 3);
    let diff = common::template_difference(case, &pipeline);
    assert!(diff <= 1e-5, "{diff:e}");
}

/// Attention whose operands its kernel computes, as ViT-B/16's are (a
/// bias added to the qkv product's result, its heads split out by views):
/// each template stages its tiles reading the product's result and the
/// bias four words a load (kernel.load4), through the add and the views,
/// with no word of them read again one by one (a vector load the
/// element-wise code did not find would leave its words to scalar
/// loads), and matches the graph interpreter: the register and tiled
/// templates at f32, the cooperative one at f16 (20 keys: ragged tiles).
/// Only the query is read a word a load where a template does not stage
/// it: the register template holds its 16 words in registers, the tiled
/// one reads them in a loop.
#[test]
fn attention_reads_computed_operands_four_words_a_load() {
    let dir = common::scratch_dir("attention_vectors");
    let file = dir.join("biased.ir");
    let x = "tensor<20x1x96xf32>";
    let head = "tensor<1x2x20x16xf32>";
    let view = |first: i64| {
        format!(
            "index.view %qkv by affine_map<(d0, d1, d2, d3) -> (d2, 0, {first} + (d1 * 16 + d3))> : {x} to {head}"
        )
    };
    std::fs::write(
        &file,
        format!(
            "func.func @main(%x: {x}, %b: tensor<96xf32>) -> {head} {{
             %qkv = graph.add %x, %b : {x}, tensor<96xf32> -> {x}
             %q = {}
%k = {}
%v = {}
             %y = graph.attention %q, %k, %v {{scale = 0.25 : f32}} : {head}, {head}, {head} -> {head}
             func.return %y : {head}
}}
",
            view(0),
            view(32),
            view(64)
        ),
    )
    .unwrap();
    for (template, precision, rtol, query_words) in [
        ("rows", "f32", "1e-5", 16),
        ("tiled", "f32", "1e-5", 1),
        ("cooperative", "f16", "2e-3", 0),
    ] {
        let passes = format!(
            "graph.fuse,kernel.schedule{{attention={template},precision={precision}}},kernel.lower,kernel.ace"
        );
        let model = [
            file.to_str().unwrap(),
            "--passes",
            &passes,
            "--device",
            "nvidia_vulkan",
        ];
        let out = ircc(&[&["check"][..], &model, &["--rtol", rtol]].concat());
        assert_eq!(out.code, 0, "{template}: {}{}", out.stdout, out.stderr);
        let lowered = ircc(&model).stdout;
        assert!(
            lowered.contains(&format!("template = \"attention_{template}\"")),
            "{template}"
        );
        let loads = |op: &str, ty: &str| {
            lowered
                .lines()
                .filter(|l| l.contains(op) && l.contains(ty))
                .count()
        };
        for ty in ["tensor<20x1x96x", "tensor<96x"] {
            assert!(
                loads("kernel.load4 ", ty) > 0,
                "{template}: {ty}: {lowered}"
            );
            let scalar = loads("kernel.load ", ty);
            assert!(
                scalar <= query_words,
                "{template}: {ty}: {scalar} scalar loads"
            );
        }
    }
}

/// Where the template asked for does not fit, kernel.lower takes the
/// other, and where neither does, a kernel per result element: a value
/// size of 136 is nine columns an invocation for the tiled template (over
/// its eight) but fits the register one; heads of 128 fit neither.
#[test]
fn attention_falls_back_where_its_template_does_not_fit() {
    let dir = common::scratch_dir("attention_fallback");
    let file = dir.join("fallback.ir");
    std::fs::write(
        &file,
        "func.func @main(%q: tensor<1x2x5x8xf32>, %k: tensor<1x2x7x8xf32>, %v: tensor<1x2x7x136xf32>, \
         %q2: tensor<1x1x3x128xf32>, %k2: tensor<1x1x4x128xf32>, %v2: tensor<1x1x4x128xf32>) \
         -> (tensor<1x2x5x136xf32>, tensor<1x1x3x128xf32>) {\n\
         %0 = graph.attention %q, %k, %v : tensor<1x2x5x8xf32>, tensor<1x2x7x8xf32>, tensor<1x2x7x136xf32> -> tensor<1x2x5x136xf32>\n\
         %1 = graph.attention %q2, %k2, %v2 : tensor<1x1x3x128xf32>, tensor<1x1x4x128xf32>, tensor<1x1x4x128xf32> -> tensor<1x1x3x128xf32>\n\
         func.return %0, %1 : tensor<1x2x5x136xf32>, tensor<1x1x3x128xf32>\n}\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let passes = "kernel.schedule{attention=tiled},kernel.lower,kernel.ace";
    let out = ircc(&[file, "--passes", passes, "--device", "nvidia_vulkan"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let templates: Vec<&str> = out
        .stdout
        .lines()
        .filter_map(|l| l.split("template = \"").nth(1))
        .filter_map(|t| t.split('"').next())
        .collect();
    assert_eq!(
        templates,
        ["attention_rows", "elementwise"],
        "{}",
        out.stdout
    );
    let out = ircc(&["check", file, "--passes", passes]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
}

/// The kernel interpreter refuses a barrier that only some invocations
/// of a workgroup reach (undefined on a GPU, where most hang).
#[test]
fn a_divergent_barrier_is_an_error() {
    let dir = common::scratch_dir("divergent_barrier");
    let file = dir.join("divergent.ir");
    std::fs::write(&file, DIVERGENT_BARRIER).unwrap();
    let out = ircc(&["check", file.to_str().unwrap(), "--pipeline", "none"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("a barrier inside a kernel.if that only some invocations take"),
        "{}",
        out.stderr
    );
    // The same kernel with the barrier outside the kernel.if runs.
    let uniform = DIVERGENT_BARRIER.replace(
        "    kernel.if %c ({\n      kernel.barrier : () -> ()\n      kernel.yield : () -> ()\n    }) : i1 -> ()\n",
        "    kernel.barrier : () -> ()\n",
    );
    assert_ne!(uniform, DIVERGENT_BARRIER);
    std::fs::write(&file, uniform).unwrap();
    let out = ircc(&["check", file.to_str().unwrap(), "--pipeline", "none"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
}

/// Two invocations of four reach the barrier.
const DIVERGENT_BARRIER: &str = r#"module {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = kernel.launch %x {kernel = @k} : tensor<4xf32> -> tensor<4xf32>
    func.return %0 : tensor<4xf32>
  }
  kernel.func {sym_name = "k", function_type = (tensor<4xf32>, tensor<4xf32>) -> (), outputs = 1, workgroup_size = array<i64: 4, 1, 1>, grid = array<i64: 1, 1, 1>, template = "elementwise"} ({
  ^bb0(%in: tensor<4xf32>, %out: tensor<4xf32>):
    %i = kernel.id {kind = "global", axis = 0} : () -> index
    %two = kernel.constant {value = 2 : index} : () -> index
    %c = kernel.cmp %i, %two {pred = "lt"} : index, index -> i1
    %x = kernel.load %in, %i {map = affine_map<(d0) -> (d0)>} : tensor<4xf32>, index -> f32
    kernel.if %c ({
      kernel.barrier : () -> ()
      kernel.yield : () -> ()
    }) : i1 -> ()
    kernel.store %x, %out, %i {map = affine_map<(d0) -> (d0)>} : f32, tensor<4xf32>, index -> ()
    kernel.return : () -> ()
  }) : () -> ()
}
"#;

/// graph.attention in the kernel interpreter: grouped heads, a boolean
/// mask, a causal frontier and a soft cap, against the graph interpreter.
#[test]
fn attention_checks_in_the_kernel_interpreter() {
    let file = common::root().join("tests/ir/graph/attention.ir");
    for seed in ["0", "1"] {
        let out = ircc(&[
            "check",
            &file.to_string_lossy(),
            "--pipeline",
            "smartmem-gpu",
            "--seed",
            seed,
        ]);
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
        let lower = ircc_passes::decl::KernelLowerOptions::NAME;
        assert!(out.stdout.contains(lower), "{}", out.stdout);
    }
    // A mask of no axes broadcasts to every score.
    let dir = common::scratch_dir("attention");
    let scalar = dir.join("scalar_mask.ir");
    let ty = "tensor<1x1x2x4xf32>, tensor<1x1x3x4xf32>, tensor<1x1x3x2xf32>, tensor<f32>";
    std::fs::write(
        &scalar,
        format!(
            "func.func @main(%q: tensor<1x1x2x4xf32>, %k: tensor<1x1x3x4xf32>, %v: tensor<1x1x3x2xf32>, %m: tensor<f32>) -> tensor<1x1x2x2xf32> {{
  %0 = graph.attention %q, %k, %v, %m : {ty} -> tensor<1x1x2x2xf32>
  func.return %0 : tensor<1x1x2x2xf32>
}}
"
        ),
    )
    .unwrap();
    let out = ircc(&[
        "check",
        scalar.to_str().unwrap(),
        "--pipeline",
        "smartmem-gpu",
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
}

/// The cooperative-matrix template in the kernel interpreter, beside the
/// graph interpreter (`ircc check`): a batched matmul, a padded
/// convolution, a gemm, 64x32 tiles, ragged rows and K, a transposed B
/// and a fused bias and relu, K split (summed by a kernel, by a reader,
/// and into a texture), with the schedules kernel.schedule gives
/// (`tests/ir/kernel.schedule/cooperative.ir` shows which it gives;
/// products small enough for the interpreter leave the H100 idle, so it
/// gives them the FMA template). Within f16's rounding of the operands:
/// the products accumulate in f32. lavapipe and PoCL have no cooperative
/// matrices; the GPU machine checks the template there
/// (scripts/gpu_bench.py --check).
#[test]
fn cooperative_products_match_the_interpreter() {
    for file in [
        "tests/data/cooperative_products.ir",
        "tests/ir/kernel.lower/matmul_cooperative.ir",
    ] {
        let passes = "kernel.lower,kernel.ace";
        let kernels = checked_kernels(file, passes, "2e-3", "matmul_cooperative");
        assert!(kernels >= 2, "{file}: {kernels} cooperative kernels");
    }
    let file = "tests/data/cooperative_split_texture.ir";
    let passes = "texture.map,kernel.lower,kernel.ace";
    let kernels = checked_kernels(file, passes, "2e-3", "matmul_cooperative");
    assert_eq!(kernels, 1, "{file}");
}

/// The cooperative attention template in the kernel interpreter, beside
/// the graph interpreter (`ircc check`): the schedules of
/// `tests/data/cooperative_attention.ir` (ragged blocks and tiles, float
/// and boolean masks, a causal window, grouped heads, a soft cap, tiles
/// read ahead or not) and of the kernel.lower filetest, then attention as
/// exporters write it (`q @ kt`, a scale, softmax, `@ v`), which smartmem
/// folds and kernel.schedule gives the template at f16 on nvidia_vulkan
/// (132 keys, three tiles, the last ragged): its keys are read through
/// the transposed view, four keys a load. Within f16's rounding:
/// scores and sums accumulate in f32, the weights are f16. lavapipe and
/// PoCL have no cooperative matrices; the GPU machine checks the template
/// against the FMA ones (`scripts/attention_bench.py --check`).
#[test]
fn cooperative_attention_matches_the_interpreter() {
    for file in [
        "tests/data/cooperative_attention.ir",
        "tests/ir/kernel.lower/attention_cooperative.ir",
    ] {
        let passes = "kernel.lower,kernel.ace";
        let kernels = checked_kernels(file, passes, "2e-3", "attention_cooperative");
        assert!(kernels >= 1, "{file}: {kernels} cooperative kernels");
    }
    let dir = common::scratch_dir("cooperative_attention");
    let file = dir.join("exported.ir");
    let t = |d: &str| format!("tensor<1x2x{d}xf32>");
    let (q, kt, s) = (t("132x32"), t("32x132"), t("132x132"));
    std::fs::write(
        &file,
        format!(
            "func.func @main(%q: {q}, %kt: {kt}, %v: {q}) -> {q} {{\n\
             %c = graph.constant {{value = dense<0.17> : tensor<f32>}} : () -> tensor<f32>\n\
             %s = graph.matmul %q, %kt : {q}, {kt} -> {s}\n\
             %t = graph.mul %s, %c : {s}, tensor<f32> -> {s}\n\
             %p = graph.softmax %t {{axis = -1}} : {s} -> {s}\n\
             %y = graph.matmul %p, %v : {s}, {q} -> {q}\n\
             func.return %y : {q}\n}}\n"
        ),
    )
    .unwrap();
    let passes = "canonicalize,graph.fold-attention,canonicalize,graph.eliminate-layout-ops,\
                  index.simplify,graph.fuse,kernel.schedule{precision=f16},kernel.lower,kernel.ace";
    let model = [
        file.to_str().unwrap(),
        "--passes",
        passes,
        "--device",
        "nvidia_vulkan",
    ];
    let out = ircc(&[&["check"][..], &model, &["--rtol", "2e-3"]].concat());
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let lowered = ircc(&model).stdout;
    assert!(
        lowered.contains("template = \"attention_cooperative\""),
        "the exported form takes the cooperative template"
    );
    // (The kernel's keys are f16: its tensor type without the element.)
    let keys_in_vectors = lowered
        .lines()
        .any(|l| l.contains("kernel.load4 ") && l.contains("tensor<1x2x32x132x"));
    assert!(keys_in_vectors, "four keys a load: {lowered}");
}

/// Row kernels in the kernel interpreter, beside the graph interpreter: a
/// layer norm held in registers (its fused add computed once), a softmax
/// too long for them, read in a loop, and short rows sharing workgroups.
#[test]
fn row_kernels_match_the_interpreter() {
    let kernels = checked_kernels(
        common::ROWS.file,
        "kernel.lower,kernel.ace",
        "1e-4",
        "row_reduction",
    );
    assert_eq!(kernels, 3);
}

/// Row kernels writing texels (lanes along the row: held in registers,
/// fewer texels than invocations, along a middle axis, read in a loop) in
/// the kernel interpreter, beside the graph interpreter.
#[test]
fn row_kernels_writing_texels_match_the_interpreter() {
    let kernels = checked_kernels(
        common::ROW_TEXELS.file,
        "kernel.lower,kernel.ace",
        "1e-4",
        "row_reduction",
    );
    assert_eq!(kernels, 4);
}

/// Column reductions in the kernel interpreter, beside the graph
/// interpreter: a mean through a transposed view, a mean of a fused sum of
/// a channel-last and a channel-first tensor, a maximum down a matrix's
/// rows with a ragged last step; neighbouring invocations take
/// neighbouring rows (the workgroup's first axis).
#[test]
fn column_reductions_match_the_interpreter() {
    let kernels = checked_kernels(
        common::ROW_COLUMNS.file,
        "graph.eliminate-layout-ops,kernel.lower,kernel.ace",
        "1e-4",
        "row_reduction",
    );
    assert_eq!(kernels, 3);
    let file = common::root().join(common::ROW_COLUMNS.file);
    let lowered = ircc(&[
        file.to_str().unwrap(),
        "--passes",
        "graph.eliminate-layout-ops,kernel.lower",
    ]);
    assert_eq!(lowered.code, 0, "{}", lowered.stderr);
    // Each kernel's rows across the workgroup's first axis, its slices
    // across the second, as its schedule says.
    for (kernel, workgroup) in [
        ("k0_reduce_mean", "64, 4, 1"),
        ("k1_reduce_mean", "32, 8, 1"),
        ("k2_reduce_max", "16, 16, 1"),
    ] {
        let func = lowered
            .stdout
            .lines()
            .find(|l| l.contains(&format!("sym_name = \"{kernel}\"")))
            .unwrap_or_else(|| panic!("no {kernel}"));
        assert!(
            func.contains(&format!("workgroup_size = array<i64: {workgroup}>")),
            "{kernel}: {func}"
        );
    }
    // Under adreno740 a column mean reads a layer norm's result from the
    // texture layout.select gives it (lanes along the channels it keeps),
    // where the row form's read went through a copy.
    let kernels = checked_kernels(
        "tests/ir/layout.select/column.ir",
        "graph.eliminate-layout-ops,layout.select,texture.map,kernel.lower,kernel.ace",
        "1e-4",
        "row_reduction",
    );
    assert_eq!(kernels, 4);
}

/// The depthwise convolution template in the kernel interpreter, beside
/// the graph interpreter: the schedules of its kernel.lower filetest
/// (ragged blocks of outputs and channels, padding, stride, dilation, two
/// batches, a fused producer, bias and relu, an NHWC input read through a
/// transposed view, a sum of NHWC inputs staged four channels a load of
/// each).
#[test]
fn depthwise_convolutions_match_the_interpreter() {
    let passes = "graph.eliminate-layout-ops,kernel.lower,kernel.ace";
    let kernels = checked_kernels(common::DEPTHWISE.file, passes, "1e-4", "conv_depthwise");
    assert_eq!(kernels, 4);
    let file = common::root().join(common::DEPTHWISE.file);
    let lowered = ircc(&[
        file.to_str().unwrap(),
        "--passes",
        "graph.eliminate-layout-ops,kernel.lower",
    ]);
    assert_eq!(lowered.code, 0, "{}", lowered.stderr);
    // Each round reads the two inputs a vector each, and no word of them
    // one by one.
    use ircc_dialects::kernel::KernelOp;
    let load4 = KernelOp::Load4.name();
    let last = lowered.stdout.rsplit(KernelOp::Func.name()).next().unwrap();
    assert!(last.matches(load4).count() >= 4, "{last}");
    for arg in ["%arg0", "%arg1"] {
        let scalar = format!("{} {arg},", KernelOp::Load.name());
        assert!(!last.contains(&scalar), "{last}");
    }
}

/// The grouped convolution template's register blocks in the kernel
/// interpreter, beside the graph interpreter: the schedules of its
/// kernel.lower filetest (ragged blocks of columns and workgroups,
/// padding, strides, dilation, two batches, a fused producer, bias and
/// relu, an NHWC input read through a transposed view, a 2x5 kernel).
#[test]
fn grouped_convolutions_in_register_blocks_match_the_interpreter() {
    let passes = "graph.eliminate-layout-ops,kernel.lower,kernel.ace";
    let kernels = checked_kernels(common::GROUPED_BLOCKS.file, passes, "1e-4", "conv_grouped");
    assert_eq!(kernels, 4);
}

/// Grouped convolutions as batches of implicit GEMMs in the kernel
/// interpreter, beside the graph interpreter: two products (one split
/// along K, which a kernel of its own sums) and one per element.
#[test]
fn grouped_convolutions_match_the_interpreter() {
    let passes = "graph.eliminate-layout-ops,kernel.lower,kernel.ace";
    let kernels = checked_kernels(common::GROUPED_CONV.file, passes, "1e-4", "matmul_tiled");
    assert_eq!(kernels, 2);
    // For a texture profile the first product writes texels, four
    // channels of its second group at a time (once written into the
    // first group's texels), which the second reads.
    let dir = common::scratch_dir("grouped_texels");
    let file = dir.join("g.ir");
    let conv = "graph.conv %IN, %w, %b {group = 2, pads = array<i64: 1, 1, 1, 1>} : tensor<1x64x9x9xf32>, tensor<64x32x3x3xf32>, tensor<64xf32> -> tensor<1x64x9x9xf32>";
    std::fs::write(
        &file,
        format!(
            "func.func @main(%x: tensor<1x64x9x9xf32>, %w: tensor<64x32x3x3xf32>, %b: tensor<64xf32>) -> tensor<1x64x9x9xf32> {{\n\
             %0 = {}\n\
             %1 = graph.relu %0 : tensor<1x64x9x9xf32> -> tensor<1x64x9x9xf32>\n\
             %2 = {}\n\
             func.return %2 : tensor<1x64x9x9xf32>\n}}\n",
            conv.replace("%IN", "%x"),
            conv.replace("%IN", "%1")
        ),
    )
    .unwrap();
    let model = [
        file.to_str().unwrap(),
        "--pipeline",
        "smartmem-gpu",
        "--device",
        "adreno740",
    ];
    let out = ircc(&[&["check"][..], &model].concat());
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let stores = ircc_dialects::kernel::KernelOp::TextureStore.name();
    assert!(ircc(&model).stdout.contains(stores));
}

/// A kernel's FLOP count is not bounded like a dimension: attention over
/// 2048 queries and keys of 12 heads of 64 is 12.9 GFLOP in one kernel,
/// which kernel.lower records (verification refused it as above 2^31).
#[test]
fn a_kernel_counts_flops_beyond_two_to_the_31() {
    let dir = common::scratch_dir("large_flops");
    let file = dir.join("attention.ir");
    let t = "tensor<1x12x2048x64xf32>";
    std::fs::write(
        &file,
        format!(
            "func.func @main(%q: {t}, %k: {t}, %v: {t}) -> {t} {{\n\
             %0 = graph.attention %q, %k, %v : {t}, {t}, {t} -> {t}\n\
             func.return %0 : {t}\n}}\n"
        ),
    )
    .unwrap();
    let out = ircc(&[
        file.to_str().unwrap(),
        "--passes",
        "kernel.schedule,kernel.lower",
        "--device",
        "nvidia_vulkan",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("flops = 12884901888"), "{}", out.stdout);
}

/// Runs `ircc check` on `file` (relative to the repository) through
/// `passes`, failing unless every pass agrees with the interpreter within
/// `rtol`; gives how many kernels of `template` those passes build.
fn checked_kernels(file: &str, passes: &str, rtol: &str, template: &str) -> usize {
    let path = common::root().join(file);
    let model = [path.to_str().unwrap(), "--passes", passes];
    let out = ircc(&[&["check"][..], &model, &["--rtol", rtol]].concat());
    assert_eq!(out.code, 0, "{file}: {}{}", out.stdout, out.stderr);
    ircc(&model)
        .stdout
        .matches(&format!("template = \"{template}\""))
        .count()
}
