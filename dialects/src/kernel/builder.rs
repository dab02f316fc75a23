//! Building kernel IR: a `kernel.func`, its arguments, and ops appended at
//! an insertion point, one method per op taking what the op's spec
//! declares (typed enums for its enum attributes, affine maps for its
//! addresses). What the ops compute and where addresses come from is the
//! business of the lowering that drives the builder.

use ircc_core::ir::OpBuilder;
use ircc_core::{AffineMap, Attribute, BlockId, ElemType, Module, OpId, Type, ValueId};

use super::KernelOp;
use super::TextureArg;
use super::matrix::MatrixType;
use super::ops::{BinaryFn, CmpPred, FuncTemplate, IdKind, UnaryFn};

/// An open `kernel.for`: the loop, its index and carried values, and the
/// block to return to when it is closed.
pub struct ForLoop {
    op: OpId,
    outer: BlockId,
    pub index: ValueId,
    pub carried: Vec<ValueId>,
}

/// An open `kernel.if`, to close with [`FuncBuilder::end_if`].
pub struct IfBody {
    outer: BlockId,
}

/// How a finished kernel.func is launched and what it was built from.
pub struct Launch {
    pub workgroup: [i64; 3],
    pub grid: [i64; 3],
    pub template: FuncTemplate,
    /// Tile parameters of the template (matmul: BM BN BK TM TN).
    pub tile: Option<Vec<i64>>,
    pub textures: Vec<TextureArg>,
    /// Whether the template's parameters came from a tuning database.
    pub tuned: bool,
    /// The floating-point operations of its products, where counted.
    pub flops: Option<i64>,
}

pub struct FuncBuilder<'m> {
    pub m: &'m mut Module,
    pub func: OpId,
    /// Where new ops are appended.
    pub block: BlockId,
}

fn int(x: i64) -> Attribute {
    Attribute::Int(x, Type::Scalar(ElemType::I64))
}

impl<'m> FuncBuilder<'m> {
    /// Starts an empty kernel.func named `name`, appended to the module.
    pub fn new(m: &'m mut Module, name: &str) -> Self {
        let func = m.create_op(
            OpBuilder::new(KernelOp::Func.name())
                .attr("sym_name", Attribute::String(name.to_string()))
                .regions(1),
        );
        let body = m.body;
        m.append_op(body, func);
        let region = m.op(func).regions[0];
        let block = m.add_block(region, Vec::new());
        FuncBuilder { m, func, block }
    }

    pub fn entry(&self) -> BlockId {
        self.m
            .entry_block(self.func)
            .expect("FuncBuilder made the body")
    }

    /// Appends an op at the insertion point; returns its first result.
    pub fn op(&mut self, b: OpBuilder) -> Option<ValueId> {
        let op = self.m.create_op(b);
        self.m.append_op(self.block, op);
        self.m.op(op).results.first().copied()
    }

    fn op1(&mut self, b: OpBuilder) -> ValueId {
        self.op(b).expect("the op has a result")
    }

    pub fn ty(&self, v: ValueId) -> Type {
        self.m.value_type(v).clone()
    }

    /// The scalar type of `v`; i32 for an index (and anything else that
    /// is not a scalar).
    pub fn elem(&self, v: ValueId) -> ElemType {
        match self.m.value_type(v) {
            Type::Scalar(e) => *e,
            _ => ElemType::I32,
        }
    }

    /// A new kernel argument of type `ty` (the verifier requires a tensor).
    pub fn add_arg(&mut self, ty: Type) -> ValueId {
        let entry = self.entry();
        self.m.add_block_arg(entry, ty)
    }

    /// The invocation's id along `axis`.
    pub fn id(&mut self, kind: IdKind, axis: i64) -> ValueId {
        self.op1(
            OpBuilder::new(KernelOp::Id.name())
                .attr("kind", kind.into())
                .attr("axis", int(axis))
                .results([Type::Index]),
        )
    }

    pub fn apply(&mut self, map: AffineMap, operands: Vec<ValueId>) -> ValueId {
        self.op1(
            OpBuilder::new(KernelOp::Apply.name())
                .operands(operands)
                .attr("map", Attribute::AffineMap(map))
                .results([Type::Index]),
        )
    }

    fn memory_elem(&self, memory: ValueId) -> ElemType {
        self.m
            .value_type(memory)
            .as_tensor()
            .expect("memory is a tensor")
            .elem
    }

