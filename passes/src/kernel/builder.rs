//! Building one `kernel.func`: index variables, loads and stores through
//! simplified affine maps, loops, conditionals and scalar arithmetic.
//!
//! Indices are affine expressions over the kernel's index variables
//! (`Dim(i)` is `vars[i]`: an invocation id, a loop index, or an index read
//! from data), each known to lie in `[0, extent)`. They stay symbolic until
//! a load or store needs an address, so a chain of views, a broadcast and
//! the row-major layout compose into one map that `index.simplify`'s rules
//! reduce before it is written down.

use std::collections::HashMap;

use egg::Rewrite;
use ircc_core::ir::OpBuilder;
use ircc_core::pass::PassContext;
use ircc_core::{AffineExpr, AffineMap, Attribute, BlockId, ElemType, Module, OpId, Type, ValueId};
use ircc_dialects::kernel::KernelOp;
use ircc_dialects::kernel::ops::{BinaryFn, CmpPred, FuncTemplate, IdKind, UnaryFn};

use super::texture::TextureLayout;
use crate::index::simplify::{Idx, Limits, Ranges, simplify_map};

pub type Ix = AffineExpr;

/// A loop body: the loop index, the carried values in, the next ones out.
pub type LoopBody<'b, 'a> =
    dyn FnMut(&mut KernelBuilder<'a>, Ix, &[ValueId]) -> Result<Vec<ValueId>, String> + 'b;

/// A loop-nest body: one index per loop.
pub type NestBody<'b, 'a> =
    dyn FnMut(&mut KernelBuilder<'a>, &[Ix], &[ValueId]) -> Result<Vec<ValueId>, String> + 'b;

/// Saturation limits for addresses: smaller than `index.simplify`'s, as a
/// model has thousands of them; the common shapes are cached.
const KERNEL_LIMITS: Limits = Limits {
    iterations: 8,
    nodes: 1_500,
};

/// Simplified maps by (map, extents), shared by the kernels of one run.
pub type SimplifyCache = std::cell::RefCell<HashMap<(String, Vec<i64>), AffineMap>>;

/// How a kernel reads one graph value that the group takes as input.
#[derive(Clone, Debug)]
pub enum Input {
    /// A tensor in memory: `stored` (a host value) read through `map`
    /// (the composed views between them; `None` is the identity).
    Memory {
        stored: ValueId,
        shape: Vec<i64>,
        map: Option<AffineMap>,
    },
    /// A splat constant, folded into the code.
    Splat(f64),
}

/// A kernel argument: which host value it is bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgRole {
    Input(ValueId),
    Output(ValueId),
}

pub struct KernelBuilder<'a> {
    pub m: &'a mut Module,
    pub ctx: &'a PassContext<'a>,
    rules: &'a [Rewrite<Idx, Ranges>],
    simplified: &'a SimplifyCache,
    pub func: OpId,
    pub block: BlockId,
    vars: Vec<ValueId>,
    extents: Vec<i64>,
    memo: Vec<HashMap<(ValueId, Vec<Ix>), ValueId>>,
    /// Storage and arithmetic type of every float tensor (f32 or f16).
    pub float: ElemType,
    pub inputs: HashMap<ValueId, Input>,
    pub args: Vec<(ValueId, ArgRole)>,
    /// Host tensors held in textures (inputs this kernel reads, outputs it
    /// writes), by their layout.
    pub textures: HashMap<ValueId, TextureLayout>,
}

/// The element type kernels use for a graph element type.
pub fn kernel_elem(e: ElemType, float: ElemType) -> ElemType {
    match e {
        e if e.is_float() => float,
        ElemType::I1 => ElemType::I1,
        _ => ElemType::I32,
    }
}

/// The element type a tensor of `e` is stored as (booleans as i32).
pub fn storage_elem(e: ElemType, float: ElemType) -> ElemType {
    match kernel_elem(e, float) {
        ElemType::I1 => ElemType::I32,
        k => k,
    }
}

/// Row-major strides of `shape`.
pub fn strides(shape: &[i64]) -> Vec<i64> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The offset of `idx` in a row-major tensor of `shape`.
pub fn linearize(idx: &[Ix], shape: &[i64]) -> Ix {
    idx.iter()
        .zip(strides(shape))
        .fold(Ix::constant(0), |acc, (i, s)| {
            acc + i.clone() * Ix::constant(s)
        })
}

