//! Fusion and elimination change how a model is computed, never what: the
//! shared models give bit-identical results under `none`, `dnnfusion` and
//! `smartmem`, and each pipeline launches no more kernels than the one
//! before it.

mod common;

use ircc_core::pass::{PassManager, PassRegistry, RunOptions, parse_pipeline_file};
use ircc_core::{Module, Tensor};

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
        let weights: std::collections::HashMap<String, Tensor> =
            imported.weights.into_iter().collect();
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
            assert_eq!(run(&m), reference, "{name} under {p}");
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
