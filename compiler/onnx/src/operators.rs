//! The ONNX operators ircc imports and how each reaches a GPU: `ircc
//! --list-onnx-ops` prints [`table`], and `spec/onnx-operators.md` is it,
//! checked in (a test keeps it current). The importer's arms are in
//! `ops.rs` and `fold.rs`; the unit test below checks that every listed
//! operator has one, and the conformance runner (`tests/onnx_node.rs`)
//! that no operator a node test imports is missing here.

/// How an imported operator runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lowering {
    /// Becomes graph ops, which `kernel.lower` turns into GPU kernels.
    Kernels,
    /// Evaluated while importing (shape arithmetic, or a result whose
    /// shape depends on values): its inputs must be constants,
    /// initializers or inputs bound with `--bind`.
    ImportOnly,
}

/// One operator of the default ONNX domain.
#[derive(Clone, Copy, Debug)]
pub struct Operator {
    pub name: &'static str,
    /// The first opset that defines it; ircc imports it from there (or
    /// from [`OPSETS`]' start) to the newest opset.
    pub since: i64,
    pub lowering: Lowering,
}

/// The opsets of the default domain the importer reads.
pub const OPSETS: std::ops::RangeInclusive<i64> = 7..=28;

const fn op(name: &'static str, since: i64, lowering: Lowering) -> Operator {
    Operator {
        name,
        since,
        lowering,
    }
}

use Lowering::{ImportOnly, Kernels};