    /// A read of `memory` at `map(indices)` by a `kind` op giving `values`
    /// scalars of the memory's element type.
    fn read(
        &mut self,
        kind: KernelOp,
        memory: ValueId,
        map: AffineMap,
        indices: Vec<ValueId>,
        values: usize,
    ) -> OpId {
        let elem = self.memory_elem(memory);
        let op = self.m.create_op(
            OpBuilder::new(kind.name())
                .operands(std::iter::once(memory).chain(indices))
                .attr("map", Attribute::AffineMap(map))
                .results(vec![Type::Scalar(elem); values]),
        );
        self.m.append_op(self.block, op);
        op
    }

    /// Element `map(indices)` of `memory` (an argument or workgroup array).
    pub fn load(&mut self, memory: ValueId, map: AffineMap, indices: Vec<ValueId>) -> ValueId {
        let op = self.read(KernelOp::Load, memory, map, indices, 1);
        self.m.op(op).results[0]
    }

    pub fn store(
        &mut self,
        value: ValueId,
        memory: ValueId,
        map: AffineMap,
        indices: Vec<ValueId>,
    ) {
        self.op(OpBuilder::new(KernelOp::Store.name())
            .operands([value, memory].into_iter().chain(indices))
            .attr("map", Attribute::AffineMap(map)));
    }

    /// Writes `lanes` to elements `map(indices)` to `map(indices) + 3` of
    /// workgroup array `memory` in one store; the first must be a
    /// multiple of four.
    pub fn store4(
        &mut self,
        lanes: [ValueId; 4],
        memory: ValueId,
        map: AffineMap,
        indices: Vec<ValueId>,
    ) {
        self.op(OpBuilder::new(KernelOp::Store4.name())
            .operands(lanes.into_iter().chain([memory]).chain(indices))
            .attr("map", Attribute::AffineMap(map)));
    }

    /// Elements `map(indices)` to `map(indices) + 3` of workgroup array
    /// `memory` in one load; the first must be a multiple of four.
    pub fn load4(
        &mut self,
        memory: ValueId,
        map: AffineMap,
        indices: Vec<ValueId>,
    ) -> [ValueId; 4] {
        let op = self.read(KernelOp::Load4, memory, map, indices, 4);
        let r = &self.m.op(op).results;
        [r[0], r[1], r[2], r[3]]
    }

    /// Lane `map[2]` of texel `(map[0], map[1])` of texture argument `memory`.
    pub fn texture_load(
        &mut self,
        memory: ValueId,
        map: AffineMap,
        indices: Vec<ValueId>,
    ) -> ValueId {
        let op = self.read(KernelOp::TextureLoad, memory, map, indices, 1);
        self.m.op(op).results[0]
    }

    /// Writes `lanes` as texel `(map[0], map[1])` of texture output `memory`.
    pub fn texture_store(
        &mut self,
        lanes: [ValueId; 4],
        memory: ValueId,
        map: AffineMap,
        indices: Vec<ValueId>,
    ) {
        self.op(OpBuilder::new(KernelOp::TextureStore.name())
            .operands(lanes.into_iter().chain([memory]).chain(indices))
            .attr("map", Attribute::AffineMap(map)));
    }

    /// A cooperative matrix of zeros (an accumulator, role c).
    pub fn matrix_zero(&mut self, t: MatrixType) -> ValueId {
        self.op1(OpBuilder::new(KernelOp::MatrixZero.name()).results([t.to_type()]))
    }

    /// The matrix of type `t` whose element (r, c) is element
    /// `map(indices) + r * stride + c` of `memory`.
    pub fn matrix_load(
        &mut self,
        t: MatrixType,
        memory: ValueId,
        map: AffineMap,
        indices: Vec<ValueId>,
        stride: i64,
    ) -> ValueId {
        self.op1(
            OpBuilder::new(KernelOp::MatrixLoad.name())
                .operands(std::iter::once(memory).chain(indices))
                .attr("map", Attribute::AffineMap(map))
                .attr("stride", int(stride))
                .results([t.to_type()]),
        )
    }

    pub fn matrix_store(
        &mut self,
        matrix: ValueId,
        memory: ValueId,
        map: AffineMap,
        indices: Vec<ValueId>,
        stride: i64,
    ) {
        self.op(OpBuilder::new(KernelOp::MatrixStore.name())
            .operands([matrix, memory].into_iter().chain(indices))
            .attr("map", Attribute::AffineMap(map))
            .attr("stride", int(stride)));
    }