/// The multi-index of offset `i` in a row-major tensor of `shape`.
pub fn delinearize(i: &Ix, shape: &[i64]) -> Vec<Ix> {
    let total: i64 = shape.iter().product();
    strides(shape)
        .iter()
        .zip(shape)
        .map(|(&s, &d)| {
            if d == 1 {
                Ix::constant(0)
            } else if s * d == total {
                i.clone().floor_div(Ix::constant(s))
            } else {
                i.clone().floor_div(Ix::constant(s)).modulo(Ix::constant(d))
            }
        })
        .collect()
}

/// Smallest and largest value of `e` when `Dim(i)` ranges over `[0, ext[i])`.
fn bounds(e: &Ix, ext: &[i64]) -> (i64, i64) {
    use AffineExpr as E;
    match e {
        E::Dim(i) => (0, ext[*i as usize] - 1),
        E::Sym(_) => (i64::MIN / 4, i64::MAX / 4),
        E::Const(c) => (*c, *c),
        E::Add(a, b) => {
            let ((a0, a1), (b0, b1)) = (bounds(a, ext), bounds(b, ext));
            (a0.saturating_add(b0), a1.saturating_add(b1))
        }
        E::Mul(a, b) => {
            let ((a0, a1), (b0, b1)) = (bounds(a, ext), bounds(b, ext));
            let c = [
                a0.saturating_mul(b0),
                a0.saturating_mul(b1),
                a1.saturating_mul(b0),
                a1.saturating_mul(b1),
            ];
            (*c.iter().min().unwrap(), *c.iter().max().unwrap())
        }
        E::FloorDiv(a, b) | E::CeilDiv(a, b) => match b.as_const() {
            Some(d) if d > 0 => {
                let (a0, a1) = bounds(a, ext);
                (a0.div_euclid(d), a1.div_euclid(d) + 1)
            }
            _ => (i64::MIN / 4, i64::MAX / 4),
        },
        E::Mod(_, b) => match b.as_const() {
            Some(d) if d > 0 => (0, d - 1),
            _ => (i64::MIN / 4, i64::MAX / 4),
        },
    }
}

/// Rewrites `e` so that every floordiv, ceildiv and mod has a non-negative
/// left side (`(a + k*d) floordiv d - k` for a negative `a`), which makes
/// truncating division on the GPU agree with floor division.
pub fn nonnegative_divisions(e: &Ix, ext: &[i64]) -> Ix {
    use AffineExpr as E;
    let rec = |x: &Ix| Box::new(nonnegative_divisions(x, ext));
    match e {
        E::Add(a, b) => E::Add(rec(a), rec(b)),
        E::Mul(a, b) => E::Mul(rec(a), rec(b)),
        E::FloorDiv(a, b) | E::CeilDiv(a, b) | E::Mod(a, b) => {
            let a = nonnegative_divisions(a, ext);
            let lo = bounds(&a, ext).0;
            let d = b.as_const().unwrap_or(1);
            if lo >= 0 || d <= 0 {
                return match e {
                    E::FloorDiv(..) => E::FloorDiv(Box::new(a), b.clone()),
                    E::CeilDiv(..) => E::CeilDiv(Box::new(a), b.clone()),
                    _ => E::Mod(Box::new(a), b.clone()),
                };
            }
            let k = (-lo + d - 1) / d;
            let shifted = a + Ix::constant(k * d);
            match e {
                E::FloorDiv(..) => shifted.floor_div(b.as_ref().clone()) - Ix::constant(k),
                E::CeilDiv(..) => shifted.ceil_div(b.as_ref().clone()) - Ix::constant(k),
                _ => shifted.modulo(b.as_ref().clone()),
            }
        }
        other => other.clone(),
    }
}

/// Whether `a` and `b` agree on the corners of the domain and on points
/// spread through it. Debug builds (the tests) check every simplified
/// address with it: the rewrites must never change one.
fn agrees(a: &AffineMap, b: &AffineMap, extents: &[i64]) -> bool {
    let n = extents.len();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut point = vec![0i64; n];
    for k in 0..(1usize << n.min(8)) + 512 {
        for (i, p) in point.iter_mut().enumerate() {
            let e = extents[i].max(1);
            *p = if k < 1 << n.min(8) {
                if (k >> i) & 1 == 1 { e - 1 } else { 0 }
            } else {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % e as u64) as i64
            };
        }
        if a.eval(&point, &[]).ok() != b.eval(&point, &[]).ok() {
            return false;
        }
    }
    true
}

