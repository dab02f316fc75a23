//! Lowering one group to a `kernel.func`: index variables, loads and
//! stores through simplified affine maps, loops and conditionals that
//! scope what has been computed, and the kernel's arguments bound to the
//! host values they hold. The kernel IR itself is built by the kernel
//! dialect's [`FuncBuilder`] (`kb.ir`).
//!
//! Indices are affine expressions over the kernel's index variables
//! (`Dim(i)` is `vars[i]`: an invocation id, a loop index, or an index read
//! from data), each known to lie in `[0, extent)`. They stay symbolic until
//! a load or store needs an address, so a chain of views, a broadcast and
//! the row-major layout compose into one map that `index.simplify`'s rules
//! reduce before it is written down.

use std::collections::HashMap;

use egg::Rewrite;
use ircc_core::pass::PassContext;
use ircc_core::{AffineExpr, AffineMap, ElemType, Module, OpId, TensorType, Type, ValueId};
use ircc_dialects::graph::GraphOp;
use ircc_dialects::kernel::builder::{FuncBuilder, Launch};
use ircc_dialects::kernel::ops::{BinaryFn, CmpPred, FuncTemplate, IdKind};
use ircc_dialects::kernel::{MatrixType, Target, TextureArg, storage};

pub use super::address::{Ix, delinearize, linearize};
use super::address::{agrees, collect_dims, fits_i32, nonnegative_divisions};
use super::prologue::NormRows;
use crate::index::simplify::{Idx, Limits, Ranges, simplify_map};
use ircc_dialects::texture::TextureLayout;

type R<T> = Result<T, String>;

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
    /// The partial products of `anchor`, a product split along K
    /// (`stored`, of `shape`: the splits, then the product's shape), read
    /// through `map` as `Memory` is: the product is their sum over the
    /// first axis (in f32), then the product's epilogue.
    Partials {
        stored: ValueId,
        shape: Vec<i64>,
        map: Option<AffineMap>,
        anchor: OpId,
    },
}

/// A kernel argument: which host value it is bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgRole {
    Input(ValueId),
    Output(ValueId),
    /// The partial products this kernel writes (`KernelBuilder::partials`),
    /// a host tensor its launch creates.
    Partials,
}

pub struct KernelBuilder<'a> {
    /// The kernel IR being built.
    pub ir: FuncBuilder<'a>,
    pub ctx: &'a PassContext<'a>,
    rules: &'a [Rewrite<Idx, Ranges>],
    simplified: &'a SimplifyCache,
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
    /// The type of the partial products this kernel writes, if it computes
    /// a product split along K.
    pub partials: Option<Type>,
    /// Whether its parameters came from a tuning database.
    pub tuned: bool,
    /// The floating-point operations of the products it computes.
    pub flops: Option<i64>,
    /// How a normalization fused into a product as its prologue is read
    /// while the product stages its operand (`prologue.rs`).
    pub norm_rows: Option<(OpId, NormRows)>,
}

/// The element type kernels use for a graph element type.
pub fn kernel_elem(e: ElemType, float: ElemType) -> ElemType {
    match e {
        e if e.is_float() => float,
        ElemType::I1 => ElemType::I1,
        _ => ElemType::I32,
    }
}

