//! The graph dialect: ONNX operators with static shapes. The declarations
//! are `spec/dialects/graph.toml`; this module binds each to its shape
//! inference and its interpreter.

pub mod attention;
mod eval_elementwise;
mod eval_layout;
mod eval_nn;
mod fused;
pub mod nms;
pub mod shape;

/// Typed views of the graph ops, generated from the spec by `ircc-ods`.
pub mod ops {
    include!(concat!(env!("OUT_DIR"), "/graph_ops.rs"));
}

pub use ops::GraphOp;

pub(crate) use eval_elementwise::erf;
pub use eval_layout::{for_each_index, gather_by, strides_of};

use ircc_core::Diagnostic;
use ircc_core::registry::{InferFn, InterpretFn, OpHooks, OpView, Registry, VerifyFn};

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

/// The hooks of every graph op: an exhaustive match, so an op added to the
/// spec does not build until it has them.
fn op_hooks(op: GraphOp) -> OpHooks {
    use GraphOp as G;
    match op {
        G::Conv => hooks(shape::conv, nn::conv),
        G::ConvTranspose => hooks(shape::conv_transpose, nn::conv_transpose),
        G::Matmul => hooks(shape::matmul, nn::matmul),
        G::Gemm => hooks(shape::gemm, nn::gemm),
        G::Add | G::Sub | G::Mul | G::Div | G::Pow | G::Max | G::Min => {
            hooks(shape::elementwise_binary, ew::binary)
        }
        G::Equal | G::Less | G::Greater => hooks(shape::compare, ew::compare),
        G::Neg
        | G::Abs
        | G::Exp
        | G::Log
        | G::Sqrt
        | G::Reciprocal
        | G::Erf
        | G::Tanh
        | G::Sigmoid
        | G::Relu
        | G::HardSwish
        | G::LeakyRelu
        | G::Gelu
        | G::HardSigmoid
        | G::Sin
        | G::Cos
        | G::Tan
        | G::Asin
        | G::Acos
        | G::Atan
        | G::Sinh
        | G::Cosh
        | G::Asinh
        | G::Acosh
        | G::Atanh
        | G::Sign
        | G::Floor
        | G::Ceil
        | G::Round
        | G::Identity => hooks(shape::elementwise_unary, ew::unary),
        G::And | G::Or | G::Xor | G::ShiftLeft | G::ShiftRight => {
            hooks(shape::bitwise, ew::bitwise)
        }
        G::Clip => hooks(shape::elementwise_unary, ew::clip),
        G::Where => hooks(shape::where_, ew::where_),
        G::Not => hooks(shape::not, ew::not),
        G::Cast => hooks(shape::cast, ew::cast),
        G::LayerNorm => hooks(shape::norm, nn::layer_norm),
        G::InstanceNorm => hooks(shape::norm, nn::instance_norm),
        G::BatchNorm => hooks(shape::norm, nn::batch_norm),
        G::Softmax => hooks(shape::softmax, nn::softmax),
        G::Attention => hooks(attention::infer, attention::attention),
        G::ReduceSum | G::ReduceMean | G::ReduceMax | G::ReduceMin | G::ReduceProd => {
            hooks(shape::reduce, nn::reduce)
        }
        G::ArgMax | G::ArgMin => hooks(shape::arg_reduce, nn::arg_reduce),
        G::NonMaxSuppression => hooks(nms::infer, nms::interpret),
        G::GlobalAveragePool => hooks(shape::global_average_pool, nn::global_average_pool),
        G::AveragePool | G::MaxPool => hooks(shape::pool, nn::pool),
        G::Reshape => hooks(shape::reshape, lay::reshape),
        G::Transpose => hooks(shape::transpose, lay::transpose),
        G::Squeeze => hooks(shape::squeeze, lay::reshape),
        G::Unsqueeze => hooks(shape::unsqueeze, lay::reshape),
        G::Flatten => hooks(shape::flatten, lay::reshape),
        G::Slice => hooks(shape::slice, lay::slice),
        G::Gather | G::GatherElements => hooks(shape::gather, lay::gather),
        G::Concat => hooks(shape::concat, lay::concat),
        G::Split => hooks(shape::split, lay::split),
        G::Pad => hooks(shape::pad, lay::pad),
        G::Expand => hooks(shape::expand, lay::repeat),
        G::Tile => hooks(shape::tile, lay::repeat),
        G::DepthToSpace => hooks(shape::depth_space, lay::depth_to_space),
        G::SpaceToDepth => hooks(shape::depth_space, lay::space_to_depth),
        G::Resize => hooks(shape::resize, lay::resize),
        G::Constant => hooks(shape::constant, lay::constant),
        G::Param => checked(shape::param, lay::param),
        G::Fused => OpHooks {
            infer: None,
            verify: Some(fused::verify_fused),
            interpret: Some(fused::interpret_fused),
        },
        G::Yield => OpHooks {
            infer: None,
            verify: Some(fused::verify_yield),
            interpret: None,
        },
    }
}

/// Which graph op a hook was called for.
pub(crate) fn kind(v: &OpView) -> Result<GraphOp, String> {
    GraphOp::from_name(v.name()).ok_or_else(|| format!("'{}' is not a graph op", v.name()))
}

pub fn register(registry: &mut Registry) -> Result<(), Diagnostic> {
    let hooks: Vec<_> = GraphOp::ALL
        .iter()
        .map(|&op| (op.name(), op_hooks(op)))
        .collect();
    registry.add_dialect(SPEC, &hooks)
}
