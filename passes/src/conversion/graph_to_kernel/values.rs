//! The value of a graph op's result at one index, as kernel code: the
//! generic lowering every template builds on. Element-wise ops, views and
//! layout ops only move the index; convolutions, pools, reductions and
//! matrix products loop over what one output element needs. Templates
//! record the values they computed in bulk (a matmul tile, a reduced row)
//! in the memo, so their epilogues find them instead of recomputing.

use ircc_core::minifloat::MiniFloat;
use ircc_core::registry::{MappingType, OpView};
use ircc_core::{ElemType, OpId, Type, ValueId};
use ircc_dialects::graph::ops::PadMode;
use ircc_dialects::graph::{self, GraphOp, shape};
use ircc_dialects::index;
use ircc_dialects::kernel::builder::FuncBuilder;
use ircc_dialects::kernel::ops::{BinaryFn, CmpPred, UnaryFn};

use super::lowering::{
    Input, Ix, KernelBuilder, broadcast_index, kernel_elem, linearize, tensor_shape,
};
use super::prologue::NormRows;

type R<T> = Result<T, String>;

/// The graph ops computed element by element, operands broadcast: the
/// spec's One-to-One ops but for batch_norm (which indexes its operands
/// by channel) and the ops that hold data.
pub fn is_pointwise(op: GraphOp) -> bool {
    op.mapping() == Some(MappingType::OneToOne)
        && !matches!(op, GraphOp::BatchNorm | GraphOp::Constant | GraphOp::Param)
}

fn graph_elem(kb: &KernelBuilder, v: ValueId) -> ElemType {
    kb.m()
        .value_type(v)
        .as_tensor()
        .map(|t| t.elem)
        .unwrap_or(ElemType::F32)
}

/// The splat value of a `graph.constant`, if it is one.
pub fn splat(kb: &KernelBuilder, v: ValueId) -> Option<f64> {
    let constant = graph::ops::Constant::new(kb.m(), kb.m().defining_op(v)?)?;
    constant.value().splat()
}

/// A convolution's operands, shapes and window (`conv_parts`).
pub(super) struct ConvParts {
    pub x: ValueId,
    pub w: ValueId,
    pub sx: Vec<i64>,
    pub sw: Vec<i64>,
    pub window: shape::Window,
    pub group: i64,
    pub bias: Option<ValueId>,
}

/// One term of a convolution sum: where it reads the input and the
/// weights, and the flag under which it counts.
pub(super) type ConvTerm = (Vec<Ix>, Vec<Ix>, Option<ValueId>);

/// A reduction: the value it starts from and how it combines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reduction {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
}

impl Reduction {
    pub fn of(op: GraphOp) -> Option<Self> {
        match op {
            GraphOp::ReduceSum => Some(Reduction::Sum),
            GraphOp::ReduceMean | GraphOp::GlobalAveragePool => Some(Reduction::Mean),
            GraphOp::ReduceMax => Some(Reduction::Max),
            GraphOp::ReduceMin => Some(Reduction::Min),
            GraphOp::ReduceProd => Some(Reduction::Prod),
            _ => None,
        }
    }

    pub fn init(self) -> f64 {
        match self {
            Reduction::Sum | Reduction::Mean => 0.0,
            Reduction::Max => f64::NEG_INFINITY,
            Reduction::Min => f64::INFINITY,
            Reduction::Prod => 1.0,
        }
    }

    /// `acc` and `x` combined; a max or min keeps a NaN, as ONNX's do.
    pub fn combine(self, ir: &mut FuncBuilder, acc: ValueId, x: ValueId) -> ValueId {
        match self {
            Reduction::Sum | Reduction::Mean => ir.binary(BinaryFn::Add, acc, x),
            Reduction::Max => ir.extremum(CmpPred::Gt, acc, x),
            Reduction::Min => ir.extremum(CmpPred::Lt, acc, x),
            Reduction::Prod => ir.binary(BinaryFn::Mul, acc, x),
        }
    }
}

/// A float accumulator type: f32 even when tensors are f16.
pub(super) const ACC: ElemType = ElemType::F32;