fn fits_i32(e: &Ix) -> bool {
    use AffineExpr as E;
    match e {
        E::Const(c) => i32::try_from(*c).is_ok(),
        E::Add(a, b) | E::Mul(a, b) | E::FloorDiv(a, b) | E::CeilDiv(a, b) | E::Mod(a, b) => {
            fits_i32(a) && fits_i32(b)
        }
        E::Dim(_) | E::Sym(_) => true,
    }
}

fn collect_dims(e: &Ix, out: &mut Vec<u32>) {
    use AffineExpr as E;
    match e {
        E::Dim(i) => {
            if !out.contains(i) {
                out.push(*i);
            }
        }
        E::Add(a, b) | E::Mul(a, b) | E::FloorDiv(a, b) | E::CeilDiv(a, b) | E::Mod(a, b) => {
            collect_dims(a, out);
            collect_dims(b, out);
        }
        E::Sym(_) | E::Const(_) => {}
    }
}

impl<'a> KernelBuilder<'a> {
    /// Starts an empty kernel.func named `name`, appended to the module.
    pub fn new(
        m: &'a mut Module,
        ctx: &'a PassContext<'a>,
        rules: &'a [Rewrite<Idx, Ranges>],
        simplified: &'a SimplifyCache,
        name: &str,
        float: ElemType,
    ) -> Self {
        let func = m.create_op(
            OpBuilder::new(KernelOp::Func.name())
                .attr("sym_name", Attribute::String(name.to_string()))
                .regions(1),
        );
        let body = m.body;
        m.append_op(body, func);
        let region = m.op(func).regions[0];
        let block = m.add_block(region, Vec::new());
        KernelBuilder {
            m,
            ctx,
            rules,
            simplified,
            func,
            block,
            vars: Vec::new(),
            extents: Vec::new(),
            memo: vec![HashMap::new()],
            float,
            inputs: HashMap::new(),
            args: Vec::new(),
            textures: HashMap::new(),
        }
    }

    pub fn entry(&self) -> BlockId {
        self.m
            .entry_block(self.func)
            .expect("kernel.func has a body")
    }

    /// Appends a new op at the insertion point and returns its result.
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

    pub fn elem(&self, v: ValueId) -> ElemType {
        match self.m.value_type(v) {
            Type::Scalar(e) => *e,
            _ => ElemType::I32,
        }
    }

    /// Makes the index value `v` (in `[0, extent)`) usable in expressions.
    pub fn var(&mut self, v: ValueId, extent: i64) -> Ix {
        self.vars.push(v);
        self.extents.push(extent.max(1));
        Ix::dim(self.vars.len() as u32 - 1)
    }

    /// An invocation id along `axis` (`kind`: global, local or workgroup).
    pub fn id(&mut self, kind: IdKind, axis: i64, extent: i64) -> Ix {
        let v = self.op1(
            OpBuilder::new(KernelOp::Id.name())
                .attr("kind", kind.into())
                .attr("axis", Attribute::Int(axis, Type::Scalar(ElemType::I64)))
                .results([Type::Index]),
        );
        self.var(v, extent)
    }

    /// The map from the variables `e` uses to `e`, simplified, and those
    /// variables as operands.
    fn compact(&self, e: &Ix) -> (AffineMap, Vec<ValueId>) {
        let e = nonnegative_divisions(e, &self.extents);
        let mut dims = Vec::new();
        collect_dims(&e, &mut dims);
        dims.sort_unstable();
        let renamed: Vec<Ix> = (0..self.vars.len() as u32)
            .map(|i| match dims.iter().position(|&d| d == i) {
                Some(p) => Ix::dim(p as u32),
                None => Ix::constant(0),
            })
            .collect();
        let extents: Vec<i64> = dims.iter().map(|&d| self.extents[d as usize]).collect();
        let map = AffineMap::new(dims.len() as u32, 0, vec![e.substitute(&renamed, &[])]);
        let map = if map.div_mod_count() == 0 {
            map
        } else {
            let key = (map.to_string(), extents.clone());
            let cached = self.simplified.borrow().get(&key).cloned();
            match cached {
                Some(m) => m,
                None => {
                    let s = simplify_map(&map, &extents, self.rules, KERNEL_LIMITS);
                    let s = AffineMap::new(
                        s.num_dims,
                        0,
                        vec![nonnegative_divisions(&s.results[0], &extents)],
                    );
                    // GPU indices are i32: keep the original where the
                    // rewrite reached for constants beyond it.
                    let s = if fits_i32(&s.results[0]) {
                        s
                    } else {
                        map.clone()
                    };
                    debug_assert!(
                        agrees(&map, &s, &extents),
                        "index.simplify changed {map} into {s} over {extents:?}"
                    );
                    self.simplified.borrow_mut().insert(key, s.clone());
                    s
                }
            }
        };
        let operands = dims.iter().map(|&d| self.vars[d as usize]).collect();
        (map, operands)
    }