    /// `a x b + c`, of `c`'s type.
    pub fn matrix_multiply_add(&mut self, a: ValueId, b: ValueId, c: ValueId) -> ValueId {
        let ty = self.ty(c);
        self.op1(
            OpBuilder::new(KernelOp::MatrixMultiplyAdd.name())
                .operands([a, b, c])
                .results([ty]),
        )
    }

    /// Workgroup memory of `len` elements of `elem`.
    pub fn alloc(&mut self, len: i64, elem: ElemType) -> ValueId {
        self.op1(OpBuilder::new(KernelOp::Alloc.name()).results([Type::tensor(vec![len], elem)]))
    }

    pub fn barrier(&mut self) {
        self.op(OpBuilder::new(KernelOp::Barrier.name()));
    }

    /// A scalar constant of `elem` (an integer type truncates `value`).
    /// A scalar constant of `elem`. An integer saturates to the type's
    /// range, so a reduction's ±infinity starts an integer max or min at
    /// the type's least or greatest value.
    pub fn constant(&mut self, value: f64, elem: ElemType) -> ValueId {
        let attr = match elem {
            ElemType::I1 => Attribute::Bool(value != 0.0),
            e if e.is_float() => Attribute::Float(value, Type::Scalar(e)),
            e => {
                let (lo, hi) = e.int_range();
                Attribute::Int((value as i64).clamp(lo, hi), Type::Scalar(e))
            }
        };
        self.op1(
            OpBuilder::new(KernelOp::Constant.name())
                .attr("value", attr)
                .results([Type::Scalar(elem)]),
        )
    }

    pub fn index_const(&mut self, value: i64) -> ValueId {
        self.op1(
            OpBuilder::new(KernelOp::Constant.name())
                .attr("value", Attribute::Int(value, Type::Index))
                .results([Type::Index]),
        )
    }

    pub fn unary(&mut self, f: UnaryFn, x: ValueId) -> ValueId {
        let ty = self.ty(x);
        self.op1(
            OpBuilder::new(KernelOp::Unary.name())
                .operands([x])
                .attr("fn", f.into())
                .results([ty]),
        )
    }

    pub fn binary(&mut self, f: BinaryFn, a: ValueId, b: ValueId) -> ValueId {
        let ty = self.ty(a);
        self.op1(
            OpBuilder::new(KernelOp::Binary.name())
                .operands([a, b])
                .attr("fn", f.into())
                .results([ty]),
        )
    }

    pub fn cmp(&mut self, pred: CmpPred, a: ValueId, b: ValueId) -> ValueId {
        self.op1(
            OpBuilder::new(KernelOp::Cmp.name())
                .operands([a, b])
                .attr("pred", pred.into())
                .results([Type::Scalar(ElemType::I1)]),
        )
    }

    pub fn select(&mut self, cond: ValueId, a: ValueId, b: ValueId) -> ValueId {
        let ty = self.ty(a);
        self.op1(
            OpBuilder::new(KernelOp::Select.name())
                .operands([cond, a, b])
                .results([ty]),
        )
    }

    /// Whether float `x` is NaN, as `!(x == x)`: WGSL's `!=` on floats
    /// is ordered (naga prints `OpFOrdNotEqual`), so `x != x` would be
    /// false for a NaN.
    pub fn is_nan(&mut self, x: ValueId) -> ValueId {
        let same = self.cmp(CmpPred::Eq, x, x);
        self.unary(UnaryFn::Not, same)
    }

    /// The larger (`pred` Gt) or smaller (Lt) of `a` and `b`, NaN where
    /// either is: IEEE 754-2019's maximum and minimum, as ONNX's Max, Min,
    /// ReduceMax and MaxPool (numpy's `maximum`) give. `kernel.binary
    /// max` is the maximum *number*, as WGSL's `max` and OpenCL's `fmax`
    /// are, which drops a NaN. Folding a row into `a`, a NaN once there
    /// stays, since nothing compares greater than it.
    pub fn extremum(&mut self, pred: CmpPred, a: ValueId, b: ValueId) -> ValueId {
        debug_assert!(matches!(pred, CmpPred::Gt | CmpPred::Lt));
        if !self.elem(a).is_float() {
            let f = if pred == CmpPred::Gt {
                BinaryFn::Max
            } else {
                BinaryFn::Min
            };
            return self.binary(f, a, b);
        }
        let beats = self.cmp(pred, b, a);
        let nan = self.is_nan(b);
        let take = self.binary(BinaryFn::Or, beats, nan);
        self.select(take, b, a)
    }