impl KernelBuilder<'_> {
    /// The kernel value of graph value `v` at `idx`.
    pub fn value_at(&mut self, v: ValueId, idx: &[Ix]) -> R<ValueId> {
        if let Some(k) = self.memo_get(v, idx) {
            return Ok(k);
        }
        let k = match self.inputs.get(&v).cloned() {
            Some(input) => self.read_input(v, input, idx)?,
            None => {
                let op = self
                    .m()
                    .defining_op(v)
                    .ok_or("a block argument that is not bound to an input")?;
                let result = self
                    .m()
                    .op(op)
                    .results
                    .iter()
                    .position(|&r| r == v)
                    .unwrap_or(0);
                let k = self.op_value_at(op, result, idx)?;
                // Every computed 8- or 4-bit float is rounded to its type,
                // as the interpreter rounds every result (a copy's value
                // is one already, and rounds to itself).
                match MiniFloat::of(graph_elem(self, v)) {
                    Some(format) => self.round_to_narrow_float(k, format),
                    None => k,
                }
            }
        };
        self.memo_put(v, idx, k);
        Ok(k)
    }

    /// Whether graph value `v` is read from a buffer in which stepping
    /// index `axis` steps the offset by one and every other index and the
    /// origin move it by multiples of four: then where `idx[axis]` is a
    /// multiple of four, [`KernelBuilder::vector_at`] reads four elements
    /// along `axis` in one load. Not for a computed value, a texture, a
    /// buffer of bytes (read out of words) or one of a length that is no
    /// multiple of four (the printers declare it an array of vectors);
    /// through a view that divides or takes remainders, where
    /// [`super::vector::four_words`] shows the lanes to be neighbours.
    pub fn vector_readable(&self, v: ValueId, axis: usize) -> bool {
        let Some(Input::Memory { stored, shape, map }) = self.inputs.get(&v) else {
            return false;
        };
        let rank = tensor_shape(self, v).len();
        let dims: Vec<Ix> = (0..rank as u32).map(Ix::dim).collect();
        let at = match map {
            Some(map) => map
                .results
                .iter()
                .map(|e| e.substitute(&dims, &[]))
                .collect(),
            None => dims,
        };
        let offset = linearize(&at, shape);
        let elem = ircc_dialects::kernel::storage(graph_elem(self, v), self.float, true);
        if self.textures.contains_key(stored)
            || matches!(elem, ElemType::I8 | ElemType::U8)
            || shape.iter().product::<i64>() % 4 != 0
            || axis >= rank
        {
            return false;
        }
        if offset.div_mod_count() != 0 {
            // Through a view that divides or takes remainders (ViT-B/16's
            // heads merged back, (d0, d1) -> (0, d1 floordiv 64, d0, d1
            // mod 64)): lanes from a multiple of four along `axis` may
            // still be four neighbouring words.
            return super::vector::four_words(&offset, axis);
        }
        // The offset is linear in the indices: its coefficients are its
        // steps along each.
        let point = |d: Option<usize>| {
            let x: Vec<i64> = (0..rank).map(|i| i64::from(Some(i) == d)).collect();
            offset.eval(&x, &[]).ok()
        };
        let Some(origin) = point(None) else {
            return false;
        };
        origin % 4 == 0
            && (0..rank).all(|d| match point(Some(d)).map(|x| x - origin) {
                Some(step) if d == axis => step == 1,
                Some(step) => step % 4 == 0,
                None => false,
            })
    }

    /// Elements `idx` to `idx + 3` along `axis` of graph value `v`, in one
    /// load: `v` must be [`KernelBuilder::vector_readable`] along `axis`,
    /// and `idx[axis]` a multiple of four.
    pub fn vector_at(&mut self, v: ValueId, idx: &[Ix], axis: usize) -> R<[ValueId; 4]> {
        let Some(Input::Memory { stored, shape, map }) = self.inputs.get(&v).cloned() else {
            return Err("a vector read of a value not in memory".to_string());
        };
        let at: Vec<Ix> = match &map {
            Some(map) => map.results.iter().map(|e| e.substitute(idx, &[])).collect(),
            None => idx.to_vec(),
        };
        let offset = linearize(&at, &shape);
        if !self.vector_readable(v, axis) || offset.known_divisor() % 4 != 0 {
            return Err(format!(
                "a vector read at offset {offset}, not known to be a multiple of four"
            ));
        }
        let memory = self.arg(super::lowering::ArgRole::Input(stored));
        let elem = kernel_elem(graph_elem(self, v), self.float);
        Ok(self
            .load4(memory, &offset)
            .map(|x| self.ir.cast(x, Type::Scalar(elem))))
    }

    fn read_input(&mut self, v: ValueId, input: Input, idx: &[Ix]) -> R<ValueId> {
        // The index into the stored tensor, through the views above it.
        let through = |map: &Option<ircc_core::AffineMap>, idx: &[Ix]| match map {
            Some(map) => map.results.iter().map(|e| e.substitute(idx, &[])).collect(),
            None => idx.to_vec(),
        };
        let elem = kernel_elem(graph_elem(self, v), self.float);
        match input {
            Input::Splat(x) => Ok(self.ir.constant(x, elem)),
            Input::Memory { stored, shape, map } => {
                let idx = through(&map, idx);
                let memory = self.arg(super::lowering::ArgRole::Input(stored));
                let x = match self.textures.get(&stored) {
                    Some(layout) => {
                        let at = layout.element(&idx);
                        self.texture_load(memory, &at)
                    }
                    None => self.load(memory, &linearize(&idx, &shape)),
                };
                Ok(self.ir.cast(x, Type::Scalar(elem)))
            }
            Input::Partials {
                stored,
                shape,
                map,
                anchor,
            } => {
                let idx = through(&map, idx);
                let memory = self.arg(super::lowering::ArgRole::Input(stored));
                if graph::ops::Attention::new(self.m(), anchor).is_some() {
                    let y = self.combine_attention(memory, &idx, &shape)?;
                    return Ok(self.ir.cast(y, Type::Scalar(elem)));
                }
                let at = linearize(&idx, &shape[1..]);
                let stride: i64 = shape[1..].iter().product();
                let mut sum = None;
                for split in 0..shape[0] {
                    let x = self.load(memory, &(at.clone() + Ix::constant(split * stride)));
                    let x = self.widen(x);
                    sum = Some(match sum {
                        Some(s) => self.ir.binary(BinaryFn::Add, s, x),
                        None => x,
                    });
                }
                let sum = sum.ok_or("partial products without a split")?;
                let y = self.ir.cast(sum, Type::Scalar(elem));
                super::product::Product::of(self, anchor)?.epilogue(self, y, &idx)
            }
        }
    }

    /// Element `[b, h, i, e]` of an attention whose keys were split over
    /// workgroups, from their partials `memory` (of `shape`: the splits,
    /// then the result's shape with the value columns followed by each
    /// split's maximum and total): the splits' sums and totals rescaled to
    /// the largest maximum, the one divided by the other; zero where no
    /// key had weight.
    fn combine_attention(&mut self, memory: ValueId, idx: &[Ix], shape: &[i64]) -> R<ValueId> {
        let columns = *shape.last().ok_or("attention partials of a tensor")? - 2;
        let stride: i64 = shape[1..].iter().product();
        let column = |c: Ix| {
            let mut at = idx.to_vec();
            *at.last_mut().expect("a four-axis index") = c;
            linearize(&at, &shape[1..])
        };
        let (sum_at, max_at) = (
            column(idx[idx.len() - 1].clone()),
            column(Ix::constant(columns)),
        );
        let mut parts = Vec::with_capacity(shape[0] as usize);
        for split in 0..shape[0] {
            let offset = Ix::constant(split * stride);
            let m = self.load(memory, &(max_at.clone() + offset.clone()));
            let t = self.load(memory, &(max_at.clone() + offset.clone() + Ix::constant(1)));
            let s = self.load(memory, &(sum_at.clone() + offset));
            parts.push([m, t, s].map(|x| self.widen(x)));
        }
        let most = parts
            .iter()
            .map(|p| p[0])
            .reduce(|a, b| self.ir.binary(BinaryFn::Max, a, b))
            .ok_or("attention partials without a split")?;
        let zero = self.ir.constant(0.0, ACC);
        let (mut total, mut sum) = (zero, zero);
        for [m, t, s] in parts {
            let drop = self.ir.binary(BinaryFn::Sub, m, most);
            let factor = self.ir.unary(UnaryFn::Exp, drop);
            let t = self.ir.binary(BinaryFn::Mul, t, factor);
            total = self.ir.binary(BinaryFn::Add, total, t);
            let s = self.ir.binary(BinaryFn::Mul, s, factor);
            sum = self.ir.binary(BinaryFn::Add, sum, s);
        }
        let any = self.ir.cmp(CmpPred::Gt, total, zero);
        let y = self.ir.binary(BinaryFn::Div, sum, total);
        Ok(self.ir.select(any, y, zero))
    }

    /// The value of `v` (of any element type) as the f32 accumulator type,
    /// or unchanged for integers.
    pub(super) fn widen(&mut self, x: ValueId) -> ValueId {
        if self.ir.elem(x).is_float() {
            self.ir.cast(x, Type::Scalar(ACC))
        } else {
            x
        }
    }

    pub(super) fn narrow(&mut self, x: ValueId, elem: ElemType) -> ValueId {
        self.ir.cast(x, Type::Scalar(elem))
    }

    pub(super) fn view<'v>(&'v self, op: OpId) -> R<OpView<'v>> {
        self.ctx
            .registry
            .view(self.m(), op)
            .ok_or_else(|| format!("'{}' is not registered", self.m().op(op).name))
    }

    pub(super) fn operand(&self, op: OpId, i: usize) -> ValueId {
        self.m().op(op).operands[i]
    }

    /// The map of the view `op` is, if it is one (an `index.view`, or a
    /// layout op the group reads through).
    pub(super) fn view_map(&self, op: OpId) -> Option<ircc_core::AffineMap> {
        match index::ops::View::new(self.m(), op) {
            Some(view) => Some(view.map().clone()),
            None => super::group::layout_map(self.m(), self.ctx, op),
        }
    }

    fn op_value_at(&mut self, op: OpId, result: usize, idx: &[Ix]) -> R<ValueId> {
        let out = self.m().op(op).results[result];
        let out_elem = kernel_elem(graph_elem(self, out), self.float);
        if let Some(map) = self.view_map(op) {
            let src = self.operand(op, 0);
            let idx: Vec<Ix> = map.results.iter().map(|e| e.substitute(idx, &[])).collect();
            return self.value_at(src, &idx);
        }
        let Some(kind) = GraphOp::of(self.m(), op) else {
            return Err(format!("'{}' has no kernel lowering", self.m().op(op).name));
        };
        use GraphOp as G;
        match kind {
            G::Identity => self.value_at(self.operand(op, 0), idx),
            G::Constant => match splat(self, out) {
                Some(x) => Ok(self.ir.constant(x, out_elem)),
                None => Err("a non-splat graph.constant inside a kernel".to_string()),
            },
            // The element-wise ops (`is_pointwise`): each element from the
            // same index of its operands.
            G::Add
            | G::Sub
            | G::Mul
            | G::Div
            | G::Pow
            | G::Max
            | G::Min
            | G::Neg
            | G::Abs
            | G::Exp
            | G::Log
            | G::Sqrt
            | G::Reciprocal
            | G::Erf
            | G::Tanh
            | G::Sigmoid
            | G::Relu
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
            | G::And
            | G::Or
            | G::Xor
            | G::ShiftLeft
            | G::ShiftRight
            | G::HardSwish
            | G::LeakyRelu
            | G::Gelu
            | G::HardSigmoid
            | G::Clip
            | G::Where
            | G::Equal
            | G::Less
            | G::Greater
            | G::Not
            | G::Cast => {
                let operands = self.m().op(op).operands.clone();
                let mut xs = Vec::new();
                for &x in &operands {
                    let s = tensor_shape(self, x);
                    xs.push(self.value_at(x, &broadcast_index(idx, &s))?);
                }
                let y = self.pointwise(op, kind, &xs, out_elem)?;
                Ok(self.wrap_narrow_int(y, graph_elem(self, out)))
            }
            G::BatchNorm => {
                let mut xs = vec![self.value_at(self.operand(op, 0), idx)?];
                for i in 1..5 {
                    xs.push(self.value_at(self.operand(op, i), &idx[1..2])?);
                }
                let eps = self.fconst(
                    graph::ops::BatchNorm::new(self.m(), op)
                        .ok_or("batch_norm")?
                        .epsilon(),
                );
                let centered = self.ir.binary(BinaryFn::Sub, xs[0], xs[3]);
                let var = self.ir.binary(BinaryFn::Add, xs[4], eps);
                let inv = self.ir.unary(UnaryFn::Rsqrt, var);
                let y = self.ir.binary(BinaryFn::Mul, centered, inv);
                let y = self.ir.binary(BinaryFn::Mul, y, xs[1]);
                Ok(self.ir.binary(BinaryFn::Add, y, xs[2]))
            }
            G::Matmul => self.matmul_at(op, idx),
            G::Gemm => self.gemm_at(op, idx),
            G::Conv => self.conv_at(op, idx),
            G::ConvTranspose => self.conv_transpose_at(op, idx),
            G::Resize => self.resize_at(op, idx),
            G::MaxPool => self.pool_at(op, idx, true),
            G::AveragePool => self.pool_at(op, idx, false),
            G::GlobalAveragePool => {
                let x = self.operand(op, 0);
                let s = tensor_shape(self, x);
                let axes: Vec<usize> = (2..s.len()).collect();
                self.reduce_at(x, &axes, true, Reduction::Mean, idx, out_elem)
            }
            G::ArgMax | G::ArgMin => self.arg_reduce_at(op, idx),
            G::ReduceSum | G::ReduceMean | G::ReduceMax | G::ReduceMin | G::ReduceProd => {
                let x = self.operand(op, 0);
                let rank = tensor_shape(self, x).len();
                let view = self.view(op)?;
                let axes = shape::reduce_axes(&view, rank)?;
                let keep = view.i64("keepdims")? != 0;
                let reduction = Reduction::of(kind).ok_or("a reduction")?;
                self.reduce_at(x, &axes, keep, reduction, idx, out_elem)
            }
            G::Softmax => self.softmax_at(op, idx),
            G::Attention => self.attention_at(op, idx),
            G::LayerNorm => self.norm_at(op, idx, true),
            G::InstanceNorm => self.norm_at(op, idx, false),
            G::Concat => self.concat_at(op, idx),
            G::Split => {
                let view = self.view(op)?;
                let x = self.operand(op, 0);
                let outputs = self.m().op(op).results.len();
                let (axis, sizes) = shape::split_sizes(&view, view.tensor(0)?, outputs)?;
                let offset: i64 = sizes[..result].iter().sum();
                let mut i = idx.to_vec();
                i[axis] = i[axis].clone() + Ix::constant(offset);
                self.value_at(x, &i)
            }
            G::Pad => self.pad_at(op, idx),
            G::Gather => self.gather_at(op, idx, true),
            G::GatherElements => self.gather_at(op, idx, false),
            // Layout ops are read through their index maps (above).
            G::Reshape
            | G::Transpose
            | G::Squeeze
            | G::Unsqueeze
            | G::Flatten
            | G::Slice
            | G::Expand
            | G::Tile
            | G::DepthToSpace
            | G::SpaceToDepth => Err(format!("'{kind}' has no index map here")),
            // Data and structure, and the ops whose template computes a
            // whole result at once, have no value at one index.
            G::Param | G::Fused | G::Yield | G::NonMaxSuppression => {
                Err(format!("'{kind}' has no value at an index"))
            }
        }
    }

    fn pointwise(&mut self, op: OpId, f: GraphOp, xs: &[ValueId], out: ElemType) -> R<ValueId> {
        use GraphOp as G;
        let m = self.m();
        Ok(match f {
            G::Add => self.ir.binary(BinaryFn::Add, xs[0], xs[1]),
            G::Sub => self.ir.binary(BinaryFn::Sub, xs[0], xs[1]),
            G::Mul => self.ir.binary(BinaryFn::Mul, xs[0], xs[1]),
            G::Div => self.ir.binary(BinaryFn::Div, xs[0], xs[1]),
            G::Max => self.ir.extremum(CmpPred::Gt, xs[0], xs[1]),
            G::Min => self.ir.extremum(CmpPred::Lt, xs[0], xs[1]),
            G::Pow => {
                let exponent = splat(self, self.operand(op, 1))
                    .or_else(|| self.const_input(self.operand(op, 1)));
                match exponent {
                    Some(1.0) => xs[0],
                    Some(2.0) => self.ir.binary(BinaryFn::Mul, xs[0], xs[0]),
                    Some(3.0) => {
                        let sq = self.ir.binary(BinaryFn::Mul, xs[0], xs[0]);
                        self.ir.binary(BinaryFn::Mul, sq, xs[0])
                    }
                    Some(0.5) => self.ir.unary(UnaryFn::Sqrt, xs[0]),
                    Some(-1.0) => {
                        let one = self.fconst(1.0);
                        self.ir.binary(BinaryFn::Div, one, xs[0])
                    }
                    _ => self.ir.binary(BinaryFn::Pow, xs[0], xs[1]),
                }
            }
            G::Equal => self.ir.cmp(CmpPred::Eq, xs[0], xs[1]),
            G::Less => self.ir.cmp(CmpPred::Lt, xs[0], xs[1]),
            G::Greater => self.ir.cmp(CmpPred::Gt, xs[0], xs[1]),
            G::Where => self.ir.select(xs[0], xs[1], xs[2]),
            G::Not => self.ir.unary(UnaryFn::Not, xs[0]),
            G::Neg => self.ir.unary(UnaryFn::Neg, xs[0]),
            G::Abs => self.ir.unary(UnaryFn::Abs, xs[0]),
            G::Exp => self.ir.unary(UnaryFn::Exp, xs[0]),
            G::Log => self.ir.unary(UnaryFn::Log, xs[0]),
            G::Sqrt => self.ir.unary(UnaryFn::Sqrt, xs[0]),
            G::Erf => self.ir.unary(UnaryFn::Erf, xs[0]),
            G::Tanh => self.ir.unary(UnaryFn::Tanh, xs[0]),
            G::Reciprocal => {
                let one = self.ir.constant(1.0, out);
                self.ir.binary(BinaryFn::Div, one, xs[0])
            }
            G::Sigmoid => {
                let one = self.fconst(1.0);
                let neg = self.ir.unary(UnaryFn::Neg, xs[0]);
                let e = self.ir.unary(UnaryFn::Exp, neg);
                let d = self.ir.binary(BinaryFn::Add, one, e);
                self.ir.binary(BinaryFn::Div, one, d)
            }
            G::Relu => {
                let zero = self.ir.constant(0.0, out);
                self.clamp(xs[0], Some(zero), None)
            }
            G::LeakyRelu => {
                let alpha = graph::ops::LeakyRelu::new(m, op)
                    .ok_or("leaky_relu")?
                    .alpha();
                let a = self.fconst(alpha);
                let zero = self.fconst(0.0);
                let scaled = self.ir.binary(BinaryFn::Mul, xs[0], a);
                let neg = self.ir.cmp(CmpPred::Lt, xs[0], zero);
                self.ir.select(neg, scaled, xs[0])
            }
            G::HardSigmoid | G::HardSwish => {
                let (alpha, beta) = match graph::ops::HardSigmoid::new(m, op) {
                    Some(h) => (h.alpha(), h.beta()),
                    None => (1.0 / 6.0, 0.5),
                };
                let (a, b) = (self.fconst(alpha), self.fconst(beta));
                let (zero, one) = (self.fconst(0.0), self.fconst(1.0));
                let y = self.ir.binary(BinaryFn::Mul, xs[0], a);
                let y = self.ir.binary(BinaryFn::Add, y, b);
                let y = self.clamp(y, Some(zero), Some(one));
                if f == G::HardSwish {
                    self.ir.binary(BinaryFn::Mul, xs[0], y)
                } else {
                    y
                }
            }
            G::Gelu => {
                let gelu = graph::ops::Gelu::new(m, op).ok_or("gelu")?;
                let tanh = gelu.approximate() == graph::ops::GeluApproximate::Tanh;
                let x = xs[0];
                let half = self.fconst(0.5);
                let one = self.fconst(1.0);
                let inner = if tanh {
                    let c = self.fconst((2.0 / std::f64::consts::PI).sqrt());
                    let k = self.fconst(0.044715);
                    let x3 = self.ir.binary(BinaryFn::Mul, x, x);
                    let x3 = self.ir.binary(BinaryFn::Mul, x3, x);
                    let t = self.ir.binary(BinaryFn::Mul, x3, k);
                    let t = self.ir.binary(BinaryFn::Add, x, t);
                    let t = self.ir.binary(BinaryFn::Mul, t, c);
                    self.ir.unary(UnaryFn::Tanh, t)
                } else {
                    let c = self.fconst(std::f64::consts::FRAC_1_SQRT_2);
                    let t = self.ir.binary(BinaryFn::Mul, x, c);
                    self.ir.unary(UnaryFn::Erf, t)
                };
                let t = self.ir.binary(BinaryFn::Add, inner, one);
                let t = self.ir.binary(BinaryFn::Mul, t, x);
                self.ir.binary(BinaryFn::Mul, t, half)
            }
            G::Clip => {
                let clip = graph::ops::Clip::new(m, op).ok_or("clip")?;
                let (lo, hi) = (clip.min(), clip.max());
                let lo = lo.map(|lo| self.ir.constant(lo, out));
                let hi = hi.map(|hi| self.ir.constant(hi, out));
                self.clamp(xs[0], lo, hi)
            }
            G::Cast => {
                if out == ElemType::I1 {
                    let zero = self.ir.constant(0.0, self.ir.elem(xs[0]));
                    self.ir.cmp(CmpPred::Ne, xs[0], zero)
                } else {
                    // Float to integer truncates toward zero in ONNX and WGSL alike.
                    self.ir.cast(xs[0], Type::Scalar(out))
                }
            }
            G::Sin => self.ir.unary(UnaryFn::Sin, xs[0]),
            G::Cos => self.ir.unary(UnaryFn::Cos, xs[0]),
            G::Tan => self.ir.unary(UnaryFn::Tan, xs[0]),
            G::Asin => self.ir.unary(UnaryFn::Asin, xs[0]),
            G::Acos => self.ir.unary(UnaryFn::Acos, xs[0]),
            G::Atan => self.ir.unary(UnaryFn::Atan, xs[0]),
            G::Sinh => self.ir.unary(UnaryFn::Sinh, xs[0]),
            G::Cosh => self.ir.unary(UnaryFn::Cosh, xs[0]),
            G::Asinh => self.ir.unary(UnaryFn::Asinh, xs[0]),
            G::Acosh => self.ir.unary(UnaryFn::Acosh, xs[0]),
            G::Atanh => self.ir.unary(UnaryFn::Atanh, xs[0]),
            G::Sign => self.ir.unary(UnaryFn::Sign, xs[0]),
            G::Floor => self.ir.unary(UnaryFn::Floor, xs[0]),
            G::Ceil => self.ir.unary(UnaryFn::Ceil, xs[0]),
            G::Round => self.ir.unary(UnaryFn::Round, xs[0]),
            G::And => self.ir.binary(BinaryFn::And, xs[0], xs[1]),
            G::Or => self.ir.binary(BinaryFn::Or, xs[0], xs[1]),
            G::Xor => self.ir.binary(BinaryFn::Xor, xs[0], xs[1]),
            G::ShiftLeft | G::ShiftRight => {
                let elem = graph_elem(self, self.m().op(op).results[0]);
                self.shift(f, xs[0], xs[1], elem)
            }
            other => return Err(format!("no element-wise lowering for {other}")),
        })
    }

    /// `x` raised to `lo` and lowered to `hi` where given, a NaN kept, as
    /// ONNX's Relu and Clip keep it; `kernel.binary max` would drop it.
    fn clamp(&mut self, x: ValueId, lo: Option<ValueId>, hi: Option<ValueId>) -> ValueId {
        let mut y = x;
        // Not `select(x < lo, lo, x)`: NVIDIA's Vulkan compiler makes that
        // a max, which drops the NaN; the NaN test stays.
        if let Some(lo) = lo {
            y = self.ir.extremum(CmpPred::Gt, lo, y);
        }
        if let Some(hi) = hi {
            y = self.ir.extremum(CmpPred::Lt, hi, y);
        }
        y
    }

    /// `a` shifted by `b` bits as the interpreter shifts a value of `elem`:
    /// a count outside [0, width) shifts every bit out, where the GPU
    /// would take it modulo the width. Kernels hold unsigned values below
    /// 2^31 (uploads refuse larger ones), so the arithmetic right shift
    /// shifts in zeros for them too.
    fn shift(&mut self, f: GraphOp, a: ValueId, b: ValueId, elem: ElemType) -> ValueId {
        let width = (elem.byte_size() * 8).min(32);
        let zero = self.ir.constant(0.0, ElemType::I32);
        let w = self.ir.constant(width as f64, ElemType::I32);
        let ge0 = self.ir.cmp(CmpPred::Ge, b, zero);
        let below = self.ir.cmp(CmpPred::Lt, b, w);
        let in_range = self.ir.binary(BinaryFn::And, ge0, below);
        let (shifted, out) = if f == GraphOp::ShiftLeft {
            (self.ir.binary(BinaryFn::Shl, a, b), zero)
        } else {
            let negative = self.ir.cmp(CmpPred::Lt, a, zero);
            let all = self.ir.constant(-1.0, ElemType::I32);
            let fill = self.ir.select(negative, all, zero);
            (self.ir.binary(BinaryFn::Shr, a, b), fill)
        };
        self.ir.select(in_range, shifted, out)
    }

    /// `y`, computed in i32, wrapped to the width of a 16-, 8-, 4- or 2-bit
    /// integer type `elem` as that type's arithmetic would wrap it.
    fn wrap_narrow_int(&mut self, y: ValueId, elem: ElemType) -> ValueId {
        let bits = match elem {
            ElemType::I2 | ElemType::U2 => 2,
            ElemType::I4 | ElemType::U4 => 4,
            ElemType::I8 | ElemType::U8 => 8,
            ElemType::I16 | ElemType::U16 => 16,
            _ => return y,
        };
        if elem.is_unsigned() {
            let mask = self.ir.constant(((1i64 << bits) - 1) as f64, ElemType::I32);
            self.ir.binary(BinaryFn::And, y, mask)
        } else {
            let shift = self.ir.constant((32 - bits) as f64, ElemType::I32);
            let up = self.ir.binary(BinaryFn::Shl, y, shift);
            self.ir.binary(BinaryFn::Shr, up, shift)
        }
    }

    /// `y` rounded to the nearest value of an 8- or 4-bit float, ties to
    /// even, as the interpreter rounds every result of such a type (see
    /// `value_at`): finite
    /// values past the largest saturate, an infinity stays one where the
    /// format has them. Kernels hold these types widened (f32, or f16,
    /// which holds all their values), so only the rounding is emulated: the
    /// spacing of `|y|`'s binade picked by comparisons, the quotient rounded
    /// to even (WGSL's round, OpenCL's rint).
    fn round_to_narrow_float(&mut self, y: ValueId, format: MiniFloat) -> ValueId {
        let elem = self.ir.elem(y);
        let x = self.widen(y);
        let a = self.ir.unary(UnaryFn::Abs, x);
        let (least, greatest, mantissa) = format.binades();
        let mut spacing = self.ir.constant(2f64.powi(least - mantissa), ACC);
        for e in least + 1..=greatest {
            let start = self.ir.constant(2f64.powi(e), ACC);
            let inside = self.ir.cmp(CmpPred::Ge, a, start);
            let s = self.ir.constant(2f64.powi(e - mantissa), ACC);
            spacing = self.ir.select(inside, s, spacing);
        }
        let steps = self.ir.binary(BinaryFn::Div, a, spacing);
        let steps = self.ir.unary(UnaryFn::Round, steps);
        let v = self.ir.binary(BinaryFn::Mul, steps, spacing);
        // A NaN stays one (a bare select or min may become a max that
        // drops it, see `clamp`).
        let max = self.ir.constant(format.max(), ACC);
        let mut v = self.ir.extremum(CmpPred::Lt, max, v);
        if format.has_infinity() {
            let finite = self.ir.constant(f64::from(f32::MAX), ACC);
            let infinite = self.ir.cmp(CmpPred::Gt, a, finite);
            v = self.ir.select(infinite, a, v);
        }
        let zero = self.ir.constant(0.0, ACC);
        let mut negative = self.ir.cmp(CmpPred::Lt, x, zero);
        if format.unsigned_zero() {
            // The FNUZ formats have no -0: a tiny negative value is +0.
            let nonzero = self.ir.cmp(CmpPred::Gt, v, zero);
            negative = self.ir.binary(BinaryFn::And, negative, nonzero);
        }
        let minus = self.ir.unary(UnaryFn::Neg, v);
        let mut v = self.ir.select(negative, minus, v);
        if !format.has_nan() {
            // E2M1 has no NaN: as ml_dtypes and the interpreter, NaN
            // becomes a zero (-0 here; the interpreter gives the opposite
            // sign's, equal to it).
            let nan = self.ir.is_nan(x);
            let minus_zero = self.ir.constant(-0.0, ACC);
            v = self.ir.select(nan, minus_zero, v);
        }
        self.narrow(v, elem)
    }

    /// A one-element input known at compile time (a splat bound as input).
    fn const_input(&self, v: ValueId) -> Option<f64> {
        match self.inputs.get(&v) {
            Some(Input::Splat(x)) => Some(*x),
            _ => None,
        }
    }

    /// Sum over `extents` of `term(indices)` in f32 (integers in their own
    /// type), as the output type.
    pub fn sum(
        &mut self,
        extents: &[i64],
        out: ElemType,
        term: &mut dyn FnMut(&mut Self, &[Ix]) -> R<ValueId>,
    ) -> R<ValueId> {
        // Integers sum in their own type: exactly, where f32 would round
        // beyond 2^24.
        let zero = self
            .ir
            .constant(0.0, if out.is_float() { ACC } else { out });
        let r = self.loop_nest(extents, vec![zero], &mut |kb, ivs, acc| {
            let t = term(kb, ivs)?;
            let t = kb.widen(t);
            Ok(vec![kb.ir.binary(BinaryFn::Add, acc[0], t)])
        })?;
        Ok(self.narrow(r[0], out))
    }

    fn matmul_at(&mut self, op: OpId, idx: &[Ix]) -> R<ValueId> {
        let (a, b) = (self.operand(op, 0), self.operand(op, 1));
        let (sa, sb) = (tensor_shape(self, a), tensor_shape(self, b));
        let k = sa[sa.len() - 1];
        let r = idx.len();
        let out = kernel_elem(graph_elem(self, a), self.float);
        let (ra, rb) = (sa.len(), sb.len());
        let idx = idx.to_vec();
        self.sum(&[k], out, &mut |kb, ks| {
            let kk = ks[0].clone();
            let (ia, ib): (Vec<Ix>, Vec<Ix>) = match (ra, rb) {
                (1, 1) => (vec![kk.clone()], vec![kk.clone()]),
                (1, _) => {
                    let mut ib = broadcast_index(&idx[..r - 1], &sb[..rb - 2]);
                    ib.extend([kk.clone(), idx[r - 1].clone()]);
                    (vec![kk.clone()], ib)
                }
                (_, 1) => {
                    let mut ia = broadcast_index(&idx[..r - 1], &sa[..ra - 2]);
                    ia.extend([idx[r - 1].clone(), kk.clone()]);
                    (ia, vec![kk.clone()])
                }
                _ => {
                    let mut ia = broadcast_index(&idx[..r - 2], &sa[..ra - 2]);
                    ia.extend([idx[r - 2].clone(), kk.clone()]);
                    let mut ib = broadcast_index(&idx[..r - 2], &sb[..rb - 2]);
                    ib.extend([kk.clone(), idx[r - 1].clone()]);
                    (ia, ib)
                }
            };
            let x = kb.value_at(a, &ia)?;
            let y = kb.value_at(b, &ib)?;
            let (x, y) = (kb.widen(x), kb.widen(y));
            Ok(kb.ir.binary(BinaryFn::Mul, x, y))
        })
    }

    /// Operand `i` of a gemm at row `m`, column `n` of its logical
    /// (untransposed) matrix.
    pub fn gemm_operand(&mut self, op: OpId, i: usize, row: Ix, col: Ix) -> R<ValueId> {
        let trans = self
            .view(op)?
            .i64(if i == 0 { "trans_a" } else { "trans_b" })?
            != 0;
        let idx = if trans {
            vec![col, row]
        } else {
            vec![row, col]
        };
        self.value_at(self.operand(op, i), &idx)
    }

    /// alpha * product + beta * c, the gemm epilogue.
    pub fn gemm_epilogue(&mut self, op: OpId, product: ValueId, idx: &[Ix]) -> R<ValueId> {
        let view = self.view(op)?;
        let (alpha, beta) = (view.f64("alpha")?, view.f64("beta")?);
        let has_c = self.m().op(op).operands.len() > 2;
        let mut y = product;
        if alpha != 1.0 {
            let a = self.fconst(alpha);
            y = self.ir.binary(BinaryFn::Mul, y, a);
        }
        if has_c && beta != 0.0 {
            let c_val = self.operand(op, 2);
            let s = tensor_shape(self, c_val);
            let mut c = self.value_at(c_val, &broadcast_index(idx, &s))?;
            if beta != 1.0 {
                let b = self.fconst(beta);
                c = self.ir.binary(BinaryFn::Mul, c, b);
            }
            y = self.ir.binary(BinaryFn::Add, y, c);
        }
        Ok(y)
    }

    fn gemm_at(&mut self, op: OpId, idx: &[Ix]) -> R<ValueId> {
        let a = self.operand(op, 0);
        let sa = tensor_shape(self, a);
        let trans_a = self.view(op)?.i64("trans_a")? != 0;
        let k = if trans_a { sa[0] } else { sa[1] };
        let (m, n) = (idx[0].clone(), idx[1].clone());
        let product = self.sum(&[k], self.float, &mut |kb, ks| {
            let x = kb.gemm_operand(op, 0, m.clone(), ks[0].clone())?;
            let y = kb.gemm_operand(op, 1, ks[0].clone(), n.clone())?;
            let (x, y) = (kb.widen(x), kb.widen(y));
            Ok(kb.ir.binary(BinaryFn::Mul, x, y))
        })?;
        self.gemm_epilogue(op, product, idx)
    }

    /// `flag` ? `x` : 0 for positions of a window that fall in the padding.
    pub(super) fn in_bounds(&mut self, positions: &[Ix], extents: &[i64]) -> Option<ValueId> {
        let mut flags = Vec::new();
        for (p, &n) in positions.iter().zip(extents) {
            if p.as_const().is_some_and(|c| (0..n).contains(&c)) {
                continue;
            }
            flags.push(self.index_cmp(CmpPred::Ge, p, 0));
            flags.push(self.index_cmp(CmpPred::Lt, p, n));
        }
        (!flags.is_empty()).then(|| self.ir.all(flags))
    }

    /// The operands, shapes and window of a convolution or a transposed
    /// convolution.
    pub(super) fn conv_parts(&self, op: OpId) -> R<ConvParts> {
        let (x, w) = (self.operand(op, 0), self.operand(op, 1));
        let (sx, sw) = (tensor_shape(self, x), tensor_shape(self, w));
        let view = self.view(op)?;
        Ok(ConvParts {
            window: shape::window(&view, sx.len() - 2)?,
            group: match graph::ops::Conv::new(self.m(), op) {
                Some(conv) => conv.group(),
                None => view.i64("group")?,
            },
            bias: self.m().op(op).operands.get(2).copied(),
            x,
            w,
            sx,
            sw,
        })
    }

    /// `Σ x[ix] · w[iw]` over `extents` (f32, or i32 for integers), where `term` gives `ix`,
    /// `iw` and a flag for the terms that count (a window in the padding,
    /// say), plus the bias at output channel `idx[1]`.
    pub(super) fn conv_sum(
        &mut self,
        conv: &ConvParts,
        idx: &[Ix],
        extents: &[i64],
        term: &mut dyn FnMut(&mut Self, &[Ix]) -> R<ConvTerm>,
    ) -> R<ValueId> {
        let out = kernel_elem(graph_elem(self, conv.x), self.float);
        let acc = self.sum(extents, out, &mut |kb, ivs| {
            let (ix, iw, inside) = term(kb, ivs)?;
            let xv = kb.value_at(conv.x, &ix)?;
            let wv = kb.value_at(conv.w, &iw)?;
            let (xv, wv) = (kb.widen(xv), kb.widen(wv));
            let t = kb.ir.binary(BinaryFn::Mul, xv, wv);
            Ok(match inside {
                Some(flag) => {
                    let zero = kb.ir.constant(0.0, kb.ir.elem(t));
                    kb.ir.select(flag, t, zero)
                }
                None => t,
            })
        })?;
        match conv.bias {
            Some(b) => {
                let b = self.value_at(b, &idx[1..2])?;
                Ok(self.ir.binary(BinaryFn::Add, acc, b))
            }
            None => Ok(acc),
        }
    }

    fn conv_at(&mut self, op: OpId, idx: &[Ix]) -> R<ValueId> {
        let conv = self.conv_parts(op)?;
        let (sx, sw, win) = (&conv.sx, &conv.sw, &conv.window);
        let (cg, cog) = (sw[1], sw[0] / conv.group);
        let first_channel = idx[1].clone().floor_div(Ix::constant(cog)) * Ix::constant(cg);
        let mut extents = vec![cg];
        extents.extend(&sw[2..]);
        let at = idx.to_vec();
        self.conv_sum(&conv, idx, &extents, &mut |kb, ivs| {
            let positions: Vec<Ix> = (0..sx.len() - 2)
                .map(|d| {
                    at[2 + d].clone() * Ix::constant(win.strides[d])
                        + ivs[1 + d].clone() * Ix::constant(win.dilations[d])
                        - Ix::constant(win.pads[d])
                })
                .collect();
            let mut ix = vec![at[0].clone(), first_channel.clone() + ivs[0].clone()];
            ix.extend(positions.iter().cloned());
            let mut iw = vec![at[1].clone(), ivs[0].clone()];
            iw.extend(ivs[1..].iter().cloned());
            Ok((ix, iw, kb.in_bounds(&positions, &sx[2..])))
        })
    }

    fn pool_at(&mut self, op: OpId, idx: &[Ix], is_max: bool) -> R<ValueId> {
        let x = self.operand(op, 0);
        let sx = tensor_shape(self, x);
        let spatial = sx.len() - 2;
        let view = self.view(op)?;
        let win = shape::window(&view, spatial)?;
        let kernel = view.i64s("kernel_shape")?.ok_or("missing kernel_shape")?;
        let include_pad = !is_max && view.i64("count_include_pad")? != 0;
        let init = if is_max { f64::NEG_INFINITY } else { 0.0 };
        let acc0 = self.ir.constant(init, ACC);
        let count0 = self.ir.constant(0.0, ACC);
        let idx = idx.to_vec();
        let r = self.loop_nest(&kernel, vec![acc0, count0], &mut |kb, ivs, c| {
            let positions: Vec<Ix> = (0..spatial)
                .map(|d| {
                    idx[2 + d].clone() * Ix::constant(win.strides[d])
                        + ivs[d].clone() * Ix::constant(win.dilations[d])
                        - Ix::constant(win.pads[d])
                })
                .collect();
            let mut ix = idx[..2].to_vec();
            ix.extend(positions.iter().cloned());
            let v = kb.value_at(x, &ix)?;
            let v = kb.widen(v);
            let inside = kb.in_bounds(&positions, &sx[2..]);
            let merged = if is_max {
                kb.ir.extremum(CmpPred::Gt, c[0], v)
            } else {
                kb.ir.binary(BinaryFn::Add, c[0], v)
            };
            let acc = match inside {
                Some(f) => kb.ir.select(f, merged, c[0]),
                None => merged,
            };
            let counted = if include_pad {
                let padded: Vec<i64> = (0..spatial)
                    .map(|d| sx[2 + d] + win.pads[d] + win.pads[spatial + d])
                    .collect();
                let shifted: Vec<Ix> = (0..spatial)
                    .map(|d| positions[d].clone() + Ix::constant(win.pads[d]))
                    .collect();
                kb.in_bounds(&shifted, &padded)
            } else {
                inside
            };
            let one = kb.ir.constant(1.0, ACC);
            let plus = kb.ir.binary(BinaryFn::Add, c[1], one);
            let count = match counted {
                Some(f) => kb.ir.select(f, plus, c[1]),
                None => plus,
            };
            Ok(vec![acc, count])
        })?;
        let y = if is_max {
            r[0]
        } else {
            let one = self.ir.constant(1.0, ACC);
            let n = self.ir.binary(BinaryFn::Max, r[1], one);
            self.ir.binary(BinaryFn::Div, r[0], n)
        };
        Ok(self.narrow(y, self.float))
    }

    /// The index into `x` (of `shape`) of output index `out` with the
    /// reduced `axes` at `reduced` (whose entries follow `axes`).
    pub fn reduction_source(
        shape: &[i64],
        axes: &[usize],
        keep: bool,
        out: &[Ix],
        reduced: &[Ix],
    ) -> Vec<Ix> {
        let mut kept = out.iter();
        let mut src = Vec::with_capacity(shape.len());
        for d in 0..shape.len() {
            match axes.iter().position(|&a| a == d) {
                Some(p) => {
                    if keep {
                        kept.next();
                    }
                    src.push(reduced[p].clone());
                }
                None => src.push(kept.next().cloned().unwrap_or(Ix::constant(0))),
            }
        }
        src
    }

    /// Reduction `kind` (sum, mean, max, min, prod) of `x` over `axes`,
    /// at output index `idx`.
    fn reduce_at(
        &mut self,
        x: ValueId,
        axes: &[usize],
        keep: bool,
        kind: Reduction,
        idx: &[Ix],
        out: ElemType,
    ) -> R<ValueId> {
        let sx = tensor_shape(self, x);
        let extents: Vec<i64> = axes.iter().map(|&a| sx[a]).collect();
        let count: i64 = extents.iter().product();
        let acc_elem = if out.is_float() { ACC } else { out };
        let acc0 = self.ir.constant(kind.init(), acc_elem);
        let idx = idx.to_vec();
        let axes = axes.to_vec();
        let r = self.loop_nest(&extents, vec![acc0], &mut |kb, ivs, c| {
            let src = Self::reduction_source(&sx, &axes, keep, &idx, ivs);
            let v = kb.value_at(x, &src)?;
            let v = kb.widen(v);
            Ok(vec![kind.combine(&mut kb.ir, c[0], v)])
        })?;
        let mut y = r[0];
        if kind == Reduction::Mean {
            let n = self.ir.constant(count as f64, acc_elem);
            y = self.ir.binary(BinaryFn::Div, y, n);
        }
        Ok(self.narrow(y, out))
    }

    /// arg_max or arg_min at output index `idx`: a loop along the axis
    /// carrying the best value so far and its index.
    fn arg_reduce_at(&mut self, op: OpId, idx: &[Ix]) -> R<ValueId> {
        let x = self.operand(op, 0);
        let sx = tensor_shape(self, x);
        let view = self.view(op)?;
        let axis = shape::axis(view.i64("axis")?, sx.len())?;
        let keep = view.i64("keepdims")? != 0;
        let last = view.i64("select_last_index")? != 0;
        let max = GraphOp::of(self.m(), op) == Some(GraphOp::ArgMax);
        let pred = match (max, last) {
            (true, false) => CmpPred::Gt,
            (true, true) => CmpPred::Ge,
            (false, false) => CmpPred::Lt,
            (false, true) => CmpPred::Le,
        };
        let worst = if graph_elem(self, x).is_float() {
            let inf = if max {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            };
            self.ir.constant(inf, ACC)
        } else {
            let (lo, hi) = (i32::MIN as f64, i32::MAX as f64);
            self.ir.constant(if max { lo } else { hi }, ElemType::I32)
        };
        let first = self.ir.constant(0.0, ElemType::I32);
        let idx = idx.to_vec();
        let r = self.for_loop(sx[axis], vec![worst, first], &mut |kb, k, c| {
            let src = Self::reduction_source(&sx, &[axis], keep, &idx, std::slice::from_ref(&k));
            let v = kb.value_at(x, &src)?;
            let v = kb.widen(v);
            let mut better = kb.ir.cmp(pred, v, c[0]);
            // A NaN is the best of all, the first (or the last) of them
            // taken, as numpy's argmax and argmin take it.
            if kb.ir.elem(v).is_float() {
                let mut nan = kb.ir.is_nan(v);
                if !last {
                    let best_nan = kb.ir.is_nan(c[0]);
                    let best_number = kb.ir.unary(UnaryFn::Not, best_nan);
                    nan = kb.ir.binary(BinaryFn::And, nan, best_number);
                }
                better = kb.ir.binary(BinaryFn::Or, better, nan);
            }
            let k = kb.apply(&k);
            let k = kb.ir.cast(k, Type::Scalar(ElemType::I32));
            Ok(vec![
                kb.ir.select(better, v, c[0]),
                kb.ir.select(better, k, c[1]),
            ])
        })?;
        Ok(r[1])
    }

    fn softmax_at(&mut self, op: OpId, idx: &[Ix]) -> R<ValueId> {
        let x = self.operand(op, 0);
        let sx = tensor_shape(self, x);
        let axis = shape::axis(self.view(op)?.i64("axis")?, sx.len())?;
        let at = |k: &Ix| {
            let mut i = idx.to_vec();
            i[axis] = k.clone();
            i
        };
        let lowest = self.ir.constant(f64::NEG_INFINITY, ACC);
        let max = self.for_loop(sx[axis], vec![lowest], &mut |kb, k, c| {
            let v = kb.value_at(x, &at(&k))?;
            let v = kb.widen(v);
            Ok(vec![kb.ir.binary(BinaryFn::Max, c[0], v)])
        })?[0];
        let zero = self.ir.constant(0.0, ACC);
        let sum = self.for_loop(sx[axis], vec![zero], &mut |kb, k, c| {
            let v = kb.value_at(x, &at(&k))?;
            let v = kb.widen(v);
            let d = kb.ir.binary(BinaryFn::Sub, v, max);
            let e = kb.ir.unary(UnaryFn::Exp, d);
            Ok(vec![kb.ir.binary(BinaryFn::Add, c[0], e)])
        })?[0];
        let v = self.value_at(x, idx)?;
        let v = self.widen(v);
        let d = self.ir.binary(BinaryFn::Sub, v, max);
        let e = self.ir.unary(UnaryFn::Exp, d);
        let y = self.ir.binary(BinaryFn::Div, e, sum);
        Ok(self.narrow(y, self.float))
    }

    /// The axes a layer_norm (from `axis` on) or instance_norm (spatial)
    /// normalizes over.
    pub fn norm_axes(&self, op: OpId, layer: bool) -> R<Vec<usize>> {
        let rank = tensor_shape(self, self.operand(op, 0)).len();
        if layer {
            let axis = shape::axis(self.view(op)?.i64("axis")?, rank)?;
            Ok((axis..rank).collect())
        } else {
            Ok((2..rank).collect())
        }
    }

    /// mean and 1/sqrt(variance + epsilon), in f32, over `axes` around `idx`.
    pub fn moments(&mut self, op: OpId, axes: &[usize], idx: &[Ix]) -> R<(ValueId, ValueId)> {
        let x = self.operand(op, 0);
        let sx = tensor_shape(self, x);
        let extents: Vec<i64> = axes.iter().map(|&a| sx[a]).collect();
        let n: i64 = extents.iter().product();
        let at = |ivs: &[Ix]| {
            let mut i = idx.to_vec();
            for (p, &a) in axes.iter().enumerate() {
                i[a] = ivs[p].clone();
            }
            i
        };
        let zero = self.ir.constant(0.0, ACC);
        let total = self.loop_nest(&extents, vec![zero], &mut |kb, ivs, c| {
            let v = kb.value_at(x, &at(ivs))?;
            let v = kb.widen(v);
            Ok(vec![kb.ir.binary(BinaryFn::Add, c[0], v)])
        })?[0];
        let count = self.ir.constant(n as f64, ACC);
        let mean = self.ir.binary(BinaryFn::Div, total, count);
        let zero = self.ir.constant(0.0, ACC);
        let squares = self.loop_nest(&extents, vec![zero], &mut |kb, ivs, c| {
            let v = kb.value_at(x, &at(ivs))?;
            let v = kb.widen(v);
            let d = kb.ir.binary(BinaryFn::Sub, v, mean);
            let sq = kb.ir.binary(BinaryFn::Mul, d, d);
            Ok(vec![kb.ir.binary(BinaryFn::Add, c[0], sq)])
        })?[0];
        let var = self.ir.binary(BinaryFn::Div, squares, count);
        let eps = self.view(op)?.f64("epsilon")?;
        let e = self.ir.constant(eps, ACC);
        let var = self.ir.binary(BinaryFn::Add, var, e);
        Ok((mean, self.ir.unary(UnaryFn::Rsqrt, var)))
    }

    /// (x - mean) * inv * scale + bias at `idx`, the normalization's output.
    pub fn normalized(
        &mut self,
        op: OpId,
        layer: bool,
        idx: &[Ix],
        mean: ValueId,
        inv: ValueId,
    ) -> R<ValueId> {
        let x = self.value_at(self.operand(op, 0), idx)?;
        let x = self.widen(x);
        let d = self.ir.binary(BinaryFn::Sub, x, mean);
        let y = self.ir.binary(BinaryFn::Mul, d, inv);
        let y = self.narrow(y, self.float);
        let operands = self.m().op(op).operands.clone();
        let param_idx: Vec<Ix> = if layer {
            let rank = idx.len();
            let s = tensor_shape(self, operands[1]);
            idx[rank - s.len()..].to_vec()
        } else {
            vec![idx[1].clone()]
        };
        let scale = self.value_at(
            operands[1],
            &broadcast_index(&param_idx, &tensor_shape(self, operands[1])),
        )?;
        let mut y = self.ir.binary(BinaryFn::Mul, y, scale);
        if let Some(&b) = operands.get(2) {
            let bias = self.value_at(b, &broadcast_index(&param_idx, &tensor_shape(self, b)))?;
            y = self.ir.binary(BinaryFn::Add, y, bias);
        }
        Ok(y)
    }

    fn norm_at(&mut self, op: OpId, idx: &[Ix], layer: bool) -> R<ValueId> {
        match self.norm_rows {
            Some((norm, NormRows::Input)) if norm == op => {
                return self.value_at(self.operand(op, 0), idx);
            }
            Some((norm, NormRows::Moments(mean, inv))) if norm == op => {
                return self.normalized(op, layer, idx, mean, inv);
            }
            _ => {}
        }
        let axes = self.norm_axes(op, layer)?;
        let (mean, inv) = self.moments(op, &axes, idx)?;
        self.normalized(op, layer, idx, mean, inv)
    }

    fn concat_at(&mut self, op: OpId, idx: &[Ix]) -> R<ValueId> {
        let operands = self.m().op(op).operands.clone();
        let rank = idx.len();
        let axis = shape::axis(self.view(op)?.i64("axis")?, rank)?;
        let mut pieces = Vec::new();
        let mut offset = 0;
        for &x in &operands {
            let extent = tensor_shape(self, x)[axis];
            pieces.push((x, offset, offset + extent));
            offset += extent;
        }
        let (last, last_off, _) = *pieces.last().ok_or("concat of nothing")?;
        let shifted = |off: i64| {
            let mut i = idx.to_vec();
            i[axis] = i[axis].clone() - Ix::constant(off);
            i
        };
        let mut y = self.value_at(last, &shifted(last_off))?;
        for &(x, off, end) in pieces.iter().rev().skip(1) {
            if off == end {
                continue;
            }
            let v = self.value_at(x, &shifted(off))?;
            let inside = self.index_cmp(CmpPred::Lt, &idx[axis], end);
            y = self.ir.select(inside, v, y);
        }
        Ok(y)
    }

    fn pad_at(&mut self, op: OpId, idx: &[Ix]) -> R<ValueId> {
        let x = self.operand(op, 0);
        let sx = tensor_shape(self, x);
        let pad = graph::ops::Pad::new(self.m(), op).ok_or("a graph.pad")?;
        let (pads, mode, value) = (pad.pads(), pad.mode(), pad.value());
        let r = sx.len();
        let shifted: Vec<Ix> = (0..r)
            .map(|d| idx[d].clone() - Ix::constant(pads[d]))
            .collect();
        if mode == PadMode::Constant {
            let v = self.value_at(x, &shifted)?;
            return Ok(match self.in_bounds(&shifted, &sx) {
                Some(f) => {
                    let elem = self.ir.elem(v);
                    let c = self.ir.constant(value, elem);
                    self.ir.select(f, v, c)
                }
                None => v,
            });
        }
        let mut src = Vec::with_capacity(r);
        for d in 0..r {
            let n = sx[d];
            if pads[d] == 0 && pads[r + d] == 0 {
                src.push(shifted[d].clone());
                continue;
            }
            let i = match mode {
                PadMode::Edge => {
                    let i = self.apply(&shifted[d]);
                    let (lo, hi) = (self.ir.index_const(0), self.ir.index_const(n - 1));
                    let i = self.ir.binary(BinaryFn::Max, i, lo);
                    self.ir.binary(BinaryFn::Min, i, hi)
                }
                PadMode::Reflect if n > 1 => {
                    let period = 2 * (n - 1);
                    let m = self.apply(&shifted[d].clone().modulo(Ix::constant(period)));
                    let back = self.apply(
                        &(Ix::constant(period) - shifted[d].clone().modulo(Ix::constant(period))),
                    );
                    let n_c = self.ir.index_const(n);
                    let low = self.ir.cmp(CmpPred::Lt, m, n_c);
                    self.ir.select(low, m, back)
                }
                PadMode::Reflect => self.ir.index_const(0),
                PadMode::Constant => unreachable!("returned above"),
            };
            src.push(self.var(i, n));
        }
        self.value_at(x, &src)
    }

    fn gather_at(&mut self, op: OpId, idx: &[Ix], plain: bool) -> R<ValueId> {
        let (x, indices) = (self.operand(op, 0), self.operand(op, 1));
        let (sx, si) = (tensor_shape(self, x), tensor_shape(self, indices));
        let axis = shape::axis(self.view(op)?.i64("axis")?, sx.len())?;
        let n = sx[axis];
        let (at, before, after): (Vec<Ix>, Vec<Ix>, Vec<Ix>) = if plain {
            (
                idx[axis..axis + si.len()].to_vec(),
                idx[..axis].to_vec(),
                idx[axis + si.len()..].to_vec(),
            )
        } else {
            (idx.to_vec(), idx[..axis].to_vec(), idx[axis + 1..].to_vec())
        };
        let i = self.value_at(indices, &at)?;
        let i = self.ir.cast(i, Type::Scalar(ElemType::I32));
        let zero = self.ir.constant(0.0, ElemType::I32);
        let extent = self.ir.constant(n as f64, ElemType::I32);
        let negative = self.ir.cmp(CmpPred::Lt, i, zero);
        let wrapped = self.ir.binary(BinaryFn::Add, i, extent);
        let i = self.ir.select(negative, wrapped, i);
        let i = self.ir.cast(i, Type::Index);
        let var = self.var(i, n);
        let mut src = before;
        src.push(var);
        src.extend(after);
        self.value_at(x, &src)
    }
}
