//! Fusion and elimination change how a model is computed, never what: the
//! shared models give bit-identical results under `none` and `dnnfusion`,
//! and under `smartmem` results that differ only by rounding (its
//! graph.fold-attention computes attention as one op, rounded once where
//! the product, softmax and product were rounded each); each pipeline
//! launches no more kernels than the one before it.

mod common;

use ircc_core::Module;
use ircc_core::pass::{PassManager, PassRegistry, RunOptions, parse_pipeline_file};
use ircc_dialects::texture::TextureOp;

fn pipeline(m: &mut Module, name: &str) {
    let registry = ircc_dialects::registry().unwrap();
    let mut passes = PassRegistry::new();
    ircc_passes::register_all(&mut passes);
    let text =
        std::fs::read_to_string(common::root().join(format!("spec/pipelines/{name}.pipeline")))
            .unwrap();
    let mut pm = PassManager::from_specs(&passes, &parse_pipeline_file(&text).unwrap()).unwrap();
    pm.run(m, &registry, &RunOptions::default(), &mut std::io::sink())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
}

fn kernels(m: &Module) -> usize {
    let body = m.entry_block(m.functions()[0]).unwrap();
    m.blocks[body]
        .ops
        .iter()
        .filter(|&&op| {
            let n = &m.op(op).name;
            n.starts_with("graph.") && n != "graph.constant" && n != "graph.param"
        })
        .count()
}

#[test]
fn pipelines_keep_results_and_cut_kernels() {
    let registry = ircc_dialects::registry().unwrap();
    let root = common::root();
    let mut checked = 0;
    for name in [
        "bert_l2_w64",
        "vit_l4_w64_dynamo",
        "convnext_w16_dynamo",
        "swin_t_w24_dynamo",
    ] {
        let path = root.join(format!("tests/models/{name}.onnx"));
        let imported = ircc_onnx::import_file(&path, &registry, &Default::default()).unwrap();
        let input = ircc_reference::read_npy(&path.with_extension("input.npy")).unwrap();
        let weights: std::collections::HashMap<_, _> = imported.weights.into_iter().collect();
        let run = |m: &Module| {
            let mut env = ircc_reference::MemoryWeights(weights.clone());
            ircc_reference::run_function(m, &registry, "main", vec![input.clone()], &mut env)
                .unwrap_or_else(|e| panic!("{name}: {e}"))
        };
        let reference = run(&imported.module);
        let mut counts = vec![kernels(&imported.module)];
        for p in ["dnnfusion", "smartmem"] {
            let mut m = imported.module.clone();
            pipeline(&mut m, p);
            let got = run(&m);
            if p == "dnnfusion" {
                assert_eq!(got, reference, "{name} under {p}");
            } else {
                assert_eq!(got.len(), reference.len());
                let difference = got
                    .iter()
                    .zip(&reference)
                    .map(|(g, w)| common::max_relative_tensors(g, w))
                    .fold(0.0, f64::max);
                assert!(difference < 1e-5, "{name} under {p}: {difference}");
            }
            counts.push(kernels(&m));
        }
        eprintln!(
            "{name}: kernels none {} / dnnfusion {} / smartmem {}",
            counts[0], counts[1], counts[2]
        );
        assert!(
            counts[0] >= counts[1] && counts[1] >= counts[2],
            "{name}: {counts:?}"
        );
        checked += 1;
    }
    assert_eq!(checked, 4);
}

