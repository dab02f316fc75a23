//! NaN and ±inf through every element-wise op and reduction on the
//! interpreter, against the tables of `common::special` (ONNX's answers).
//! The GPU backends are held to the same tables in gpu.rs and opencl.rs.

mod common;

use common::special::{self, COLUMNS, INF, NAN, ROWS};
use ircc_core::interp::NoWeights;
use ircc_core::{ElemType, Tensor, parse_module};
use ndarray::{ArrayD, IxDyn};
use proptest::prelude::*;

fn run(x: &[f64], y: &[f64]) -> Vec<Vec<f64>> {
    let registry = ircc_dialects::registry().unwrap();
    let module = parse_module(&special::module("f32"), Some("special.ir")).unwrap();
    ircc_core::verify::verify(&module, &registry, Default::default()).unwrap();
    let input = |v: &[f64]| {
        Tensor::float(
            ElemType::F32,
            ArrayD::from_shape_vec(IxDyn(&[ROWS, COLUMNS]), v.to_vec()).unwrap(),
        )
    };
    ircc_reference::run_function(
        &module,
        &registry,
        "main",
        vec![input(x), input(y)],
        &mut NoWeights,
    )
    .unwrap()
    .iter()
    .map(|t| t.to_f64().iter().copied().collect())
    .collect()
}

#[test]
fn every_op_gives_onnx_answers_for_nan_and_infinities_on_the_interpreter() {
    let (x, y) = special::inputs();
    let wrong = special::wrong_values(&run(&x, &y), &x, &y, 1e-6);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A value of an f32 tensor: a special one about half the time.
fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(NAN),
        Just(INF),
        Just(-INF),
        Just(0.0),
        Just(-0.0),
        (-3.0f64..3.0).prop_map(|v| v as f32 as f64),
        (-3.0f64..3.0).prop_map(|v| v as f32 as f64),
        (-3.0f64..3.0).prop_map(|v| v as f32 as f64),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn any_mix_of_special_values_gives_onnx_answers(
        x in proptest::collection::vec(value(), ROWS * COLUMNS),
        y in proptest::collection::vec(value(), ROWS * COLUMNS),
    ) {
        let wrong = special::wrong_values(&run(&x, &y), &x, &y, 1e-6);
        prop_assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