/// The element type a tensor of `e` that kernels write is stored as
/// (`kernel::storage`: booleans as i32); `KernelBuilder::arg` stores
/// read-only narrow integers as bytes.
pub fn storage_elem(e: ElemType, float: ElemType) -> ElemType {
    storage(e, float, false)
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
        KernelBuilder {
            ir: FuncBuilder::new(m, name),
            ctx,
            rules,
            simplified,
            vars: Vec::new(),
            extents: Vec::new(),
            memo: vec![HashMap::new()],
            float,
            inputs: HashMap::new(),
            args: Vec::new(),
            textures: HashMap::new(),
            partials: None,
            tuned: false,
            flops: None,
            norm_rows: None,
        }
    }

    /// The module being lowered.
    pub fn m(&self) -> &Module {
        self.ir.m
    }

    /// Makes the index value `v` (in `[0, extent)`) usable in expressions.
    pub fn var(&mut self, v: ValueId, extent: i64) -> Ix {
        self.vars.push(v);
        self.extents.push(extent.max(1));
        Ix::dim(self.vars.len() as u32 - 1)
    }

    /// `at`, past `extent - 1` held at it: a variable known to lie in
    /// `[0, extent)`, whose loads stay inside the tensor where `at` runs
    /// past its end (a padding lane, a row beyond a tile's product).
    pub fn clamped(&mut self, at: &Ix, extent: i64) -> Ix {
        let at = self.apply(at);
        let last = self.ir.index_const(extent - 1);
        let clamped = self.ir.binary(BinaryFn::Min, at, last);
        self.var(clamped, extent)
    }

    /// An invocation id along `axis`, known to lie in `[0, extent)`.
    pub fn id(&mut self, kind: IdKind, axis: i64, extent: i64) -> Ix {
        let v = self.ir.id(kind, axis);
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
                        "simplifying the address {map} changed it into {s} over {extents:?}"
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
        self.ir.apply(map, operands)
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
        let (map, operands) = self.compact_all(at);
        self.ir.texture_load(memory, map, operands)
    }

    /// Writes `lanes` as texel `(at[0], at[1])` of texture output `memory`.
    pub fn texture_store(&mut self, lanes: [ValueId; 4], memory: ValueId, at: &[Ix; 2]) {
        let (map, operands) = self.compact_all(at);
        self.ir.texture_store(lanes, memory, map, operands);
    }

    /// Elements `offset` to `offset + 3` of workgroup array `memory` in one
    /// load; `offset` must be a multiple of four.
    pub fn load4(&mut self, memory: ValueId, offset: &Ix) -> [ValueId; 4] {
        let (map, operands) = self.compact(offset);
        self.ir.load4(memory, map, operands)
    }

    /// Loads element `offset` of `memory` (an argument or workgroup array).
    pub fn load(&mut self, memory: ValueId, offset: &Ix) -> ValueId {
        let (map, operands) = self.compact(offset);
        self.ir.load(memory, map, operands)
    }

    pub fn store(&mut self, value: ValueId, memory: ValueId, offset: &Ix) {
        let (map, operands) = self.compact(offset);
        self.ir.store(value, memory, map, operands);
    }

    /// Writes `lanes` to four elements of workgroup array `memory` from
    /// `offset` on, which must be a multiple of four.
    pub fn store4(&mut self, lanes: [ValueId; 4], memory: ValueId, offset: &Ix) {
        let (map, operands) = self.compact(offset);
        self.ir.store4(lanes, memory, map, operands);
    }

    /// The cooperative matrix of type `t` at `offset` of `memory`, its
    /// rows `stride` elements apart.
    pub fn matrix_load(
        &mut self,
        t: MatrixType,
        memory: ValueId,
        offset: &Ix,
        stride: i64,
    ) -> ValueId {
        let (map, operands) = self.compact(offset);
        self.ir.matrix_load(t, memory, map, operands, stride)
    }

    pub fn matrix_store(&mut self, matrix: ValueId, memory: ValueId, offset: &Ix, stride: i64) {
        let (map, operands) = self.compact(offset);
        self.ir.matrix_store(matrix, memory, map, operands, stride);
    }

    /// A float constant in the kernel's float type.
    pub fn fconst(&mut self, value: f64) -> ValueId {
        self.ir.constant(value, self.float)
    }

    /// `e` (an index expression) compared with a constant.
    pub fn index_cmp(&mut self, pred: CmpPred, e: &Ix, c: i64) -> ValueId {
        let a = self.apply(e);
        let b = self.ir.index_const(c);
        self.ir.cmp(pred, a, b)
    }

    /// A loop over `[0, extent)` carrying `inits`; `body` gets the loop
    /// index and the carried values and returns the next ones.
    pub fn for_loop(
        &mut self,
        extent: i64,
        inits: Vec<ValueId>,
        body: &mut LoopBody<'_, 'a>,
    ) -> Result<Vec<ValueId>, String> {
        let l = self.ir.begin_for(extent, inits);
        self.memo.push(HashMap::new());
        let iv = self.var(l.index, extent);
        let carried = l.carried.clone();
        let next = body(self, iv, &carried);
        self.memo.pop();
        Ok(self.ir.end_for(l, next?))
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
        let b = self.ir.begin_if(cond);
        self.memo.push(HashMap::new());
        let r = body(self);
        self.memo.pop();
        self.ir.end_if(b);
        r
    }

    /// Runs `body` in a scope of its own: the graph values it computes
    /// are forgotten after it (where they are read in a way that holds
    /// only inside it, as a normalization's unnormalized input is).
    pub fn forgetting<T>(&mut self, body: impl FnOnce(&mut Self) -> T) -> T {
        self.memo.push(HashMap::new());
        let r = body(self);
        self.memo.pop();
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

    /// The host tensor type of the argument in `role`.
    fn host_type(&self, role: ArgRole) -> TensorType {
        match role {
            ArgRole::Input(host) | ArgRole::Output(host) => self.m().value_type(host),
            ArgRole::Partials => self.partials.as_ref().expect("the partials' type is set"),
        }
        .as_tensor()
        .expect("a tensor")
        .clone()
    }

    /// The kernel argument bound to host value `host` in `role`.
    pub fn arg(&mut self, role: ArgRole) -> ValueId {
        if let Some(&(a, _)) = self.args.iter().find(|(_, r)| *r == role) {
            return a;
        }
        let t = self.host_type(role);
        let read_only = match role {
            ArgRole::Input(host) => {
                let m = self.m();
                m.defining_op(host).is_none_or(|d| {
                    matches!(GraphOp::of(m, d), Some(GraphOp::Param | GraphOp::Constant))
                })
            }
            ArgRole::Output(_) | ArgRole::Partials => false,
        };
        let elem = storage(t.elem, self.float, read_only);
        let a = self.ir.add_arg(Type::tensor(t.shape, elem));
        self.args.push((a, role));
        a
    }

    /// Stores `value` into the output in `role` (a host tensor, or the
    /// partial products: an f32 total at `[split, product index...]`) at
    /// `idx`, in its storage type for the kernel's precision: at f16 a
    /// split's total is rounded once, as the product's result would be.
    pub fn store_output(&mut self, role: ArgRole, idx: &[Ix], value: ValueId) {
        let t = self.host_type(role);
        let memory = self.arg(role);
        let elem = storage_elem(t.elem, self.float);
        let value = self.ir.cast(value, Type::Scalar(elem));
        self.store(value, memory, &linearize(idx, &t.shape));
    }

    /// Finishes the function, inputs first, then outputs, with its launch
    /// geometry, template and tile parameters.
    pub fn finish(
        &mut self,
        workgroup: [i64; 3],
        grid: [i64; 3],
        template: FuncTemplate,
        tile: Option<Vec<i64>>,
    ) {
        let mut args = self.args.clone();
        let is_output = |r: &ArgRole| matches!(r, ArgRole::Output(_) | ArgRole::Partials);
        args.sort_by_key(|(_, r)| is_output(r));
        let outputs = args.iter().filter(|(_, r)| is_output(r)).count();
        let textures = args
            .iter()
            .enumerate()
            .filter_map(|(i, (_, role))| {
                let (ArgRole::Input(host) | ArgRole::Output(host)) = role else {
                    return None;
                };
                let l = self.textures.get(host)?;
                Some(TextureArg {
                    arg: i,
                    width: l.width as u32,
                    height: l.height as u32,
                    layout: l.map(),
                })
            })
            .collect();
        let order = args.iter().map(|(a, _)| *a).collect();
        self.ir.finish(
            order,
            outputs,
            Launch {
                workgroup,
                grid,
                template,
                tile,
                textures,
                tuned: self.tuned,
                flops: self.flops,
            },
        );
    }
}