#[test]
fn spec_dir_tables_and_pipelines_are_read_at_run_time() {
    // A fusion table that forbids fusing one one-to-one op into another,
    // and a pipeline of one's own, given without rebuilding ircc.
    let dir = common::scratch_dir("spec-dir");
    std::fs::create_dir_all(dir.join("pipelines")).unwrap();
    let table = std::fs::read_to_string(common::root().join("spec/fusion.toml")).unwrap();
    let red = table.replace(
        "one-to-one   = [\"one-to-one green\"",
        "one-to-one   = [\"one-to-one red\"",
    );
    assert_ne!(red, table);
    std::fs::write(dir.join("fusion.toml"), red).unwrap();
    std::fs::write(
        dir.join("pipelines/tiny.pipeline"),
        "canonicalize\ngraph.fuse{max-ops=2}\n",
    )
    .unwrap();
    let bert = common::find_model("bert_l2_w64").expect("bert_l2_w64.onnx");
    let spec = dir.to_str().unwrap();
    let kernels = |extra: &[&str]| {
        let mut args = vec!["stats", bert.to_str().unwrap(), "--json"];
        args.extend_from_slice(extra);
        let r = common::ircc(&args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let stats: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        stats["kernels"].as_u64().unwrap()
    };
    let built_in = kernels(&["--pipeline", "dnnfusion"]);
    let from_dir = kernels(&["--pipeline", "dnnfusion", "--spec-dir", spec]);
    assert!(
        from_dir > built_in,
        "{from_dir} kernels, built in {built_in}"
    );
    let tiny = kernels(&["--pipeline", "tiny", "--spec-dir", spec]);
    assert!(tiny > from_dir, "graph.fuse{{max-ops=2}} gave {tiny}");
    // The listing says where the tables came from.
    let r = common::ircc(&["--list-fusion-tables", "--spec-dir", spec]);
    assert!(
        r.stdout.starts_with("# fusion tables from "),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("one-to-one red"), "{}", r.stdout);
    // A broken table or a missing folder is an error naming it.
    std::fs::write(dir.join("fusion.toml"), "garbage").unwrap();
    let r = common::ircc(&[
        bert.to_str().unwrap(),
        "--pipeline",
        "dnnfusion",
        "--spec-dir",
        spec,
    ]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("fusion.toml") && r.stderr.contains("line 1"),
        "{}",
        r.stderr
    );
    let r = common::ircc(&[
        "stats",
        bert.to_str().unwrap(),
        "--spec-dir",
        "/nonexistent-ircc-spec",
    ]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("not a directory"), "{}", r.stderr);
}

/// A spec folder's entry that is not a regular file inside it — a folder,
/// a FIFO (which would block a read), a link out of the folder or to
/// nothing — is refused by name, not passed over for the built-in file.
#[cfg(unix)]
#[test]
fn spec_dir_entries_that_are_not_files_are_refused() {
    let mlp = common::root().join("examples/mlp.ir");
    let mlp = mlp.to_str().unwrap();
    let cases: [(&str, &str, &[&str]); 5] = [
        ("folder", "fusion.toml", &["--pipeline", "smartmem"]),
        ("fifo", "fusion.toml", &["--pipeline", "smartmem"]),
        (
            "outside",
            "pipelines/smartmem.pipeline",
            &["--pipeline", "smartmem"],
        ),
        (
            "dangling",
            "rules/algebra.rules",
            &["--pipeline", "smartmem"],
        ),
        (
            "fifo",
            "devices/adreno740.toml",
            &["--pipeline", "smartmem", "--device", "adreno740"],
        ),
    ];
    for (kind, entry, args) in cases {
        let dir = common::scratch_dir(&format!("spec-entry-{kind}"));
        let path = dir.join(entry);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        match kind {
            "folder" => std::fs::create_dir(&path).unwrap(),
            "fifo" => {
                let made = std::process::Command::new("mkfifo").arg(&path).status();
                assert!(made.unwrap().success());
            }
            "outside" => {
                std::os::unix::fs::symlink(common::root().join("README.md"), &path).unwrap()
            }
            _ => std::os::unix::fs::symlink("nowhere", &path).unwrap(),
        }
        let mut argv = vec![mlp, "--spec-dir", dir.to_str().unwrap()];
        argv.extend_from_slice(args);
        let r = common::ircc(&argv);
        assert_eq!(r.code, 1, "{kind} {entry}: {}", r.stderr);
        assert!(
            r.stderr.contains("--spec-dir") && r.stderr.contains(entry),
            "{kind} {entry}: {}",
            r.stderr
        );
    }
    // A folder on the way that is no folder (a file, a link to nowhere).
    for kind in ["file", "dangling"] {
        let dir = common::scratch_dir(&format!("spec-folder-{kind}"));
        let pipelines = dir.join("pipelines");
        if kind == "file" {
            std::fs::write(&pipelines, "").unwrap();
        } else {
            std::os::unix::fs::symlink("nowhere", &pipelines).unwrap();
        }
        let r = common::ircc(&[
            mlp,
            "--spec-dir",
            dir.to_str().unwrap(),
            "--pipeline",
            "smartmem",
        ]);
        assert_eq!(r.code, 1, "{kind}: {}", r.stderr);
        assert!(
            r.stderr.contains("--spec-dir") && r.stderr.contains("pipelines"),
            "{kind}: {}",
            r.stderr
        );
    }
}

#[test]
fn spec_dir_device_profiles_are_read_at_run_time() {
    // The paper's GPU with a texture extent of 4: nothing fits a texture.
    let dir = common::scratch_dir("spec-dir");
    std::fs::create_dir_all(dir.join("devices")).unwrap();
    let profile = std::fs::read_to_string(common::root().join("spec/devices/adreno740.toml"))
        .unwrap()
        .replace(
            "name = \"adreno740\"",
            "name = \"tiny\"\nmax_texture_extent = 4",
        )
        .replace(", \"max_texture_extent\"", "");
    std::fs::write(dir.join("devices/tiny.toml"), profile).unwrap();
    let model = common::root().join("examples/conv_block.ir");
    let smartmem = |extra: &[&str]| {
        let mut args = vec![model.to_str().unwrap(), "--pipeline", "smartmem"];
        args.extend_from_slice(extra);
        common::ircc(&args)
    };
    let textures = |extra: &[&str]| {
        let r = smartmem(extra);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout.matches(TextureOp::Place.name()).count()
    };
    assert!(textures(&[]) > 0, "adreno740 gives conv_block a texture");
    let spec = dir.to_str().unwrap();
    let tiny = ["--device", "tiny", "--spec-dir", spec];
    assert_eq!(textures(&tiny), 0);
    // The printers read the same profile.
    let emit = [
        model.to_str().unwrap(),
        "--pipeline",
        "smartmem-gpu",
        "--emit",
        "wgsl",
    ];
    let r = common::ircc(&[&emit[..], &tiny[..]].concat());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("@compute"), "{}", r.stdout);
    // Without the folder the name is unknown.
    let r = smartmem(&tiny[..2]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("unknown device 'tiny'"), "{}", r.stderr);
}

