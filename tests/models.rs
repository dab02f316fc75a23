//! The shared networks: each imports, runs through the reference
//! interpreter, and matches onnxruntime's stored output within 1e-4; the
//! torchscript exports fold to about the size of their dynamo twins.
//!
//! Models are read from `tests/models/`.

mod common;

use ircc_core::{Module, Type};
use ircc_onnx::ImportOptions;

fn graph_ops(m: &Module) -> usize {
    let mut n = 0;
    m.walk(|op| {
        let name = &m.op(op).name;
        if name.starts_with("graph.") && name != "graph.constant" && name != "graph.param" {
            n += 1;
        }
    });
    n
}

#[test]
fn shared_models_match_onnxruntime() {
    let registry = ircc_dialects::registry().unwrap();
    let (mut passed, mut skipped) = (0, 0);
    let mut sizes = std::collections::HashMap::new();
    for name in common::SHARED_MODELS {
        let Some(path) = common::find_model(name) else {
            assert!(
                std::env::var_os("IRCC_REQUIRE_ONNX_TESTS").is_none(),
                "{name}.onnx not found"
            );
            skipped += 1;
            continue;
        };
        let imported = ircc_onnx::import_file(&path, &registry, &ImportOptions::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        ircc_core::verify::verify(&imported.module, &registry, Default::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let input = ircc_reference::read_npy(&path.with_extension("input.npy")).unwrap();
        let want = ircc_reference::read_npy(&path.with_extension("output.npy")).unwrap();
        let mut weights = ircc_reference::MemoryWeights(imported.weights.into_iter().collect());
        let out = ircc_reference::run_function(
            &imported.module,
            &registry,
            "main",
            vec![input],
            &mut weights,
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(out[0].shape(), want.shape(), "{name}");
        let diff = out[0]
            .to_f64()
            .iter()
            .zip(want.to_f64().iter())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(diff <= 1e-4, "{name}: max abs difference {diff}");
        eprintln!(
            "{name}: {} graph ops, max abs difference {diff:.2e}",
            graph_ops(&imported.module)
        );
        sizes.insert(name, graph_ops(&imported.module));
        if name == "swin_t_w24" {
            assert_shape_arithmetic_is_gone(&imported.module);
        }
        passed += 1;
    }
    for pair in common::SHARED_MODELS.chunks(2) {
        if let (Some(&ts), Some(&dy)) = (sizes.get(pair[0]), sizes.get(pair[1])) {
            assert!(
                ts as f64 <= dy as f64 * 1.1,
                "{}: {ts} graph ops against {dy} for its dynamo twin",
                pair[0]
            );
        }
    }
    if let Some(&n) = sizes.get("swin_t_w24") {
        assert!(n <= 800, "swin_t_w24 folds to {n} graph ops");
    }
    eprintln!("{passed} passed, 0 failed, {skipped} skipped");
}

/// No op of the exporters' shape arithmetic survives: the ops with such a
/// counterpart in the graph dialect are absent or compute on floats.
fn assert_shape_arithmetic_is_gone(m: &Module) {
    m.walk(|op| {
        let o = m.op(op);
        assert!(
            !matches!(
                o.name.as_str(),
                "graph.equal" | "graph.where" | "graph.expand" | "graph.cast" | "graph.unsqueeze"
            ),
            "{} survived import",
            o.name
        );
        if matches!(
            o.name.as_str(),
            "graph.gather" | "graph.concat" | "graph.div"
        ) {
            let Type::Tensor(t) = m.value_type(o.results[0]) else {
                panic!("not a tensor")
            };
            assert!(t.elem.is_float(), "{} on {t} survived import", o.name);
        }
    });
}
