//! ONNX operators to graph ops, one arm per operator family. Attribute
//! names follow ONNX in snake_case; shape-like inputs become attributes.

use ircc_core::minifloat::MiniFloat;
use ircc_core::{Attribute, Attributes, ElemType, Tensor, Type};
use ircc_dialects::graph::GraphOp;

use crate::attrs::Attrs;
use crate::fold;
use crate::import::{Importer, Val, i64s, scalar_f64};
use crate::proto::{NodeProto, attr_type};
use crate::tensor::{elem_type, to_stored};
use crate::{ImportError, Result};

/// The attributes of Conv, ConvInteger and QLinearConv.
pub(crate) const CONV_ATTRS: &[&str] = &[
    "auto_pad",
    "dilations",
    "group",
    "kernel_shape",
    "pads",
    "strides",
];

const CONV_TRANSPOSE_ATTRS: &[&str] = &[
    "auto_pad",
    "dilations",
    "group",
    "kernel_shape",
    "pads",
    "strides",
    "output_padding",
    "output_shape",
];

pub(crate) fn ints_attr(v: Vec<i64>) -> Attribute {
    Attribute::DenseI64Array(v)
}

pub(crate) fn f32_attr(v: f64) -> Attribute {
    Attribute::f32(v)
}

pub(crate) fn attrs(pairs: Vec<(&str, Attribute)>) -> Attributes {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// The pads of a convolution or pool window over an input of `shape`
/// (batch and channel first): from `auto_pad`, else `pads`, else none.
/// A pool's window: `kernel_shape`, `strides`, `pads` (from `auto_pad`
/// where set), `dilations` and `ceil_mode`, over an input of `shape`.
pub(crate) fn window_attrs(a: &Attrs, shape: &[i64]) -> Result<Attributes> {
    let kernel = a
        .ints("kernel_shape")
        .ok_or_else(|| ImportError::invalid("missing kernel_shape"))?;
    let spatial = kernel.len();
    let strides = a.ints("strides").unwrap_or_else(|| vec![1; spatial]);
    let dilations = a.ints("dilations").unwrap_or_else(|| vec![1; spatial]);
    let pads = window_pads(a, shape, &kernel, &strides, &dilations)?;
    Ok(attrs(vec![
        ("kernel_shape", ints_attr(kernel)),
        ("strides", ints_attr(strides)),
        ("pads", ints_attr(pads)),
        ("dilations", ints_attr(dilations)),
        ("ceil_mode", Attribute::i64(a.i("ceil_mode", 0))),
    ]))
}

fn window_pads(
    a: &Attrs,
    shape: &[i64],
    kernel: &[i64],
    strides: &[i64],
    dilations: &[i64],
) -> Result<Vec<i64>> {
    let spatial = &shape[2.min(shape.len())..];
    Ok(
        match auto_pads(
            &a.s("auto_pad", "NOTSET"),
            spatial,
            kernel,
            strides,
            dilations,
        )? {
            Some(p) => p,
            None => a.ints("pads").unwrap_or_else(|| vec![0; 2 * kernel.len()]),
        },
    )
}

pub(crate) fn rank_axis(axis: i64, rank: usize) -> Result<usize> {
    ircc_dialects::graph::shape::axis(axis, rank).map_err(ImportError::invalid)
}

/// Explicit pads for auto_pad SAME_UPPER / SAME_LOWER / VALID.
fn auto_pads(
    mode: &str,
    input: &[i64],
    kernel: &[i64],
    strides: &[i64],
    dilations: &[i64],
) -> Result<Option<Vec<i64>>> {
    let n = input.len();
    match mode {
        "NOTSET" => Ok(None),
        "VALID" => Ok(Some(vec![0; 2 * n])),
        "SAME_UPPER" | "SAME_LOWER" => {
            let mut pads = vec![0; 2 * n];
            for i in 0..n {
                let out = (input[i] + strides[i] - 1) / strides[i];
                let k = (kernel[i] - 1) * dilations[i] + 1;
                let total = ((out - 1) * strides[i] + k - input[i]).max(0);
                let (small, big) = (total / 2, total - total / 2);
                (pads[i], pads[n + i]) = if mode == "SAME_UPPER" {
                    (small, big)
                } else {
                    (big, small)
                };
            }
            Ok(Some(pads))
        }
        other => Err(ImportError::unsupported(format!(
            "auto_pad '{other}' is not supported"
        ))),
    }
}

impl Importer<'_> {
    /// Imports node `n`, whose attributes `a` reads.
    pub fn node(&mut self, n: &NodeProto, a: &Attrs) -> Result<()> {
        if !(n.domain.is_empty() || n.domain == "ai.onnx") {
            return Err(ImportError::unsupported(format!(
                "operator domain '{}' is not supported",
                n.domain
            )));
        }
        let op = n.op_type.as_str();
        let outputs = match op {
            "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Equal" | "Less" | "Greater" => {
                a.only(&[])?;
                let name = match op {
                    "Add" => GraphOp::Add,
                    "Sub" => GraphOp::Sub,
                    "Mul" => GraphOp::Mul,
                    "Div" => GraphOp::Div,
                    "Pow" => GraphOp::Pow,
                    "Equal" => GraphOp::Equal,
                    "Less" => GraphOp::Less,
                    _ => GraphOp::Greater,
                };
                let (x, y) = (self.required(n, 0)?, self.required(n, 1)?);
                if op == "Pow" && self.type_of(&x).elem != self.type_of(&y).elem {
                    let to = self.type_of(&x).elem;
                    let y = self.cast(y, to)?;
                    return self.finish(n, GraphOp::Pow, vec![x, y], Attributes::new());
                }
                self.emit(name, vec![x, y], Attributes::new(), 1)?
            }
            "LessOrEqual" | "GreaterOrEqual" => {
                a.only(&[])?;
                let opposite = if op == "LessOrEqual" {
                    GraphOp::Greater
                } else {
                    GraphOp::Less
                };
                let c = self.emit(
                    opposite,
                    vec![self.required(n, 0)?, self.required(n, 1)?],
                    Attributes::new(),
                    1,
                )?;
                self.emit(GraphOp::Not, c, Attributes::new(), 1)?
            }
            "Max" | "Min" | "Sum" | "Mean" => {
                a.only(&[])?;
                let name = match op {
                    "Max" => GraphOp::Max,
                    "Min" => GraphOp::Min,
                    _ => GraphOp::Add,
                };
                let inputs: Vec<Val> = (0..n.input.len())
                    .map(|i| self.required(n, i))
                    .collect::<Result<_>>()?;
                let count = inputs.len();
                let mut it = inputs.into_iter();
                let mut acc = it
                    .next()
                    .ok_or_else(|| ImportError::invalid("needs at least one input"))?;
                for v in it {
                    acc = self
                        .emit(name, vec![acc, v], Attributes::new(), 1)?
                        .remove(0);
                }
                if op == "Mean" {
                    let elem = self.type_of(&acc).elem;
                    let div = fold::scalar(count as f64, elem);
                    acc = self
                        .emit(
                            GraphOp::Div,
                            vec![acc, Val::constant(div)],
                            Attributes::new(),
                            1,
                        )?
                        .remove(0);
                }
                if count == 1 {
                    vec![
                        self.emit(GraphOp::Identity, vec![acc], Attributes::new(), 1)?
                            .remove(0),
                    ]
                } else {
                    vec![acc]
                }
            }
            "Neg" | "Abs" | "Exp" | "Log" | "Sqrt" | "Reciprocal" | "Erf" | "Tanh" | "Sigmoid"
            | "Relu" | "Not" | "Identity" | "HardSwish" | "Sin" | "Cos" | "Tan" | "Asin"
            | "Acos" | "Atan" | "Sinh" | "Cosh" | "Asinh" | "Acosh" | "Atanh" | "Sign"
            | "Floor" | "Ceil" | "Round" | "BitwiseNot" => {
                a.only(&[])?;
                let name = match op {
                    "Neg" => GraphOp::Neg,
                    "Abs" => GraphOp::Abs,
                    "Exp" => GraphOp::Exp,
                    "Log" => GraphOp::Log,
                    "Sqrt" => GraphOp::Sqrt,
                    "Reciprocal" => GraphOp::Reciprocal,
                    "Erf" => GraphOp::Erf,
                    "Tanh" => GraphOp::Tanh,
                    "Sigmoid" => GraphOp::Sigmoid,
                    "Relu" => GraphOp::Relu,
                    "Not" | "BitwiseNot" => GraphOp::Not,
                    "Identity" => GraphOp::Identity,
                    "Sin" => GraphOp::Sin,
                    "Cos" => GraphOp::Cos,
                    "Tan" => GraphOp::Tan,
                    "Asin" => GraphOp::Asin,
                    "Acos" => GraphOp::Acos,
                    "Atan" => GraphOp::Atan,
                    "Sinh" => GraphOp::Sinh,
                    "Cosh" => GraphOp::Cosh,
                    "Asinh" => GraphOp::Asinh,
                    "Acosh" => GraphOp::Acosh,
                    "Atanh" => GraphOp::Atanh,
                    "Sign" => GraphOp::Sign,
                    "Floor" => GraphOp::Floor,
                    "Ceil" => GraphOp::Ceil,
                    "Round" => GraphOp::Round,
                    _ => GraphOp::HardSwish,
                };
                self.emit(name, vec![self.required(n, 0)?], Attributes::new(), 1)?
            }
            "And" | "Or" | "Xor" | "BitwiseAnd" | "BitwiseOr" | "BitwiseXor" => {
                a.only(&[])?;
                let name = match op {
                    "And" | "BitwiseAnd" => GraphOp::And,
                    "Or" | "BitwiseOr" => GraphOp::Or,
                    _ => GraphOp::Xor,
                };
                let (x, y) = (self.required(n, 0)?, self.required(n, 1)?);
                self.emit(name, vec![x, y], Attributes::new(), 1)?
            }
            "BitShift" => {
                a.only(&["direction"])?;
                let name = match a.s("direction", "").as_str() {
                    "LEFT" => GraphOp::ShiftLeft,
                    "RIGHT" => GraphOp::ShiftRight,
                    other => {
                        return Err(ImportError::invalid(format!(
                            "BitShift's direction must be LEFT or RIGHT, not '{other}'"
                        )));
                    }
                };
                let (x, y) = (self.required(n, 0)?, self.required(n, 1)?);
                self.emit(name, vec![x, y], Attributes::new(), 1)?
            }
            "Dropout" => {
                a.only(&["seed", "ratio"])?;
                let x = self.required(n, 0)?;
                // Training mode drops at random unless the ratio is zero;
                // otherwise Dropout passes its input and keeps every element.
                if let Some(mode) = self.input(n, 2)? {
                    let training = self
                        .known_constant_for(&mode, "Dropout's training_mode")
                        .is_none_or(|t| t.to_i64().iter().any(|&v| v != 0));
                    let ratio = match self.input(n, 1)? {
                        Some(r) => self
                            .known_constant_for(&r, "Dropout's ratio")
                            .map(|t| t.to_f64().iter().copied().collect::<Vec<_>>()),
                        None => Some(vec![0.5]),
                    };
                    let keeps_all = ratio.is_some_and(|r| r.iter().all(|&v| v == 0.0));
                    if training && !keeps_all {
                        return Err(ImportError::unsupported(
                            "Dropout in training mode (with a ratio other than 0) is not supported",
                        ));
                    }
                }
                let shape: Vec<usize> =
                    self.type_of(&x).shape.iter().map(|&d| d as usize).collect();
                let mut out = self.emit(GraphOp::Identity, vec![x], Attributes::new(), 1)?;
                if n.output.len() > 1 && !n.output[1].is_empty() {
                    let kept = ndarray::ArrayD::from_elem(ndarray::IxDyn(&shape), true);
                    out.push(Val::constant(Tensor::bool(kept)));
                }
                out
            }
            "LeakyRelu" => {
                a.only(&["alpha"])?;
                self.emit(
                    GraphOp::LeakyRelu,
                    vec![self.required(n, 0)?],
                    attrs(vec![("alpha", f32_attr(a.f("alpha", 0.01) as f64))]),
                    1,
                )?
            }
            "HardSigmoid" => {
                a.only(&["alpha", "beta"])?;
                let at = attrs(vec![
                    ("alpha", f32_attr(a.f("alpha", 0.2) as f64)),
                    ("beta", f32_attr(a.f("beta", 0.5) as f64)),
                ]);
                self.emit(GraphOp::HardSigmoid, vec![self.required(n, 0)?], at, 1)?
            }
            "Gelu" => {
                a.only(&["approximate"])?;
                let at = attrs(vec![(
                    "approximate",
                    Attribute::String(a.s("approximate", "none")),
                )]);
                self.emit(GraphOp::Gelu, vec![self.required(n, 0)?], at, 1)?
            }
            "Clip" => {
                a.only(&["min", "max"])?;
                let x = self.required(n, 0)?;
                let (lo, hi) = if self.opset < 11 {
                    (
                        a.has("min").then(|| a.f("min", 0.0) as f64),
                        a.has("max").then(|| a.f("max", 0.0) as f64),
                    )
                } else {
                    (
                        self.constant_input(n, 1, "min")?
                            .as_ref()
                            .and_then(scalar_f64),
                        self.constant_input(n, 2, "max")?
                            .as_ref()
                            .and_then(scalar_f64),
                    )
                };
                let mut at = Attributes::new();
                if let Some(l) = lo {
                    at.insert("min".into(), f32_attr(l));
                }
                if let Some(h) = hi {
                    at.insert("max".into(), f32_attr(h));
                }
                self.emit(GraphOp::Clip, vec![x], at, 1)?
            }
            "Where" => {
                a.only(&[])?;
                self.emit(
                    GraphOp::Where,
                    vec![
                        self.required(n, 0)?,
                        self.required(n, 1)?,
                        self.required(n, 2)?,
                    ],
                    Attributes::new(),
                    1,
                )?
            }
            "Cast" | "CastLike" => {
                let to = if op == "Cast" {
                    a.only(&["to", "saturate"])?;
                    elem_type(a.i("to", 0) as i32)?
                } else {
                    a.only(&["saturate"])?;
                    self.type_of(&self.required(n, 1)?).elem
                };
                let saturate = a.i("saturate", 1) != 0;
                vec![self.cast_saturating(self.required(n, 0)?, to, saturate)?]
            }
            "LogSoftmax" => {
                let s = self.softmax(n, a)?;
                self.emit(GraphOp::Log, s, Attributes::new(), 1)?
            }
            "PRelu" | "Softplus" | "Softsign" | "Elu" | "Selu" | "Celu" | "ThresholdedRelu"
            | "Mish" | "Swish" | "Shrink" => self.activation(n, a)?,
            "IsNaN" | "IsInf" => vec![self.float_class(n, a)?],
            "RMSNormalization" => self.rms_norm(n, a)?,
            "RNN" | "GRU" | "LSTM" => self.recurrent(n, a)?,
            "GridSample" => self.grid_sample(n, a)?,
            "GatherND" => self.gather_nd(n, a)?,
            "Compress" => self.compress(n, a)?,
            "If" => self.if_then_else(n, a)?,
            "Loop" => self.unrolled_loop(n, a)?,
            "Scan" => self.unrolled_scan(n, a)?,
            "NegativeLogLikelihoodLoss" | "SoftmaxCrossEntropyLoss" => self.loss(n, a)?,
            "Trilu" => self.trilu(n, a)?,
            "Hardmax" => self.hardmax(n, a)?,
            "OneHot" => self.one_hot(n, a)?,
            "CumSum" | "CumProd" => self.cumulative(n, a)?,
            "TopK" => self.top_k(n, a)?,
            "CenterCropPad" => self.center_crop_pad(n, a)?,
            "RotaryEmbedding" => self.rotary_embedding(n, a)?,
            "Einsum" => self.einsum(n, a)?,
            "LpPool" => self.lp_pool(n, a)?,
            "QuantizeLinear" => self.quantize_linear(n, a)?,
            "DequantizeLinear" => self.dequantize_linear(n, a)?,
            "DynamicQuantizeLinear" => self.dynamic_quantize_linear(n, a)?,
            "MatMulInteger" => self.matmul_integer(n, a)?,
            "ConvInteger" => self.conv_integer(n, a)?,
            "QLinearMatMul" => self.qlinear_matmul(n, a)?,
            "QLinearConv" => self.qlinear_conv(n, a)?,
            "ArgMax" | "ArgMin" => {
                a.only(&["axis", "keepdims", "select_last_index"])?;
                let name = if op == "ArgMax" {
                    GraphOp::ArgMax
                } else {
                    GraphOp::ArgMin
                };
                let at = attrs(vec![
                    ("axis", Attribute::i64(a.i("axis", 0))),
                    ("keepdims", Attribute::i64(a.i("keepdims", 1))),
                    (
                        "select_last_index",
                        Attribute::i64(a.i("select_last_index", 0)),
                    ),
                ]);
                self.emit(name, vec![self.required(n, 0)?], at, 1)?
            }
            "LpNormalization" => self.lp_normalization(n, a)?,
            "MatMul" => {
                a.only(&[])?;
                self.emit(
                    GraphOp::Matmul,
                    vec![self.required(n, 0)?, self.required(n, 1)?],
                    Attributes::new(),
                    1,
                )?
            }
            "Gemm" => {
                a.only(&["alpha", "beta", "transA", "transB"])?;
                let mut ops = vec![self.required(n, 0)?, self.required(n, 1)?];
                ops.extend(self.input(n, 2)?);
                let at = attrs(vec![
                    ("alpha", f32_attr(a.f("alpha", 1.0) as f64)),
                    ("beta", f32_attr(a.f("beta", 1.0) as f64)),
                    ("trans_a", Attribute::i64(a.i("transA", 0))),
                    ("trans_b", Attribute::i64(a.i("transB", 0))),
                ]);
                self.emit(GraphOp::Gemm, ops, at, 1)?
            }
            "Conv" | "ConvTranspose" => self.conv(n, a)?,
            "MaxPool" | "AveragePool" => self.pool(n, a)?,
            "GlobalAveragePool" => {
                a.only(&[])?;
                self.emit(
                    GraphOp::GlobalAveragePool,
                    vec![self.required(n, 0)?],
                    Attributes::new(),
                    1,
                )?
            }
            "GlobalMaxPool" => {
                a.only(&[])?;
                let x = self.required(n, 0)?;
                let rank = self.type_of(&x).rank() as i64;
                self.emit(
                    GraphOp::ReduceMax,
                    vec![x],
                    attrs(vec![("axes", ints_attr((2..rank).collect()))]),
                    1,
                )?
            }
            "BatchNormalization" => {
                a.only(&["epsilon", "momentum", "training_mode", "spatial"])?;
                if a.i("training_mode", 0) != 0 || n.output.iter().skip(1).any(|o| !o.is_empty()) {
                    return Err(ImportError::unsupported(
                        "BatchNormalization in training mode is not supported",
                    ));
                }
                self.normalization(n, a, GraphOp::BatchNorm, 5)?
            }
            "InstanceNormalization" => {
                a.only(&["epsilon"])?;
                self.normalization(n, a, GraphOp::InstanceNorm, 3)?
            }
            "LayerNormalization" => {
                a.only(&["axis", "epsilon", "stash_type"])?;
                let mut ops = vec![self.required(n, 0)?, self.required(n, 1)?];
                ops.extend(self.input(n, 2)?);
                let at = attrs(vec![
                    ("axis", Attribute::i64(a.i("axis", -1))),
                    ("epsilon", f32_attr(a.f("epsilon", 1e-5) as f64)),
                ]);
                let mut out = self.emit(GraphOp::LayerNorm, ops, at, 1)?;
                if n.output.iter().skip(1).any(|o| !o.is_empty()) {
                    out.extend(self.moments(
                        self.required(n, 0)?,
                        a.i("axis", -1),
                        a.f("epsilon", 1e-5) as f64,
                    )?);
                }
                out
            }
            "Softmax" => self.softmax(n, a)?,
            "Attention" => self.attention(n, a)?,
            "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1"
            | "ReduceL2" | "ReduceSumSquare" | "ReduceLogSum" | "ReduceLogSumExp" => {
                self.reduce(n, a)?
            }
            "Reshape" => {
                a.only(&["allowzero"])?;
                let x = self.required(n, 0)?;
                let shape = self
                    .constant_input(n, 1, "shape")?
                    .ok_or_else(|| ImportError::invalid("missing shape"))?;
                let target = fold::reshape_target(
                    &self.type_of(&x).shape,
                    &i64s(&shape),
                    a.i("allowzero", 0) != 0,
                )?;
                self.emit(
                    GraphOp::Reshape,
                    vec![x],
                    attrs(vec![("shape", ints_attr(target))]),
                    1,
                )?
            }
            "Flatten" => {
                a.only(&["axis"])?;
                self.emit(
                    GraphOp::Flatten,
                    vec![self.required(n, 0)?],
                    attrs(vec![("axis", Attribute::i64(a.i("axis", 1)))]),
                    1,
                )?
            }
            "Transpose" => {
                a.only(&["perm"])?;
                let mut at = Attributes::new();
                if let Some(p) = a.ints("perm") {
                    at.insert("perm".into(), ints_attr(p));
                }
                self.emit(GraphOp::Transpose, vec![self.required(n, 0)?], at, 1)?
            }
            "Squeeze" | "Unsqueeze" => {
                a.only(&["axes"])?;
                let axes = if self.opset >= 13 {
                    self.constant_input(n, 1, "axes")?.map(|t| i64s(&t))
                } else {
                    a.ints("axes")
                };
                let mut at = Attributes::new();
                if let Some(ax) = axes {
                    at.insert("axes".into(), ints_attr(ax));
                }
                let name = if op == "Squeeze" {
                    GraphOp::Squeeze
                } else {
                    GraphOp::Unsqueeze
                };
                self.emit(name, vec![self.required(n, 0)?], at, 1)?
            }
            "Slice" => {
                a.only(&["starts", "ends", "axes"])?;
                let x = self.required(n, 0)?;
                let (starts, ends, axes, steps) = if self.opset < 10 {
                    (a.ints("starts"), a.ints("ends"), a.ints("axes"), None)
                } else {
                    let c = |i, w| self.constant_input(n, i, w).map(|t| t.map(|t| i64s(&t)));
                    (
                        c(1, "starts")?,
                        c(2, "ends")?,
                        c(3, "axes")?,
                        c(4, "steps")?,
                    )
                };
                let mut at = attrs(vec![
                    (
                        "starts",
                        ints_attr(starts.ok_or_else(|| ImportError::invalid("missing starts"))?),
                    ),
                    (
                        "ends",
                        ints_attr(ends.ok_or_else(|| ImportError::invalid("missing ends"))?),
                    ),
                ]);
                if let Some(ax) = axes {
                    at.insert("axes".into(), ints_attr(ax));
                }
                if let Some(st) = steps {
                    at.insert("steps".into(), ints_attr(st));
                }
                self.emit(GraphOp::Slice, vec![x], at, 1)?
            }
            "Gather" | "GatherElements" => {
                a.only(&["axis"])?;
                let name = if op == "Gather" {
                    GraphOp::Gather
                } else {
                    GraphOp::GatherElements
                };
                let idx = self.required(n, 1)?;
                let idx = if self.type_of(&idx).elem != ElemType::I64 {
                    self.cast(idx, ElemType::I64)?
                } else {
                    idx
                };
                self.emit(
                    name,
                    vec![self.required(n, 0)?, idx],
                    attrs(vec![("axis", Attribute::i64(a.i("axis", 0)))]),
                    1,
                )?
            }
            "Concat" => {
                a.only(&["axis"])?;
                let inputs: Vec<Val> = (0..n.input.len())
                    .filter_map(|i| self.input(n, i).transpose())
                    .collect::<Result<_>>()?;
                self.emit(
                    GraphOp::Concat,
                    inputs,
                    attrs(vec![("axis", Attribute::i64(a.i("axis", 0)))]),
                    1,
                )?
            }
            "Split" => {
                a.only(&["axis", "split", "num_outputs"])?;
                let sizes = if self.opset >= 13 {
                    self.constant_input(n, 1, "split")?.map(|t| i64s(&t))
                } else {
                    a.ints("split")
                };
                let mut at = attrs(vec![("axis", Attribute::i64(a.i("axis", 0)))]);
                let x = self.required(n, 0)?;
                let sizes = match sizes {
                    Some(s) => Some(s),
                    // opset 18: num_outputs parts, the last one smaller.
                    None if a.has("num_outputs") => {
                        let ty = self.type_of(&x);
                        let dim = ty.shape[rank_axis(a.i("axis", 0), ty.rank())?];
                        let parts = a.i("num_outputs", 1).max(1);
                        let chunk = (dim + parts - 1) / parts;
                        Some(
                            (0..parts)
                                .map(|i| (dim - i * chunk).clamp(0, chunk))
                                .collect(),
                        )
                    }
                    None => None,
                };
                if let Some(s) = sizes {
                    at.insert("split".into(), ints_attr(s));
                }
                self.emit(GraphOp::Split, vec![x], at, n.output.len())?
            }
            "Pad" => self.pad(n, a)?,
            "Expand" => {
                a.only(&[])?;
                self.with_shape_input(n, GraphOp::Expand, "shape")?
            }
            "Tile" => {
                a.only(&[])?;
                self.with_shape_input(n, GraphOp::Tile, "repeats")?
            }
            "DepthToSpace" => {
                a.only(&["blocksize", "mode"])?;
                let at = attrs(vec![
                    ("blocksize", Attribute::i64(a.i("blocksize", 0))),
                    ("mode", Attribute::String(a.s("mode", "DCR"))),
                ]);
                self.emit(GraphOp::DepthToSpace, vec![self.required(n, 0)?], at, 1)?
            }
            "SpaceToDepth" => self.space_to_depth(n, a)?,
            "EyeLike" => self.eye_like(n, a)?,
            "ReverseSequence" => self.reverse_sequence(n, a)?,
            "Upsample" => self.upsample(n, a)?,
            "GroupNormalization" => self.group_normalization(n, a)?,
            "LRN" => self.lrn(n, a)?,
            "DFT" => self.dft(n, a)?,
            "SwiGLU" => self.swiglu(n, a)?,
            "LinearAttention" => self.linear_attention(n, a)?,
            "CausalConvWithState" => self.causal_conv_with_state(n, a)?,
            "MeanVarianceNormalization" => self.mean_variance_normalization(n, a)?,
            "Col2Im" => self.col2im(n, a)?,
            "AffineGrid" => self.affine_grid(n, a)?,
            "TensorScatter" => self.tensor_scatter(n, a)?,
            "STFT" => self.stft(n, a)?,
            "HannWindow" | "HammingWindow" | "BlackmanWindow" => self.window(n, a)?,
            "MelWeightMatrix" => self.mel_weight_matrix(n, a)?,
            "Resize" => self.resize(n, a)?,
            "Constant" => {
                a.only(&[
                    "value",
                    "value_float",
                    "value_floats",
                    "value_int",
                    "value_ints",
                ])?;
                vec![Val::constant(self.constant_value(n, a)?)]
            }
            "NonMaxSuppression" => self.non_max_suppression(n, a)?,
            "Unique" => self.unique(n, a)?,
            _ => vec![fold::import_only(self, n, a)?],
        };
        self.define(n, outputs)
    }

    fn finish(
        &mut self,
        n: &NodeProto,
        name: GraphOp,
        ops: Vec<Val>,
        at: Attributes,
    ) -> Result<()> {
        let out = self.emit(name, ops, at, 1)?;
        self.define(n, out)
    }

    /// BatchNormalization and InstanceNormalization: `inputs` required
    /// operands and an epsilon.
    fn normalization(
        &mut self,
        n: &NodeProto,
        a: &Attrs,
        op: GraphOp,
        inputs: usize,
    ) -> Result<Vec<Val>> {
        let ops = (0..inputs)
            .map(|i| self.required(n, i))
            .collect::<Result<Vec<_>>>()?;
        self.emit(
            op,
            ops,
            attrs(vec![("epsilon", f32_attr(a.f("epsilon", 1e-5) as f64))]),
            1,
        )
    }

    /// An op whose second input is a constant integer list, which becomes
    /// the attribute `attr` (Expand's shape, Tile's repeats).
    fn with_shape_input(&mut self, n: &NodeProto, op: GraphOp, attr: &str) -> Result<Vec<Val>> {
        let values = self
            .constant_input(n, 1, attr)?
            .ok_or_else(|| ImportError::invalid(format!("missing {attr}")))?;
        self.emit(
            op,
            vec![self.required(n, 0)?],
            attrs(vec![(attr, ints_attr(i64s(&values)))]),
            1,
        )
    }

    /// `v` cast to `to`, unless it is of `to` already.
    pub(crate) fn cast_to(&mut self, v: Val, to: ElemType) -> Result<Val> {
        if self.type_of(&v).elem == to {
            Ok(v)
        } else {
            self.cast(v, to)
        }
    }

    pub fn cast(&mut self, v: Val, to: ElemType) -> Result<Val> {
        let at = attrs(vec![("to", Attribute::Type(Type::Scalar(to)))]);
        Ok(self.emit(GraphOp::Cast, vec![v], at, 1)?.remove(0))
    }

    /// A cast as ONNX's Cast does it: to an 8-bit float, values past the
    /// largest (infinities too) become the largest when saturating, and
    /// otherwise infinity (E5M2) or NaN. `graph.cast` rounds to the nearest
    /// value the type holds, so only what differs from that is selected.
    /// A 4-bit float has no NaN nor infinity, and always saturates.
    pub(crate) fn cast_saturating(&mut self, v: Val, to: ElemType, saturate: bool) -> Result<Val> {
        let from = self.type_of(&v).elem;
        let y = self.cast(v.clone(), to)?;
        let Some(f8) = MiniFloat::of(to)
            .filter(|f8| from.is_float() && f8.has_nan() && (!saturate || f8.has_infinity()))
        else {
            return Ok(y);
        };
        let (bound, tie_overflows) = f8.overflow_bound();
        let magnitude = self.un(GraphOp::Abs, v.clone())?;
        let bound = self.scalar_like(&magnitude, bound);
        // NaN compares false, and is cast to NaN anyway.
        let mut over = self.bin(GraphOp::Greater, magnitude.clone(), bound.clone())?;
        if tie_overflows {
            let tie = self.bin(GraphOp::Equal, magnitude, bound)?;
            over = self.bin(GraphOp::Or, over, tie)?;
        }
        let past = if saturate || f8.has_infinity() {
            let top = if saturate { f8.max() } else { f64::INFINITY };
            let zero = self.scalar_like(&v, 0.0);
            let negative = self.bin(GraphOp::Less, v, zero)?;
            let up = Val::constant(fold::scalar(top, to));
            let down = Val::constant(fold::scalar(-top, to));
            self.select(negative, down, up)?
        } else {
            Val::constant(fold::scalar(f64::NAN, to))
        };
        self.select(over, past, y)
    }

    fn constant_value(&self, n: &NodeProto, a: &Attrs) -> Result<Tensor> {
        let attr = n
            .attribute
            .first()
            .ok_or_else(|| ImportError::invalid("Constant without a value"))?;
        let v = |data: Vec<f64>, shape: Vec<usize>| {
            ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&shape), data).expect("sizes agree")
        };
        Ok(match (attr.name.as_str(), attr.r#type) {
            ("value", attr_type::TENSOR) => to_stored(
                attr.t
                    .as_ref()
                    .ok_or_else(|| ImportError::invalid("empty tensor"))?,
                &self.external,
            )?
            .to_tensor(),
            ("value_float", _) => Tensor::float(
                ElemType::F32,
                v(vec![a.f("value_float", 0.0) as f64], vec![]),
            ),
            ("value_floats", _) => {
                let f = a.floats("value_floats").unwrap_or_default();
                let len = f.len();
                Tensor::float(
                    ElemType::F32,
                    v(f.into_iter().map(f64::from).collect(), vec![len]),
                )
            }
            ("value_int", _) => {
                Tensor::int(ElemType::I64, ndarray::arr0(a.i("value_int", 0)).into_dyn())
            }
            ("value_ints", _) => Tensor::int(
                ElemType::I64,
                ndarray::Array1::from(a.ints("value_ints").unwrap_or_default()).into_dyn(),
            ),
            (other, _) => {
                return Err(ImportError::unsupported(format!(
                    "Constant attribute '{other}' is not supported"
                )));
            }
        })
    }

    fn conv(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(if n.op_type == "ConvTranspose" {
            CONV_TRANSPOSE_ATTRS
        } else {
            CONV_ATTRS
        })?;
        let x = self.required(n, 0)?;
        let w = self.required(n, 1)?;
        let bias = self.input(n, 2)?;
        self.conv_with(n, a, x, w, bias)
    }

    /// Conv or ConvTranspose (as `n` names) of `x` and `w` with `n`'s
    /// attributes; ConvInteger and QLinearConv come here with their
    /// operands offset.
    pub(crate) fn conv_with(
        &mut self,
        n: &NodeProto,
        a: &Attrs,
        x: Val,
        w: Val,
        bias: Option<Val>,
    ) -> Result<Vec<Val>> {
        let (xt, wt) = (self.type_of(&x), self.type_of(&w));
        let spatial = xt.rank().saturating_sub(2);
        let strides = a.ints("strides").unwrap_or_else(|| vec![1; spatial]);
        let dilations = a.ints("dilations").unwrap_or_else(|| vec![1; spatial]);
        let kernel = a
            .ints("kernel_shape")
            .unwrap_or_else(|| wt.shape.get(2..).unwrap_or_default().to_vec());
        let mut at = attrs(vec![
            ("strides", ints_attr(strides.clone())),
            ("dilations", ints_attr(dilations.clone())),
            ("group", Attribute::i64(a.i("group", 1))),
        ]);
        let mut ops = vec![x, w];
        ops.extend(bias);
        if n.op_type != "ConvTranspose" {
            let pads = window_pads(a, &xt.shape, &kernel, &strides, &dilations)?;
            at.insert("pads".into(), ints_attr(pads));
            return self.emit(GraphOp::Conv, ops, at, 1);
        }
        let mut out_pad = a.ints("output_padding").unwrap_or_else(|| vec![0; spatial]);
        // The output size asked for (output_shape, or input * stride for the
        // SAME modes) fixes the total padding; SAME_LOWER puts the odd
        // element first, everything else puts it at the end, as ONNX does.
        let mode = a.s("auto_pad", "NOTSET");
        let target: Option<Vec<i64>> = match (a.ints("output_shape"), mode.as_str()) {
            (Some(out), _) => Some(out[out.len().saturating_sub(spatial)..].to_vec()),
            (None, "SAME_UPPER" | "SAME_LOWER") => {
                Some((0..spatial).map(|i| xt.shape[2 + i] * strides[i]).collect())
            }
            _ => None,
        };
        let pads = match target {
            Some(out) => {
                let mut p = vec![0; 2 * spatial];
                for i in 0..spatial {
                    let k = (kernel[i] - 1) * dilations[i] + 1;
                    let mut total = (xt.shape[2 + i] - 1) * strides[i] + out_pad[i] + k - out[i];
                    if total < 0 {
                        // A larger output than the strides give: the extra goes to the end.
                        out_pad[i] -= total;
                        total = 0;
                    }
                    let (small, big) = (total / 2, total - total / 2);
                    (p[i], p[spatial + i]) = if mode == "SAME_LOWER" {
                        (big, small)
                    } else {
                        (small, big)
                    };
                }
                p
            }
            None => a.ints("pads").unwrap_or_else(|| vec![0; 2 * spatial]),
        };
        at.insert("pads".into(), ints_attr(pads));
        at.insert("output_padding".into(), ints_attr(out_pad));
        self.emit(GraphOp::ConvTranspose, ops, at, 1)
    }

    fn pool(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&[
            "auto_pad",
            "ceil_mode",
            "count_include_pad",
            "dilations",
            "kernel_shape",
            "pads",
            "strides",
            "storage_order",
        ])?;
        if n.output.len() > 1 && !n.output[1].is_empty() {
            return Err(ImportError::unsupported(
                "the Indices output of MaxPool is not supported",
            ));
        }
        if a.i("storage_order", 0) != 0 {
            return Err(ImportError::unsupported("storage_order 1 is not supported"));
        }
        let x = self.required(n, 0)?;
        let mut at = window_attrs(a, &self.type_of(&x).shape)?;
        let name = if n.op_type == "MaxPool" {
            GraphOp::MaxPool
        } else {
            at.insert(
                "count_include_pad".into(),
                Attribute::i64(a.i("count_include_pad", 0)),
            );
            GraphOp::AveragePool
        };
        self.emit(name, vec![x], at, 1)
    }

    fn softmax(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["axis"])?;
        let x = self.required(n, 0)?;
        let ty = self.type_of(&x);
        if self.opset >= 13 {
            return self.emit(
                GraphOp::Softmax,
                vec![x],
                attrs(vec![("axis", Attribute::i64(a.i("axis", -1)))]),
                1,
            );
        }
        // Before opset 13, Softmax flattens to 2-D at `axis` (default 1).
        let axis = rank_axis(a.i("axis", 1), ty.rank())?;
        if axis + 1 == ty.rank() {
            return self.emit(
                GraphOp::Softmax,
                vec![x],
                attrs(vec![("axis", Attribute::i64(-1))]),
                1,
            );
        }
        let outer: i64 = ty.shape[..axis].iter().product();
        let inner: i64 = ty.shape[axis..].iter().product();
        let flat = self.emit(
            GraphOp::Reshape,
            vec![x],
            attrs(vec![("shape", ints_attr(vec![outer, inner]))]),
            1,
        )?;
        let s = self.emit(
            GraphOp::Softmax,
            flat,
            attrs(vec![("axis", Attribute::i64(1))]),
            1,
        )?;
        self.emit(
            GraphOp::Reshape,
            s,
            attrs(vec![("shape", ints_attr(ty.shape.clone()))]),
            1,
        )
    }

    fn reduce(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["axes", "keepdims", "noop_with_empty_axes"])?;
        let x = self.required(n, 0)?;
        let axes_from_input = self.opset >= 18 || (n.op_type == "ReduceSum" && self.opset >= 13);
        let axes = if axes_from_input {
            self.constant_input(n, 1, "axes")?.map(|t| i64s(&t))
        } else {
            a.ints("axes")
        };
        let axes = axes.filter(|v| !v.is_empty());
        if axes.is_none() && a.i("noop_with_empty_axes", 0) != 0 {
            return self.emit(GraphOp::Identity, vec![x], Attributes::new(), 1);
        }
        let mut at = attrs(vec![("keepdims", Attribute::i64(a.i("keepdims", 1)))]);
        if let Some(ax) = axes {
            at.insert("axes".into(), ints_attr(ax));
        }
        let elem = self.type_of(&x).elem;
        let one = |name: GraphOp, s: &mut Self, v: Vec<Val>| s.emit(name, v, Attributes::new(), 1);
        match n.op_type.as_str() {
            "ReduceL1" => {
                let m = one(GraphOp::Abs, self, vec![x])?;
                self.emit(GraphOp::ReduceSum, m, at, 1)
            }
            "ReduceL2" | "ReduceSumSquare" => {
                let sq = self.emit(GraphOp::Mul, vec![x.clone(), x], Attributes::new(), 1)?;
                let s = self.emit(GraphOp::ReduceSum, sq, at, 1)?;
                if n.op_type == "ReduceL2" {
                    one(GraphOp::Sqrt, self, s)
                } else {
                    Ok(s)
                }
            }
            "ReduceLogSum" => {
                let s = self.emit(GraphOp::ReduceSum, vec![x], at, 1)?;
                one(GraphOp::Log, self, s)
            }
            "ReduceLogSumExp" => {
                let e = one(GraphOp::Exp, self, vec![x])?;
                let s = self.emit(GraphOp::ReduceSum, e, at, 1)?;
                one(GraphOp::Log, self, s)
            }
            // Any and all: on 0.0 and 1.0, whose empty max (min) is -inf
            // (+inf), so an empty any is false and an empty all true.
            "ReduceMax" | "ReduceMin" if elem == ElemType::I1 => {
                let values = self.cast(x, ElemType::F32)?;
                let name = if n.op_type == "ReduceMax" {
                    GraphOp::ReduceMax
                } else {
                    GraphOp::ReduceMin
                };
                let reduced = self.emit(name, vec![values], at, 1)?.remove(0);
                let half = Val::constant(fold::scalar(0.5, ElemType::F32));
                Ok(vec![self.bin(GraphOp::Greater, reduced, half)?])
            }
            _ if !elem.is_float() && !elem.is_int() => Err(ImportError::unsupported(
                "reductions of booleans other than ReduceMax and ReduceMin are not supported",
            )),
            _ => {
                let name = match n.op_type.as_str() {
                    "ReduceSum" => GraphOp::ReduceSum,
                    "ReduceMean" => GraphOp::ReduceMean,
                    "ReduceMax" => GraphOp::ReduceMax,
                    "ReduceMin" => GraphOp::ReduceMin,
                    "ReduceProd" => GraphOp::ReduceProd,
                    other => {
                        return Err(ImportError::unsupported(format!(
                            "operator '{other}' is not supported"
                        )));
                    }
                };
                self.emit(name, vec![x], at, 1)
            }
        }
    }

    pub(crate) fn bin(&mut self, name: GraphOp, x: Val, y: Val) -> Result<Val> {
        Ok(self.emit(name, vec![x, y], Attributes::new(), 1)?.remove(0))
    }

    pub(crate) fn un(&mut self, name: GraphOp, x: Val) -> Result<Val> {
        Ok(self.emit(name, vec![x], Attributes::new(), 1)?.remove(0))
    }

    pub(crate) fn scalar_like(&self, x: &Val, v: f64) -> Val {
        Val::constant(fold::scalar(v, self.type_of(x).elem))
    }

    /// IsNaN as !(x == x); IsInf as x == ±inf (`detect_positive`,
    /// `detect_negative`): comparisons kernels and the interpreter take
    /// alike.
    fn float_class(&mut self, n: &NodeProto, a: &Attrs) -> Result<Val> {
        let x = self.required(n, 0)?;
        let elem = self.type_of(&x).elem;
        if !elem.is_float() {
            return Err(ImportError::invalid(format!(
                "{} of {elem}: a float tensor is needed",
                n.op_type
            )));
        }
        if n.op_type == "IsNaN" {
            a.only(&[])?;
            let same = self.bin(GraphOp::Equal, x.clone(), x)?;
            return self.un(GraphOp::Not, same);
        }
        a.only(&["detect_positive", "detect_negative"])?;
        // Equality with the infinities, which every storage precision
        // holds: a bound at the largest finite value would not survive a
        // kernel computing at f16.
        let mut found = Vec::new();
        // A narrow float without infinities (all but E5M2) holds none.
        let has_infinity = MiniFloat::of(elem).is_none_or(|f| f.has_infinity());
        for (flag, inf) in [
            ("detect_positive", f64::INFINITY),
            ("detect_negative", f64::NEG_INFINITY),
        ] {
            if a.flag(flag, true)? && has_infinity {
                let inf = self.scalar_like(&x, inf);
                found.push(self.bin(GraphOp::Equal, x.clone(), inf)?);
            }
        }
        match found.len() {
            // Nothing to find: false everywhere.
            0 => self.bin(GraphOp::Less, x.clone(), x),
            1 => Ok(found.remove(0)),
            _ => {
                let (p, q) = (found.remove(0), found.remove(0));
                self.bin(GraphOp::Or, p, q)
            }
        }
    }

    /// Activations that are compositions of graph ops.
    fn activation(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        let x = self.required(n, 0)?;
        let zero = self.scalar_like(&x, 0.0);
        let y = match n.op_type.as_str() {
            "PRelu" => {
                a.only(&[])?;
                let slope = self.required(n, 1)?;
                let neg = self.bin(GraphOp::Less, x.clone(), zero)?;
                let scaled = self.bin(GraphOp::Mul, x.clone(), slope)?;
                self.emit(GraphOp::Where, vec![neg, scaled, x], Attributes::new(), 1)?
                    .remove(0)
            }
            "Softplus" => {
                a.only(&[])?;
                self.softplus(x)?
            }
            "Softsign" => {
                a.only(&[])?;
                self.softsign(x)?
            }
            "Elu" | "Selu" | "Celu" => {
                a.only(&["alpha", "gamma"])?;
                // Selu scales Elu by gamma; Celu divides x by alpha first.
                let (alpha, gamma, c) = match n.op_type.as_str() {
                    "Elu" => (a.f("alpha", 1.0) as f64, 1.0, 1.0),
                    "Selu" => (
                        a.f("alpha", 1.673_263_2) as f64,
                        a.f("gamma", 1.050_701) as f64,
                        1.0,
                    ),
                    _ => (a.f("alpha", 1.0) as f64, 1.0, a.f("alpha", 1.0) as f64),
                };
                let y = self.elu(x.clone(), alpha, c)?;
                if gamma == 1.0 {
                    y
                } else {
                    self.bin(GraphOp::Mul, y, self.scalar_like(&x, gamma))?
                }
            }
            "Swish" => {
                a.only(&["alpha"])?;
                // x * sigmoid(alpha * x)
                let alpha = self.scalar_like(&x, a.f("alpha", 1.0) as f64);
                let ax = self.bin(GraphOp::Mul, x.clone(), alpha)?;
                let s = self.un(GraphOp::Sigmoid, ax)?;
                self.bin(GraphOp::Mul, x, s)?
            }
            "Shrink" => {
                a.only(&["lambd", "bias"])?;
                // x + bias below -lambd, x - bias above lambd, 0 between.
                let lambd = a.f("lambd", 0.5) as f64;
                let bias = self.scalar_like(&x, a.f("bias", 0.0) as f64);
                let below = self.bin(GraphOp::Less, x.clone(), self.scalar_like(&x, -lambd))?;
                let above = self.bin(GraphOp::Greater, x.clone(), self.scalar_like(&x, lambd))?;
                let up = self.bin(GraphOp::Add, x.clone(), bias.clone())?;
                let down = self.bin(GraphOp::Sub, x, bias)?;
                let y = self
                    .emit(
                        GraphOp::Where,
                        vec![above, down, zero],
                        Attributes::new(),
                        1,
                    )?
                    .remove(0);
                self.emit(GraphOp::Where, vec![below, up, y], Attributes::new(), 1)?
                    .remove(0)
            }
            "ThresholdedRelu" => {
                a.only(&["alpha"])?;
                self.thresholded_relu(x, a.f("alpha", 1.0) as f64)?
            }
            _ => {
                a.only(&[])?;
                // Mish: x * tanh(softplus(x))
                let sp = self.softplus(x.clone())?;
                let t = self.un(GraphOp::Tanh, sp)?;
                self.bin(GraphOp::Mul, x, t)?
            }
        };
        Ok(vec![y])
    }

    /// log(1 + exp(x))
    pub(crate) fn softplus(&mut self, x: Val) -> Result<Val> {
        let e = self.un(GraphOp::Exp, x.clone())?;
        let p = self.bin(GraphOp::Add, e, self.scalar_like(&x, 1.0))?;
        self.un(GraphOp::Log, p)
    }

    /// x / (1 + |x|)
    pub(crate) fn softsign(&mut self, x: Val) -> Result<Val> {
        let m = self.un(GraphOp::Abs, x.clone())?;
        let d = self.bin(GraphOp::Add, m, self.scalar_like(&x, 1.0))?;
        self.bin(GraphOp::Div, x, d)
    }

    /// x above zero, alpha * (exp(x / c) - 1) below.
    pub(crate) fn elu(&mut self, x: Val, alpha: f64, c: f64) -> Result<Val> {
        let xs = if c == 1.0 {
            x.clone()
        } else {
            self.bin(GraphOp::Div, x.clone(), self.scalar_like(&x, c))?
        };
        let e = self.un(GraphOp::Exp, xs)?;
        let em1 = self.bin(GraphOp::Sub, e, self.scalar_like(&x, 1.0))?;
        let neg = self.bin(GraphOp::Mul, em1, self.scalar_like(&x, alpha))?;
        let pos = self.bin(GraphOp::Greater, x.clone(), self.scalar_like(&x, 0.0))?;
        Ok(self
            .emit(GraphOp::Where, vec![pos, x, neg], Attributes::new(), 1)?
            .remove(0))
    }

    /// x above alpha, zero at or below it.
    pub(crate) fn thresholded_relu(&mut self, x: Val, alpha: f64) -> Result<Val> {
        let t = self.scalar_like(&x, alpha);
        let above = self.bin(GraphOp::Greater, x.clone(), t)?;
        let zero = self.scalar_like(&x, 0.0);
        Ok(self
            .emit(GraphOp::Where, vec![above, x, zero], Attributes::new(), 1)?
            .remove(0))
    }

    /// LayerNormalization's optional Mean and InvStdDev outputs.
    fn moments(&mut self, x: Val, axis: i64, eps: f64) -> Result<Vec<Val>> {
        let rank = self.type_of(&x).rank();
        let first = rank_axis(axis, rank)?;
        let axes = attrs(vec![
            ("axes", ints_attr((first as i64..rank as i64).collect())),
            ("keepdims", Attribute::i64(1)),
        ]);
        let mean = self
            .emit(GraphOp::ReduceMean, vec![x.clone()], axes.clone(), 1)?
            .remove(0);
        let d = self.bin(GraphOp::Sub, x.clone(), mean.clone())?;
        let sq = self.bin(GraphOp::Mul, d.clone(), d)?;
        let var = self.emit(GraphOp::ReduceMean, vec![sq], axes, 1)?.remove(0);
        let ve = self.bin(GraphOp::Add, var, self.scalar_like(&x, eps))?;
        let sd = self.un(GraphOp::Sqrt, ve)?;
        let inv = self.un(GraphOp::Reciprocal, sd)?;
        Ok(vec![mean, inv])
    }

    /// x / sqrt(mean(x², axes from axis) + epsilon) * scale.
    fn rms_norm(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["axis", "epsilon", "stash_type"])?;
        let x = self.required(n, 0)?;
        let scale = self.required(n, 1)?;
        let rank = self.type_of(&x).rank();
        let first = rank_axis(a.i("axis", -1), rank)?;
        let axes = attrs(vec![
            ("axes", ints_attr((first as i64..rank as i64).collect())),
            ("keepdims", Attribute::i64(1)),
        ]);
        let sq = self.bin(GraphOp::Mul, x.clone(), x.clone())?;
        let ms = self.emit(GraphOp::ReduceMean, vec![sq], axes, 1)?.remove(0);
        let eps = self.scalar_like(&x, a.f("epsilon", 1e-5) as f64);
        let me = self.bin(GraphOp::Add, ms, eps)?;
        let r = self.un(GraphOp::Sqrt, me)?;
        let y = self.bin(GraphOp::Div, x, r)?;
        Ok(vec![self.bin(GraphOp::Mul, y, scale)?])
    }

    fn pad(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["mode", "pads", "value"])?;
        let x = self.required(n, 0)?;
        let rank = self.type_of(&x).rank();
        let mode = a.s("mode", "constant");
        if !matches!(mode.as_str(), "constant" | "reflect" | "edge" | "wrap") {
            return Err(ImportError::invalid(format!(
                "Pad mode '{mode}' is none of constant, reflect, edge and wrap"
            )));
        }
        let (pads, value) = if self.opset < 11 {
            (
                a.ints("pads")
                    .ok_or_else(|| ImportError::invalid("missing pads"))?,
                a.f("value", 0.0) as f64,
            )
        } else {
            let pads = i64s(
                &self
                    .constant_input(n, 1, "pads")?
                    .ok_or_else(|| ImportError::invalid("missing pads"))?,
            );
            let value = self
                .constant_input(n, 2, "constant_value")?
                .as_ref()
                .and_then(scalar_f64)
                .unwrap_or(0.0);
            (pads, value)
        };
        // opset 18: pads for the listed axes only.
        let pads = match self.constant_input(n, 3, "axes")? {
            None => pads,
            Some(axes) => {
                let axes = i64s(&axes);
                let mut full = vec![0; 2 * rank];
                for (i, &ax) in axes.iter().enumerate() {
                    let ax = rank_axis(ax, rank)?;
                    full[ax] = pads[i];
                    full[rank + ax] = pads[axes.len() + i];
                }
                full
            }
        };
        if mode == "wrap" {
            return self.wrap_pad(x, &pads);
        }
        let at = attrs(vec![
            ("pads", ints_attr(pads)),
            ("mode", Attribute::String(mode)),
            (
                "value",
                Attribute::Float(value, Type::Scalar(ElemType::F64)),
            ),
        ]);
        self.emit(GraphOp::Pad, vec![x], at, 1)
    }
}