    /// The index value of `e`.
    pub fn apply(&mut self, e: &Ix) -> ValueId {
        if let AffineExpr::Dim(d) = e {
            return self.vars[*d as usize];
        }
        let (map, operands) = self.compact(e);
        self.op1(
            OpBuilder::new(KernelOp::Apply.name())
                .operands(operands)
                .attr("map", Attribute::AffineMap(map))
                .results([Type::Index]),
        )
    }

    /// Several index expressions as one map over the union of their
    /// variables.
    fn compact_all(&self, es: &[Ix]) -> (AffineMap, Vec<ValueId>) {
        let mut operands: Vec<ValueId> = Vec::new();
        let mut results = Vec::new();
        for e in es {
            let (map, ops) = self.compact(e);
            let renamed: Vec<Ix> = ops
                .iter()
                .map(|v| {
                    let at = operands.iter().position(|o| o == v).unwrap_or_else(|| {
                        operands.push(*v);
                        operands.len() - 1
                    });
                    Ix::dim(at as u32)
                })
                .collect();
            results.push(map.results[0].substitute(&renamed, &[]));
        }
        (AffineMap::new(operands.len() as u32, 0, results), operands)
    }

    /// Lane `at[2]` of texel `(at[0], at[1])` of texture argument `memory`.
    pub fn texture_load(&mut self, memory: ValueId, at: &[Ix; 3]) -> ValueId {
        let elem = self.m.value_type(memory).as_tensor().expect("memory").elem;
        let (map, operands) = self.compact_all(at);
        self.op1(
            OpBuilder::new(KernelOp::TextureLoad.name())
                .operands(std::iter::once(memory).chain(operands))
                .attr("map", Attribute::AffineMap(map))
                .results([Type::Scalar(elem)]),
        )
    }

    /// Writes `lanes` as texel `(at[0], at[1])` of texture output `memory`.
    pub fn texture_store(&mut self, lanes: [ValueId; 4], memory: ValueId, at: &[Ix; 2]) {
        let (map, operands) = self.compact_all(at);
        self.op(OpBuilder::new(KernelOp::TextureStore.name())
            .operands(lanes.into_iter().chain([memory]).chain(operands))
            .attr("map", Attribute::AffineMap(map)));
    }

    /// Elements `offset` to `offset + 3` of workgroup array `memory` in one
    /// load; `offset` must be a multiple of four.
    pub fn load4(&mut self, memory: ValueId, offset: &Ix) -> [ValueId; 4] {
        let elem = self.m.value_type(memory).as_tensor().expect("memory").elem;
        let (map, operands) = self.compact(offset);
        let op = self.m.create_op(
            OpBuilder::new(KernelOp::Load4.name())
                .operands(std::iter::once(memory).chain(operands))
                .attr("map", Attribute::AffineMap(map))
                .results(vec![Type::Scalar(elem); 4]),
        );
        self.m.append_op(self.block, op);
        let r = &self.m.op(op).results;
        [r[0], r[1], r[2], r[3]]
    }

    /// Loads element `offset` of `memory` (an argument or workgroup array).
    pub fn load(&mut self, memory: ValueId, offset: &Ix) -> ValueId {
        let elem = self.m.value_type(memory).as_tensor().expect("memory").elem;
        let (map, operands) = self.compact(offset);
        self.op1(
            OpBuilder::new(KernelOp::Load.name())
                .operands(std::iter::once(memory).chain(operands))
                .attr("map", Attribute::AffineMap(map))
                .results([Type::Scalar(elem)]),
        )
    }