/// GroupNormalization fuses as LayerNormalization does: a block of either
/// over the same tensor, read by a 1x1 convolution and a ReLU, takes as
/// many kernels (the normalization's statistics, then the product that
/// normalizes its operand as it reads it) on a GPU target and a texture
/// one.
#[test]
fn group_norm_takes_no_more_kernels_than_layer_norm() {
    use common::onnx::{model, node, value_info};
    use ircc_onnx::proto::{AttributeProto, ModelProto, TensorProto, attr_type, data_type};
    use prost::Message;

    let floats = |name: &str, dims: &[i64], value: f32| TensorProto {
        dims: dims.to_vec(),
        data_type: data_type::FLOAT,
        float_data: vec![value; dims.iter().product::<i64>() as usize],
        name: name.into(),
        ..Default::default()
    };
    let int_attr = |name: &str, v: i64| AttributeProto {
        name: name.into(),
        i: v,
        r#type: attr_type::INT,
        ..Default::default()
    };
    let (c, side) = (32, 16);
    let block = |norm: ircc_onnx::proto::NodeProto, scale: &[i64]| -> Vec<u8> {
        let nodes = vec![
            norm,
            node("conv", "Conv", &["n", "w"], "c", vec![]),
            node("relu", "Relu", &["c"], "y", vec![]),
        ];
        let mut m =
            ModelProto::decode(&model(nodes, vec![value_info("x", &[1, c, side, side])], "y")[..])
                .unwrap();
        m.opset_import[0].version = 21;
        m.graph.as_mut().unwrap().initializer = vec![
            floats("s", scale, 1.0),
            floats("b", scale, 0.0),
            floats("w", &[c, c, 1, 1], 0.01),
        ];
        m.encode_to_vec()
    };
    let group = block(
        node(
            "gn",
            "GroupNormalization",
            &["x", "s", "b"],
            "n",
            vec![int_attr("num_groups", 8)],
        ),
        &[c],
    );
    let layer = block(
        node(
            "ln",
            "LayerNormalization",
            &["x", "s", "b"],
            "n",
            vec![int_attr("axis", 1)],
        ),
        &[c, side, side],
    );
    let dir = common::scratch_dir("group-norm-fusion");
    let dispatches = |name: &str, bytes: &[u8], device: &str| -> usize {
        let file = dir.join(format!("{name}.onnx"));
        std::fs::write(&file, bytes).unwrap();
        let out = dir.join(format!("{name}-{device}"));
        let compiled = common::ircc(&[
            "compile",
            file.to_str().unwrap(),
            "--pipeline",
            "smartmem",
            "--device",
            device,
            "-o",
            out.to_str().unwrap(),
        ]);
        assert_eq!(compiled.code, 0, "{name}: {}", compiled.stderr);
        let plan: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("plan.json")).unwrap()).unwrap();
        plan["dispatches"].as_array().unwrap().len()
    };
    for device in ["nvidia_vulkan", "adreno740"] {
        let (g, l) = (
            dispatches("group", &group, device),
            dispatches("layer", &layer, device),
        );
        assert!(
            g <= l,
            "{device}: GroupNormalization {g} kernels, LayerNormalization {l}"
        );
        assert_eq!(
            l, 2,
            "{device}: the layer norm block fuses into statistics and a product"
        );
    }
}