/// Every operator the importer has an arm for, by name.
pub const OPERATORS: &[Operator] = &[
    op("Abs", 1, Kernels),
    op("Acos", 7, Kernels),
    op("Acosh", 9, Kernels),
    op("Add", 1, Kernels),
    op("AffineGrid", 20, Kernels),
    op("And", 1, Kernels),
    op("ArgMax", 1, Kernels),
    op("ArgMin", 1, Kernels),
    op("Asin", 7, Kernels),
    op("Asinh", 9, Kernels),
    op("Atan", 7, Kernels),
    op("Atanh", 9, Kernels),
    op("Attention", 23, Kernels),
    op("AveragePool", 1, Kernels),
    op("BatchNormalization", 1, Kernels),
    op("BitShift", 11, Kernels),
    op("BitwiseAnd", 18, Kernels),
    op("BitwiseNot", 18, Kernels),
    op("BitwiseOr", 18, Kernels),
    op("BitwiseXor", 18, Kernels),
    op("BlackmanWindow", 17, Kernels),
    op("Cast", 1, Kernels),
    op("CastLike", 15, Kernels),
    op("CausalConvWithState", 27, Kernels),
    op("Ceil", 1, Kernels),
    op("Celu", 12, Kernels),
    op("CenterCropPad", 18, Kernels),
    op("Clip", 1, Kernels),
    op("Col2Im", 18, Kernels),
    op("Compress", 9, Kernels),
    op("Concat", 1, Kernels),
    op("Constant", 1, Kernels),
    op("ConstantOfShape", 9, ImportOnly),
    op("Conv", 1, Kernels),
    op("ConvInteger", 10, Kernels),
    op("ConvTranspose", 1, Kernels),
    op("Cos", 7, Kernels),
    op("Cosh", 9, Kernels),
    op("CumProd", 26, Kernels),
    op("CumSum", 11, Kernels),
    op("DFT", 17, Kernels),
    op("DepthToSpace", 1, Kernels),
    op("DequantizeLinear", 10, Kernels),
    op("Div", 1, Kernels),
    op("Dropout", 1, Kernels),
    op("DynamicQuantizeLinear", 11, Kernels),
    op("Einsum", 12, Kernels),
    op("Elu", 1, Kernels),
    op("Equal", 1, Kernels),
    op("Erf", 9, Kernels),
    op("Exp", 1, Kernels),
    op("Expand", 8, Kernels),
    op("EyeLike", 9, Kernels),
    op("Flatten", 1, Kernels),
    op("Floor", 1, Kernels),
    op("GRU", 7, Kernels),
    op("Gather", 1, Kernels),
    op("GatherElements", 11, Kernels),
    op("GatherND", 11, Kernels),
    op("Gelu", 20, Kernels),
    op("Gemm", 1, Kernels),
    op("GlobalAveragePool", 1, Kernels),
    op("GlobalMaxPool", 1, Kernels),
    op("Greater", 1, Kernels),
    op("GreaterOrEqual", 12, Kernels),
    op("GridSample", 16, Kernels),
    op("GroupNormalization", 18, Kernels),
    op("HammingWindow", 17, Kernels),
    op("HannWindow", 17, Kernels),
    op("HardSigmoid", 1, Kernels),
    op("HardSwish", 14, Kernels),
    op("Hardmax", 1, Kernels),
    op("Identity", 1, Kernels),
    op("If", 1, Kernels),
    op("InstanceNormalization", 1, Kernels),
    op("IsInf", 10, Kernels),
    op("IsNaN", 9, Kernels),
    op("LRN", 1, Kernels),
    op("LSTM", 7, Kernels),
    op("LayerNormalization", 17, Kernels),
    op("LeakyRelu", 1, Kernels),
    op("Less", 1, Kernels),
    op("LessOrEqual", 12, Kernels),
    op("LinearAttention", 27, Kernels),
    op("Log", 1, Kernels),
    op("LogSoftmax", 1, Kernels),
    op("Loop", 1, Kernels),
    op("LpNormalization", 1, Kernels),
    op("LpPool", 1, Kernels),
    op("MatMul", 1, Kernels),
    op("MatMulInteger", 10, Kernels),
    op("Max", 1, Kernels),
    op("MaxPool", 1, Kernels),
    op("Mean", 1, Kernels),
    op("MeanVarianceNormalization", 9, Kernels),
    op("MelWeightMatrix", 17, Kernels),
    op("Min", 1, Kernels),
    op("Mish", 18, Kernels),
    op("Mod", 10, ImportOnly),
    op("Mul", 1, Kernels),
    op("Neg", 1, Kernels),
    op("NegativeLogLikelihoodLoss", 12, Kernels),
    op("NonMaxSuppression", 10, Kernels),
    op("Not", 1, Kernels),
    op("OneHot", 9, Kernels),
    op("Or", 1, Kernels),
    op("PRelu", 1, Kernels),
    op("Pad", 1, Kernels),
    op("Pow", 1, Kernels),
    op("QLinearConv", 10, Kernels),
    op("QLinearMatMul", 10, Kernels),
    op("QuantizeLinear", 10, Kernels),
    op("RMSNormalization", 23, Kernels),
    op("RNN", 7, Kernels),
    op("Range", 11, ImportOnly),
    op("Reciprocal", 1, Kernels),
    op("ReduceL1", 1, Kernels),
    op("ReduceL2", 1, Kernels),
    op("ReduceLogSum", 1, Kernels),
    op("ReduceLogSumExp", 1, Kernels),
    op("ReduceMax", 1, Kernels),
    op("ReduceMean", 1, Kernels),
    op("ReduceMin", 1, Kernels),
    op("ReduceProd", 1, Kernels),
    op("ReduceSum", 1, Kernels),
    op("ReduceSumSquare", 1, Kernels),
    op("Relu", 1, Kernels),
    op("Reshape", 1, Kernels),
    op("Resize", 10, Kernels),
    op("ReverseSequence", 10, Kernels),
    op("RotaryEmbedding", 23, Kernels),
    op("Round", 11, Kernels),
    op("STFT", 17, Kernels),
    op("Scan", 9, Kernels),
    op("Scatter", 9, ImportOnly),
    op("ScatterElements", 11, ImportOnly),
    op("ScatterND", 11, ImportOnly),
    op("Selu", 1, Kernels),
    op("Shape", 1, ImportOnly),
    op("Shrink", 9, Kernels),
    op("Sigmoid", 1, Kernels),
    op("Sign", 9, Kernels),
    op("Sin", 7, Kernels),
    op("Sinh", 9, Kernels),
    op("Size", 1, ImportOnly),
    op("Slice", 1, Kernels),
    op("Softmax", 1, Kernels),
    op("SoftmaxCrossEntropyLoss", 12, Kernels),
    op("Softplus", 1, Kernels),
    op("Softsign", 1, Kernels),
    op("SpaceToDepth", 1, Kernels),
    op("Split", 1, Kernels),
    op("Sqrt", 1, Kernels),
    op("Squeeze", 1, Kernels),
    op("Sub", 1, Kernels),
    op("Sum", 1, Kernels),
    op("SwiGLU", 28, Kernels),
    op("Swish", 24, Kernels),
    op("Tan", 7, Kernels),
    op("Tanh", 1, Kernels),
    op("TensorScatter", 24, Kernels),
    op("ThresholdedRelu", 10, Kernels),
    op("Tile", 1, Kernels),
    op("TopK", 1, Kernels),
    op("Transpose", 1, Kernels),
    op("Trilu", 14, Kernels),
    op("Unique", 11, ImportOnly),
    op("Unsqueeze", 1, Kernels),
    op("Upsample", 7, Kernels),
    op("Where", 9, Kernels),
    op("Xor", 1, Kernels),
];