    pub fn store(&mut self, value: ValueId, memory: ValueId, offset: &Ix) {
        let (map, operands) = self.compact(offset);
        self.op(OpBuilder::new(KernelOp::Store.name())
            .operands([value, memory].into_iter().chain(operands))
            .attr("map", Attribute::AffineMap(map)));
    }

    /// Workgroup memory of `len` elements of `elem`.
    pub fn alloc(&mut self, len: i64, elem: ElemType) -> ValueId {
        self.op1(OpBuilder::new(KernelOp::Alloc.name()).results([Type::tensor(vec![len], elem)]))
    }

    pub fn barrier(&mut self) {
        self.op(OpBuilder::new(KernelOp::Barrier.name()));
    }

    pub fn constant(&mut self, value: f64, elem: ElemType) -> ValueId {
        let (attr, ty) = match elem {
            ElemType::I1 => (Attribute::Bool(value != 0.0), Type::Scalar(ElemType::I1)),
            e if e.is_float() => (Attribute::Float(value, Type::Scalar(e)), Type::Scalar(e)),
            e => (
                Attribute::Int(value as i64, Type::Scalar(e)),
                Type::Scalar(e),
            ),
        };
        self.op1(
            OpBuilder::new(KernelOp::Constant.name())
                .attr("value", attr)
                .results([ty]),
        )
    }

    pub fn index_const(&mut self, value: i64) -> ValueId {
        self.op1(
            OpBuilder::new(KernelOp::Constant.name())
                .attr("value", Attribute::Int(value, Type::Index))
                .results([Type::Index]),
        )
    }

    /// A float constant in the kernel's float type.
    pub fn fconst(&mut self, value: f64) -> ValueId {
        self.constant(value, self.float)
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

    /// `e` (an index expression) compared with a constant.
    pub fn index_cmp(&mut self, pred: CmpPred, e: &Ix, c: i64) -> ValueId {
        let a = self.apply(e);
        let b = self.index_const(c);
        self.cmp(pred, a, b)
    }

    /// The conjunction of `flags` (true when empty).
    pub fn all(&mut self, flags: Vec<ValueId>) -> ValueId {
        let mut it = flags.into_iter();
        match it.next() {
            None => self.constant(1.0, ElemType::I1),
            Some(first) => it.fold(first, |acc, f| self.binary(BinaryFn::And, acc, f)),
        }
    }

    /// A loop over `[0, extent)` carrying `inits`; `body` gets the loop
    /// index and the carried values and returns the next ones.
    pub fn for_loop(
        &mut self,
        extent: i64,
        inits: Vec<ValueId>,
        body: &mut LoopBody<'_, 'a>,
    ) -> Result<Vec<ValueId>, String> {
        let types: Vec<Type> = inits.iter().map(|&v| self.ty(v)).collect();
        let int = |x: i64| Attribute::Int(x, Type::Scalar(ElemType::I64));
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
        let inner = self
            .m
            .add_block(region, std::iter::once(Type::Index).chain(types).collect());
        let args = self.m.blocks[inner].args.clone();
        let outer = std::mem::replace(&mut self.block, inner);
        self.memo.push(HashMap::new());
        let iv = self.var(args[0], extent);
        let next = body(self, iv, &args[1..]);
        self.memo.pop();
        let next = next?;
        self.op(OpBuilder::new(KernelOp::Yield.name()).operands(next));
        self.block = outer;
        Ok(self.m.op(op).results.clone())
    }

    /// Nested loops over `extents`, one carried list through all of them.
    pub fn loop_nest(
        &mut self,
        extents: &[i64],
        inits: Vec<ValueId>,
        body: &mut NestBody<'_, 'a>,
    ) -> Result<Vec<ValueId>, String> {
        fn go<'a>(
            kb: &mut KernelBuilder<'a>,
            extents: &[i64],
            outer: &mut Vec<Ix>,
            carried: Vec<ValueId>,
            body: &mut NestBody<'_, 'a>,
        ) -> Result<Vec<ValueId>, String> {
            match extents.split_first() {
                None => body(kb, outer, &carried),
                Some((&1, rest)) => {
                    outer.push(Ix::constant(0));
                    let r = go(kb, rest, outer, carried, body);
                    outer.pop();
                    r
                }
                Some((&n, rest)) => kb.for_loop(n, carried, &mut |kb, iv, c| {
                    outer.push(iv);
                    let r = go(kb, rest, outer, c.to_vec(), body);
                    outer.pop();
                    r
                }),
            }
        }
        go(self, extents, &mut Vec::new(), inits, body)
    }