/// The target's limits and tile sizes (`spec/targets/webgpu.toml`).
pub(super) fn target() -> &'static Target {
    Target::webgpu()
}

/// The op's name without its dialect, for kernel names.
pub(super) fn short(m: &Module, op: OpId) -> &'static str {
    GraphOp::of(m, op).map_or("op", GraphOp::mnemonic)
}

pub(super) fn shape_of(m: &Module, v: ValueId) -> Vec<i64> {
    m.value_type(v)
        .as_tensor()
        .map(|t| t.shape.clone())
        .unwrap_or_default()
}

pub(super) fn store_outputs(
    kb: &mut KernelBuilder,
    outputs: &[(ValueId, ValueId)],
    idx: &[Ix],
) -> R<()> {
    for &(inner, host) in outputs {
        let v = kb.value_at(inner, idx)?;
        kb.store_output(ArgRole::Output(host), idx, v);
    }
    Ok(())
}

pub(super) fn guarded(
    kb: &mut KernelBuilder,
    cond: Option<ValueId>,
    body: &mut dyn FnMut(&mut KernelBuilder) -> R<()>,
) -> R<()> {
    match cond {
        Some(c) => kb.if_then(c, body),
        None => body(kb),
    }
}

/// The index into an operand of `shape` that broadcasts to `idx`.
pub fn broadcast_index(idx: &[Ix], shape: &[i64]) -> Vec<Ix> {
    let lead = idx.len() - shape.len();
    shape
        .iter()
        .enumerate()
        .map(|(k, &d)| {
            if d == 1 {
                Ix::constant(0)
            } else {
                idx[lead + k].clone()
            }
        })
        .collect()
}

pub fn tensor_shape(kb: &KernelBuilder, v: ValueId) -> Vec<i64> {
    kb.m()
        .value_type(v)
        .as_tensor()
        .map(|t| t.shape.clone())
        .unwrap_or_default()
}