/// Whether the importer reads operator `name` of the default domain.
pub fn is_imported(name: &str) -> bool {
    OPERATORS.iter().any(|o| o.name == name)
}

/// The table as Markdown: `ircc --list-onnx-ops` and `spec/onnx-operators.md`.
pub fn table() -> String {
    let mut out = format!(
        "# ONNX operators ircc imports\n\n\
         Generated by `ircc --list-onnx-ops` from `compiler/onnx/src/operators.rs`.\n\
         Opsets {} to {} of the default domain are read; an operator imports from\n\
         the later of its first opset and {}. \"kernels\": it becomes graph ops that\n\
         run as GPU kernels (and on the interpreter). \"import only\": it is\n\
         evaluated while importing, so its inputs must be constants (or inputs\n\
         bound with `--bind`). The node-test pass lists in `tests/onnx/` give\n\
         the cases each passes.\n\n\
         | operator | since opset | runs as |\n|---|---|---|\n",
        OPSETS.start(),
        OPSETS.end(),
        OPSETS.start()
    );
    for o in OPERATORS {
        let how = match o.lowering {
            Kernels => "kernels",
            ImportOnly => "import only",
        };
        out += &format!("| {} | {} | {how} |\n", o.name, o.since);
    }
    let kernels = OPERATORS.iter().filter(|o| o.lowering == Kernels).count();
    out += &format!(
        "\n{} operators: {kernels} run as kernels, {} only at import.\n",
        OPERATORS.len(),
        OPERATORS.len() - kernels
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model of one node of `op_type` with no inputs: an operator the
    /// importer has an arm for fails on its missing input, any other as
    /// unsupported.
    fn import_error(op_type: &str) -> String {
        use crate::proto::{GraphProto, ModelProto, NodeProto, OperatorSetIdProto};
        let model = ModelProto {
            opset_import: vec![OperatorSetIdProto {
                domain: String::new(),
                version: *OPSETS.end(),
            }],
            graph: Some(GraphProto {
                node: vec![NodeProto {
                    op_type: op_type.to_string(),
                    output: vec!["y".to_string()],
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let bytes = prost::Message::encode_to_vec(&model);
        let registry = ircc_dialects::registry().unwrap();
        let here = std::path::Path::new(".");
        match crate::import::import_model(&bytes, here, &registry, &Default::default()) {
            Ok(_) => String::new(),
            Err(e) => e.message,
        }
    }

    #[test]
    fn every_listed_operator_has_an_importer_arm() {
        for o in OPERATORS {
            let e = import_error(o.name);
            assert!(
                !e.contains(&format!("operator '{}' is not supported", o.name)),
                "{} is listed but not imported: {e}",
                o.name
            );
        }
        assert!(
            import_error("NoSuchOperator").contains("operator 'NoSuchOperator' is not supported")
        );
    }

    #[test]
    fn the_table_is_sorted_and_each_operator_listed_once() {
        assert!(OPERATORS.windows(2).all(|w| w[0].name < w[1].name));
    }

    #[test]
    fn the_checked_in_table_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../spec/onnx-operators.md");
        if std::env::var_os("IRCC_UPDATE_ONNX_OPERATORS").is_some() {
            std::fs::write(path, table()).unwrap();
        }
        let checked_in = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            checked_in == table(),
            "spec/onnx-operators.md is out of date: run IRCC_UPDATE_ONNX_OPERATORS=1 cargo test -p ircc-onnx"
        );
    }
}