    /// Runs `body` only where `cond` holds.
    pub fn if_then(
        &mut self,
        cond: ValueId,
        body: &mut dyn FnMut(&mut Self) -> Result<(), String>,
    ) -> Result<(), String> {
        let op = self.m.create_op(
            OpBuilder::new(KernelOp::If.name())
                .operands([cond])
                .regions(1),
        );
        self.m.append_op(self.block, op);
        let region = self.m.op(op).regions[0];
        let inner = self.m.add_block(region, Vec::new());
        let outer = std::mem::replace(&mut self.block, inner);
        self.memo.push(HashMap::new());
        let r = body(self);
        self.memo.pop();
        self.op(OpBuilder::new(KernelOp::Yield.name()));
        self.block = outer;
        r
    }

    pub fn memo_get(&self, v: ValueId, idx: &[Ix]) -> Option<ValueId> {
        let key = (v, idx.to_vec());
        self.memo.iter().rev().find_map(|m| m.get(&key).copied())
    }

    /// Records that graph value `v` at `idx` is the kernel value `k`.
    pub fn memo_put(&mut self, v: ValueId, idx: &[Ix], k: ValueId) {
        self.memo
            .last_mut()
            .expect("a scope")
            .insert((v, idx.to_vec()), k);
    }

    /// The kernel argument bound to host value `host` in `role`.
    pub fn arg(&mut self, role: ArgRole) -> ValueId {
        if let Some(&(a, _)) = self.args.iter().find(|(_, r)| *r == role) {
            return a;
        }
        let (ArgRole::Input(host) | ArgRole::Output(host)) = role;
        let t = self
            .m
            .value_type(host)
            .as_tensor()
            .expect("a tensor")
            .clone();
        let ty = Type::tensor(t.shape, storage_elem(t.elem, self.float));
        let entry = self.entry();
        let a = self.m.add_block_arg(entry, ty);
        self.args.push((a, role));
        a
    }

    /// Stores `value` (a kernel value of graph value `result`'s element
    /// type) into host tensor `result` at `idx`.
    pub fn store_result(&mut self, result: ValueId, idx: &[Ix], value: ValueId) {
        let t = self
            .m
            .value_type(result)
            .as_tensor()
            .expect("a tensor")
            .clone();
        let memory = self.arg(ArgRole::Output(result));
        let elem = storage_elem(t.elem, self.float);
        let value = self.cast(value, Type::Scalar(elem));
        self.store(value, memory, &linearize(idx, &t.shape));
    }

    /// Finishes the function: inputs first, then outputs; the type, the
    /// launch geometry and the template.
    pub fn finish(
        &mut self,
        workgroup: [i64; 3],
        grid: [i64; 3],
        template: FuncTemplate,
    ) -> Vec<(ValueId, ArgRole)> {
        self.op(OpBuilder::new(KernelOp::Return.name()));
        let mut args = self.args.clone();
        args.sort_by_key(|(_, r)| matches!(r, ArgRole::Output(_)));
        let entry = self.entry();
        self.m
            .permute_block_args(entry, args.iter().map(|(a, _)| *a).collect());
        let inputs: Vec<Type> = args.iter().map(|(a, _)| self.ty(*a)).collect();
        let outputs = args
            .iter()
            .filter(|(_, r)| matches!(r, ArgRole::Output(_)))
            .count();
        let int = |x: i64| Attribute::Int(x, Type::Scalar(ElemType::I64));
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
            Attribute::DenseI64Array(workgroup.to_vec()),
        );
        attrs.insert("grid".into(), Attribute::DenseI64Array(grid.to_vec()));
        attrs.insert("template".into(), template.into());
        let textures: Vec<i64> = args
            .iter()
            .enumerate()
            .filter_map(|(i, (_, role))| {
                let (ArgRole::Input(host) | ArgRole::Output(host)) = role;
                let l = self.textures.get(host)?;
                Some([i as i64, l.width, l.height])
            })
            .flatten()
            .collect();
        if !textures.is_empty() {
            attrs.insert("textures".into(), Attribute::DenseI64Array(textures));
        }
        args
    }
}
