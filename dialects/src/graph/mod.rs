//! The graph dialect: ONNX operators with static shapes. The declarations
//! are `spec/dialects/graph.toml`; this module binds each to its shape
//! inference and its interpreter.

mod eval_elementwise;
mod eval_layout;
mod eval_nn;
mod fused;
pub mod shape;

pub use eval_layout::{for_each_index, gather_by, strides_of};

use ircc_core::Diagnostic;
use ircc_core::registry::{InferFn, InterpretFn, OpHooks, Registry, VerifyFn};

use eval_elementwise as ew;
use eval_layout as lay;
use eval_nn as nn;

pub const SPEC: &str = include_str!("../../../spec/dialects/graph.toml");

fn hooks(infer: InferFn, interpret: InterpretFn) -> OpHooks {
    OpHooks {
        infer: Some(infer),
        verify: None,
        interpret: Some(interpret),
    }
}

fn checked(verify: VerifyFn, interpret: InterpretFn) -> OpHooks {
    OpHooks {
        infer: None,
        verify: Some(verify),
        interpret: Some(interpret),
    }
}

/// Every graph op with its hooks.
pub fn op_hooks() -> Vec<(&'static str, OpHooks)> {
    let mut v = vec![
        ("graph.conv", hooks(shape::conv, nn::conv)),
        (
            "graph.conv_transpose",
            hooks(shape::conv_transpose, nn::conv_transpose),
        ),
        ("graph.matmul", hooks(shape::matmul, nn::matmul)),
        ("graph.gemm", hooks(shape::gemm, nn::gemm)),
        (
            "graph.leaky_relu",
            hooks(shape::elementwise_unary, ew::unary),
        ),
        ("graph.gelu", hooks(shape::elementwise_unary, ew::unary)),
        (
            "graph.hard_sigmoid",
            hooks(shape::elementwise_unary, ew::unary),
        ),
        ("graph.clip", hooks(shape::elementwise_unary, ew::clip)),
        ("graph.where", hooks(shape::where_, ew::where_)),
        ("graph.not", hooks(shape::not, ew::not)),
        ("graph.cast", hooks(shape::cast, ew::cast)),
        ("graph.layer_norm", hooks(shape::norm, nn::layer_norm)),
        ("graph.instance_norm", hooks(shape::norm, nn::instance_norm)),
        ("graph.batch_norm", hooks(shape::norm, nn::batch_norm)),
        ("graph.softmax", hooks(shape::softmax, nn::softmax)),
        (
            "graph.global_average_pool",
            hooks(shape::global_average_pool, nn::global_average_pool),
        ),
        ("graph.average_pool", hooks(shape::pool, nn::pool)),
        ("graph.max_pool", hooks(shape::pool, nn::pool)),
        ("graph.reshape", hooks(shape::reshape, lay::reshape)),
        ("graph.transpose", hooks(shape::transpose, lay::transpose)),
        ("graph.squeeze", hooks(shape::squeeze, lay::reshape)),
        ("graph.unsqueeze", hooks(shape::unsqueeze, lay::reshape)),
        ("graph.flatten", hooks(shape::flatten, lay::reshape)),
        ("graph.slice", hooks(shape::slice, lay::slice)),
        ("graph.gather", hooks(shape::gather, lay::gather)),
        ("graph.gather_elements", hooks(shape::gather, lay::gather)),
        ("graph.concat", hooks(shape::concat, lay::concat)),
        ("graph.split", hooks(shape::split, lay::split)),
        ("graph.pad", hooks(shape::pad, lay::pad)),
        ("graph.expand", hooks(shape::expand, lay::repeat)),
        ("graph.tile", hooks(shape::tile, lay::repeat)),
        (
            "graph.depth_to_space",
            hooks(shape::depth_space, lay::depth_to_space),
        ),
        (
            "graph.space_to_depth",
            hooks(shape::depth_space, lay::space_to_depth),
        ),
        ("graph.resize", hooks(shape::resize, lay::resize)),
        ("graph.constant", hooks(shape::constant, lay::constant)),
        ("graph.param", checked(shape::param, lay::param)),
        ("graph.identity", hooks(shape::elementwise_unary, ew::unary)),
        (
            "graph.fused",
            OpHooks {
                infer: None,
                verify: Some(fused::verify_fused),
                interpret: Some(fused::interpret_fused),
            },
        ),
        (
            "graph.yield",
            OpHooks {
                infer: None,
                verify: Some(fused::verify_yield),
                interpret: None,
            },
        ),
    ];
    let groups: [(&[&'static str], OpHooks); 4] = [
        (
            &[
                "graph.add",
                "graph.sub",
                "graph.mul",
                "graph.div",
                "graph.pow",
                "graph.max",
                "graph.min",
            ],
            hooks(shape::elementwise_binary, ew::binary),
        ),
        (
            &["graph.equal", "graph.less", "graph.greater"],
            hooks(shape::compare, ew::compare),
        ),
        (
            &[
                "graph.neg",
                "graph.abs",
                "graph.exp",
                "graph.log",
                "graph.sqrt",
                "graph.reciprocal",
                "graph.erf",
                "graph.tanh",
                "graph.sigmoid",
                "graph.relu",
                "graph.hard_swish",
            ],
            hooks(shape::elementwise_unary, ew::unary),
        ),
        (
            &[
                "graph.reduce_sum",
                "graph.reduce_mean",
                "graph.reduce_max",
                "graph.reduce_min",
                "graph.reduce_prod",
            ],
            hooks(shape::reduce, nn::reduce),
        ),
    ];
    for (names, h) in groups {
        v.extend(names.iter().map(|&n| (n, h)));
    }
    v
}

pub fn register(registry: &mut Registry) -> Result<(), Diagnostic> {
    registry.add_dialect(SPEC, &op_hooks())
}