    /// `x` as type `to` (itself when it has that type already).
    pub fn cast(&mut self, x: ValueId, to: Type) -> ValueId {
        if self.ty(x) == to {
            return x;
        }
        self.op1(
            OpBuilder::new(KernelOp::Cast.name())
                .operands([x])
                .results([to]),
        )
    }

    /// The conjunction of `flags` (true when empty).
    pub fn all(&mut self, flags: Vec<ValueId>) -> ValueId {
        let mut it = flags.into_iter();
        match it.next() {
            None => self.constant(1.0, ElemType::I1),
            Some(first) => it.fold(first, |acc, f| self.binary(BinaryFn::And, acc, f)),
        }
    }

    /// Opens a loop over `[0, extent)` carrying `inits`: ops go into its
    /// body until [`Self::end_for`].
    pub fn begin_for(&mut self, extent: i64, inits: Vec<ValueId>) -> ForLoop {
        let types: Vec<Type> = inits.iter().map(|&v| self.ty(v)).collect();
        let op = self.m.create_op(
            OpBuilder::new(KernelOp::For.name())
                .operands(inits)
                .attr("lower", int(0))
                .attr("upper", int(extent))
                .attr("step", int(1))
                .results(types.clone())
                .regions(1),
        );
        self.m.append_op(self.block, op);
        let region = self.m.op(op).regions[0];
        let body = self
            .m
            .add_block(region, std::iter::once(Type::Index).chain(types).collect());
        let args = self.m.blocks[body].args.clone();
        let outer = std::mem::replace(&mut self.block, body);
        ForLoop {
            op,
            outer,
            index: args[0],
            carried: args[1..].to_vec(),
        }
    }

    /// Closes a loop: `next` are the carried values for the next
    /// iteration; returns the loop's results.
    pub fn end_for(&mut self, l: ForLoop, next: Vec<ValueId>) -> Vec<ValueId> {
        self.op(OpBuilder::new(KernelOp::Yield.name()).operands(next));
        self.block = l.outer;
        self.m.op(l.op).results.clone()
    }

    /// Opens a conditional: ops go into its body until [`Self::end_if`].
    pub fn begin_if(&mut self, cond: ValueId) -> IfBody {
        let op = self.m.create_op(
            OpBuilder::new(KernelOp::If.name())
                .operands([cond])
                .regions(1),
        );
        self.m.append_op(self.block, op);
        let region = self.m.op(op).regions[0];
        let body = self.m.add_block(region, Vec::new());
        IfBody {
            outer: std::mem::replace(&mut self.block, body),
        }
    }

    pub fn end_if(&mut self, b: IfBody) {
        self.op(OpBuilder::new(KernelOp::Yield.name()));
        self.block = b.outer;
    }

    /// Ends the body and sets the function's type and launch attributes;
    /// `args` is the argument order, the last `outputs` of them written.
    pub fn finish(&mut self, args: Vec<ValueId>, outputs: usize, launch: Launch) {
        self.op(OpBuilder::new(KernelOp::Return.name()));
        let entry = self.entry();
        self.m.permute_block_args(entry, args.clone());
        let inputs: Vec<Type> = args.iter().map(|&a| self.ty(a)).collect();
        let attrs = &mut self.m.op_mut(self.func).attrs;
        attrs.insert(
            "function_type".into(),
            Attribute::Type(Type::Function {
                inputs,
                results: Vec::new(),
            }),
        );
        attrs.insert("outputs".into(), int(outputs as i64));
        attrs.insert(
            "workgroup_size".into(),
            Attribute::DenseI64Array(launch.workgroup.to_vec()),
        );
        attrs.insert(
            "grid".into(),
            Attribute::DenseI64Array(launch.grid.to_vec()),
        );
        attrs.insert("template".into(), launch.template.into());
        if let Some(tile) = launch.tile {
            attrs.insert("tile".into(), Attribute::DenseI64Array(tile));
        }
        if launch.tuned {
            attrs.insert("tuned".into(), Attribute::Bool(true));
        }
        if let Some(flops) = launch.flops {
            attrs.insert("flops".into(), int(flops));
        }
        if !launch.textures.is_empty() {
            let triples = launch
                .textures
                .iter()
                .flat_map(|t| [t.arg as i64, t.width as i64, t.height as i64])
                .collect();
            attrs.insert("textures".into(), Attribute::DenseI64Array(triples));
            let maps = launch
                .textures
                .iter()
                .map(|t| Attribute::AffineMap(t.layout.clone()))
                .collect();
            attrs.insert("texture_layouts".into(), Attribute::Array(maps));
        }
    }
}
