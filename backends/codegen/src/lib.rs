//! The walk every printer of `kernel.func` shares. A kernel is printed as
//! straight-line code of named immutable values (`gid_x` for the global
//! id along x, `idx3` for an address, `v4` for other values), counted
//! loops with mutable carried values (`c0`, ...), `if` blocks and
//! barriers; index arithmetic is the affine maps' own, with C's `/` and
//! `%` (kernel.lower guarantees that every floordiv and mod sees a
//! non-negative left side, so they are exact). A [`Language`] spells what
//! differs: types, literals, declarations, memory access, functions.

use std::collections::HashMap;
use std::fmt::Write;

use ircc_core::ir::ValueDef;
use ircc_core::{AffineExpr, Attribute, BlockId, ElemType, Module, OpId, Type, ValueId};
use ircc_dialects::kernel::ops::{self, BinaryFn, CmpPred, IdKind, UnaryFn};
use ircc_dialects::kernel::{KernelOp, KernelOp as K, MatrixType};

pub type R<T> = Result<T, String>;

/// Where a kernel's memory operand lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Space {
    /// A tensor argument in a buffer; `vec4` when `load4` reads it (a
    /// language may then declare it an array of vectors).
    Buffer { vec4: bool },
    /// A tensor argument in a 2.5D texture of four-lane texels.
    Texture,
    /// A `kernel.alloc`; `vec4` when `load4` reads it.
    Workgroup { vec4: bool },
}

/// A memory operand as the printer names it.
#[derive(Clone, Debug)]
pub struct Memory {
    pub name: String,
    pub elem: ElemType,
    pub space: Space,
    /// Elements in it.
    pub len: i64,
}

/// A memory operand's offset as printed: in elements, and where the
/// printer knows it exactly as a multiple of four plus a constant lane,
/// as that vector's index and the lane. A language that indexes memory by
/// vectors prints the latter where given, instead of dividing the former
/// (a signed division and remainder per access, in a product's innermost
/// loop).
#[derive(Clone, Copy, Debug)]
pub struct Offset<'a> {
    pub words: &'a str,
    pub vectors: Option<(&'a str, i64)>,
}

impl<'a> Offset<'a> {
    /// An offset known in elements only.
    pub fn words(words: &'a str) -> Offset<'a> {
        Offset {
            words,
            vectors: None,
        }
    }
}

/// Choices the device makes for every language.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Whether the device multiplies a vector by a scalar directly
    /// (Romou's `autobroadcast`: scalar-based GPUs such as Mali Bifrost
    /// and Adreno); otherwise the scalar is splat into a vector first, as
    /// vector-based GPUs need.
    pub autobroadcast: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            autobroadcast: true,
        }
    }
}

/// How one language spells kernel code. Expressions are returned as text;
/// statements without their indentation or line end.
pub trait Language {
    /// The name of a scalar or index type.
    fn type_name(&self, t: &Type) -> R<&'static str>;
    /// An integer (index or i32) literal.
    fn int(&self, c: i64) -> String;
    /// A float literal of type `ty` (a name [`Language::type_name`] gave).
    fn float(&mut self, x: f64, ty: &str) -> String;
    /// An immutable value.
    fn declare(&self, name: &str, ty: &str, value: &str) -> String;
    /// A mutable variable (a loop's carried value).
    fn var(&self, name: &str, ty: &str, value: &str) -> String;
    /// The invocation's id of `kind` along `axis` (0, 1, 2), as an index.
    fn id(&self, kind: IdKind, axis: usize) -> String;
    /// Element `offset` of `memory`; `in_bounds` when the offset is
    /// proved inside it. Kernels read past a tensor where they discard
    /// what they read (a padded convolution's border, a matmul's last
    /// tile), which Vulkan's robust buffer access makes safe and OpenCL
    /// does not.
    fn load(&mut self, memory: &Memory, offset: Offset, in_bounds: bool) -> String;
    fn store(&mut self, memory: &Memory, offset: Offset, value: &str) -> String;
    /// The statements that write `lanes` (values of type `ty`) to four
    /// elements of workgroup memory from `offset` (a multiple of four) on.
    fn store4(
        &mut self,
        memory: &Memory,
        offset: Offset,
        lanes: &[String],
        ty: &str,
    ) -> Vec<String>;
    /// The four elements of workgroup memory or a buffer from `offset`
    /// (a multiple of four) on, as a vector.
    fn load4(&mut self, memory: &Memory, offset: Offset) -> String;
    /// The type of [`Language::load4`]'s vector of `ty`.
    fn vec4_type(&self, ty: &str) -> String;
    /// The vector of four `x` of type `ty`.
    fn splat(&self, x: &str, ty: &str) -> String;
    /// One lane of the texel at `(x, y)`, as a value of type `ty`.
    fn texture_lane(&mut self, memory: &Memory, x: &str, y: &str, lane: &str, ty: &str) -> String;
    /// Writes the texel at `(x, y)`; `lanes` are values of type `ty`.
    fn texture_store(
        &mut self,
        memory: &Memory,
        x: &str,
        y: &str,
        lanes: &[String],
        ty: &str,
    ) -> String;
    fn unary(&mut self, f: UnaryFn, x: &str, ty: &str) -> String;
    fn binary(&mut self, f: BinaryFn, a: &str, b: &str, ty: &str) -> String;
    /// `x == x` for a float `x` of type `ty`: false for a NaN only, where a
    /// compiler that assumes there are none (as Vulkan lets a driver) may
    /// not fold it to true, nor a select around it to a max.
    fn is_number(&mut self, x: &str, _ty: &str) -> String {
        format!("{x} == {x}")
    }
    /// `cond ? a : b`.
    fn select(&self, cond: &str, a: &str, b: &str) -> String;
    /// `x` (of type `from`) converted to `to`.
    fn cast(&self, x: &str, from: &str, to: &str) -> String;
    /// The type of a cooperative matrix; an error where the language has
    /// none, so the other matrix methods are only reached where it has.
    fn matrix_type(&mut self, t: &MatrixType) -> R<String>;
    /// A matrix of zeros of type `ty` (a name [`Language::matrix_type`] gave).
    fn matrix_zero(&self, ty: &str) -> String;
    /// The matrix of type `ty` at `offset` of `memory`, row-major, rows
    /// `stride` elements apart (in memory of vectors, both multiples of
    /// four).
    fn matrix_load(&self, memory: &Memory, offset: Offset, stride: i64, ty: &str) -> String;
    fn matrix_store(&self, memory: &Memory, offset: Offset, stride: i64, value: &str) -> String;
    /// `a x b + c`.
    fn matrix_multiply_add(&self, a: &str, b: &str, c: &str) -> String;
    /// The head of `for (iv = lower; iv < upper; iv += step) {`.
    fn for_head(&self, iv: &str, lower: i64, upper: i64, step: i64) -> String;
    fn barrier(&self) -> &'static str;
}

/// The body of kernel.func `func`: the statements of its entry block,
/// indented by one level. `memories` names every tensor argument and
/// workgroup array.
pub fn body<L: Language>(
    m: &Module,
    func: OpId,
    memories: HashMap<ValueId, Memory>,
    options: Options,
    lang: &mut L,
) -> R<String> {
    let kernel = ops::Func::new(m, func).ok_or("not a kernel.func")?;
    let block = m.entry_block(func).ok_or("a kernel without a body")?;
    let mut p = Printer {
        m,
        lang,
        memories,
        names: HashMap::new(),
        ranges: HashMap::new(),
        quarters: HashMap::new(),
        workgroup: kernel.workgroup_size(),
        grid: kernel.grid(),
        options,
        products: HashMap::new(),
        next: 0,
        out: String::new(),
    };
    p.block(block, 1)?;
    Ok(p.out)
}

/// An [`Offset`] from its printed parts.
fn offset_of<'a>(words: &'a str, vectors: &'a Option<(String, i64)>) -> Offset<'a> {
    Offset {
        words,
        vectors: vectors.as_ref().map(|(q, r)| (q.as_str(), *r)),
    }
}

/// The tensor arguments of a kernel that `load4` reads.
pub fn vector_arguments(m: &Module, block: BlockId) -> Vec<ValueId> {
    let args = &m.blocks[block].args;
    let mut read = Vec::new();
    m.walk_block(block, &mut |op| {
        let memory = m.op(op).operands.first();
        if KernelOp::of(m, op) == Some(K::Load4)
            && let Some(&memory) = memory
            && args.contains(&memory)
            && !read.contains(&memory)
        {
            read.push(memory);
        }
    });
    read
}

/// The workgroup arrays of a kernel (`kernel.alloc`s, in order), each
/// with whether it is an array of vectors: `load4` reads it or `store4`
/// writes it, and where a matrix op addresses it too, every matrix op,
/// `load4` and `store4` on it addresses whole vectors (offsets and
/// strides multiples of four, which matrix ops then count in vectors;
/// otherwise the array stays one of elements, `load4` gathering four of
/// them and `store4` storing four). A matrix of f16 loaded through a
/// vector pointer is what makes a cooperative product's staging one
/// store per four elements.
pub fn workgroup_arrays(m: &Module, block: BlockId) -> Vec<(ValueId, bool)> {
    let aligned = |op: OpId| ircc_dialects::kernel::address::offset_divisor(m, op) % 4 == 0;
    let mut vectors = Vec::new();
    let mut unaligned_vectors = Vec::new();
    let mut matrices = Vec::new();
    let mut unaligned_matrices = Vec::new();
    let mut allocs = Vec::new();
    m.walk_block(block, &mut |op| {
        let o = m.op(op);
        let (memory, stride) = match KernelOp::of(m, op) {
            Some(K::Load4) => (o.operands[0], None),
            Some(K::Store4) => (o.operands[4], None),
            Some(K::MatrixLoad) => (
                o.operands[0],
                Some(ops::MatrixLoad::new(m, op).map(|l| l.stride())),
            ),
            Some(K::MatrixStore) => (
                o.operands[1],
                Some(ops::MatrixStore::new(m, op).map(|l| l.stride())),
            ),
            Some(K::Alloc) => {
                allocs.push(o.results[0]);
                return;
            }
            _ => return,
        };
        match stride {
            None => {
                vectors.push(memory);
                if !aligned(op) {
                    unaligned_vectors.push(memory);
                }
            }
            Some(stride) => {
                matrices.push(memory);
                if !(aligned(op) && stride.is_some_and(|s| s % 4 == 0)) {
                    unaligned_matrices.push(memory);
                }
            }
        }
    });
    allocs
        .into_iter()
        .map(|a| {
            let vector = vectors.contains(&a);
            let whole = !matrices.contains(&a)
                || !(unaligned_matrices.contains(&a) || unaligned_vectors.contains(&a));
            (a, vector && whole)
        })
        .collect()
}

#[derive(Clone, Copy)]
struct Product {
    first: OpId,
    lane: usize,
    scalar: ValueId,
    load4: OpId,
}

struct Printer<'m, 'l, L> {
    m: &'m Module,
    lang: &'l mut L,
    memories: HashMap<ValueId, Memory>,
    names: HashMap<ValueId, String>,
    /// What each index value may be, inclusive, where known.
    ranges: HashMap<ValueId, (i64, i64)>,
    /// Index values known as `4 * q + r`: q as printed, and r in 0..4.
    quarters: HashMap<ValueId, (String, i64)>,
    /// The kernel's workgroup size and grid, for the ids' ranges.
    workgroup: Vec<i64>,
    grid: Vec<i64>,
    options: Options,
    /// Products printed as one scalar-vector product: each of the four
    /// `kernel.binary mul` ops with the first of them, its lane, the
    /// scalar and the `load4`.
    products: HashMap<OpId, Product>,
    next: usize,
    out: String,
}

impl<L: Language> Printer<'_, '_, L> {
    /// The range of the op's map result `i` over its index operands from
    /// `first`, where every operand's range is known.
    fn map_range(&self, op: OpId, first: usize, i: usize) -> Option<(i64, i64)> {
        let o = self.m.op(op);
        let Some(Attribute::AffineMap(map)) = o.attr("map") else {
            return None;
        };
        let dims: Option<Vec<(i64, i64)>> = o.operands[first..]
            .iter()
            .map(|v| self.ranges.get(v).copied())
            .collect();
        map.results.get(i)?.range(&dims?)
    }

    /// Records what an index op's result may be.
    fn track_range(&mut self, op: OpId, kind: KernelOp) {
        let m = self.m;
        let o = m.op(op);
        let Some(&r) = o.results.first() else {
            return;
        };
        let range = match kind {
            K::Id => ops::Id::new(m, op).and_then(|id| {
                let axis = id.axis() as usize;
                let (wg, grid) = (*self.workgroup.get(axis)?, *self.grid.get(axis)?);
                let n = match id.kind() {
                    IdKind::Global => wg * grid,
                    IdKind::Local => wg,
                    IdKind::Workgroup => grid,
                };
                Some((0, n - 1))
            }),
            K::Constant => match o.attr("value") {
                Some(Attribute::Int(x, _)) => Some((*x, *x)),
                _ => None,
            },
            K::Apply => self.map_range(op, 0, 0),
            K::Binary => {
                let (a, b) = (
                    self.ranges.get(&o.operands[0]).copied(),
                    self.ranges.get(&o.operands[1]).copied(),
                );
                match (ops::Binary::new(m, op).map(|b| b.fn_()), a, b) {
                    (Some(BinaryFn::Min), Some(a), Some(b)) => Some((a.0.min(b.0), a.1.min(b.1))),
                    (Some(BinaryFn::Max), Some(a), Some(b)) => Some((a.0.max(b.0), a.1.max(b.1))),
                    _ => None,
                }
            }
            _ => None,
        };
        if let Some(range) = range {
            self.ranges.insert(r, range);
        }
    }

    /// Within a `kernel.if` on `v < c` or `v <= c` (a constant), `v` is
    /// below `c`; returns the range to restore after the body.
    fn narrow(&mut self, cond: ValueId) -> Option<(ValueId, (i64, i64))> {
        let m = self.m;
        let ValueDef::OpResult { op, .. } = m.value(cond).def else {
            return None;
        };
        let cmp = ops::Cmp::new(m, op)?;
        let o = m.op(op);
        let (v, bound) = (o.operands[0], o.operands[1]);
        let c = self.ranges.get(&bound).filter(|(lo, hi)| lo == hi)?.0;
        let upper = match cmp.pred() {
            CmpPred::Lt => c - 1,
            CmpPred::Le => c,
            _ => return None,
        };
        let old = *self.ranges.get(&v)?;
        self.ranges.insert(v, (old.0, old.1.min(upper)));
        Some((v, old))
    }

    /// The spelling of a value's type: a scalar's, an index's or a
    /// cooperative matrix's.
    fn value_type(&mut self, t: &Type) -> R<String> {
        if MatrixType::is(t) {
            return self.lang.matrix_type(&MatrixType::of(t)?);
        }
        Ok(self.lang.type_name(t)?.to_string())
    }

    fn name(&self, v: ValueId) -> R<&str> {
        self.names
            .get(&v)
            .map(String::as_str)
            .ok_or_else(|| "a value used before it is defined".to_string())
    }

    fn memory(&self, v: ValueId) -> R<Memory> {
        self.memories
            .get(&v)
            .cloned()
            .ok_or_else(|| "a load or store of something that is not memory".to_string())
    }

    fn fresh(&mut self, prefix: &str, v: ValueId) -> String {
        let n = format!("{prefix}{}", self.next);
        self.next += 1;
        self.names.insert(v, n.clone());
        n
    }

    fn expr(&self, e: &AffineExpr, operands: &[ValueId]) -> R<String> {
        use AffineExpr as E;
        let bin = |a: &E, op: &str, b: &E| -> R<String> {
            Ok(format!(
                "({} {op} {})",
                self.expr(a, operands)?,
                self.expr(b, operands)?
            ))
        };
        match e {
            E::Dim(i) => Ok(self.name(operands[*i as usize])?.to_string()),
            E::Sym(_) => Err("symbols cannot appear in kernel maps".to_string()),
            E::Const(c) if *c < 0 => Ok(format!("({})", self.lang.int(*c))),
            E::Const(c) => Ok(self.lang.int(*c)),
            // `x - 3`, not `x + (-3)`.
            E::Add(a, b) => match **b {
                E::Const(c) if c < 0 && c != i64::MIN => Ok(format!(
                    "({} - {})",
                    self.expr(a, operands)?,
                    self.lang.int(-c)
                )),
                _ => bin(a, "+", b),
            },
            E::Mul(a, b) => bin(a, "*", b),
            E::FloorDiv(a, b) => bin(a, "/", b),
            E::Mod(a, b) => bin(a, "%", b),
            E::CeilDiv(a, b) => {
                let (x, y) = (self.expr(a, operands)?, self.expr(b, operands)?);
                Ok(format!("(({x} + {y} - {}) / {y})", self.lang.int(1)))
            }
        }
    }

    /// Every result of the op's map over its operands from `first`.
    fn map_exprs(&self, op: OpId, first: usize) -> R<Vec<String>> {
        let o = self.m.op(op);
        let map = match o.attr("map") {
            Some(Attribute::AffineMap(map)) if map.num_results() > 0 => map,
            _ => return Err(format!("'{}' lacks its map", o.name)),
        };
        map.results
            .iter()
            .map(|e| self.expr(e, &o.operands[first..]))
            .collect()
    }

    fn map_expr(&self, op: OpId, first: usize) -> R<String> {
        Ok(self.map_exprs(op, first)?.swap_remove(0))
    }

    /// The op's first map result over its operands from `first` as
    /// `4 * q + r`, where [`Printer::quarter`] knows it.
    fn map_quarter(&self, op: OpId, first: usize) -> R<Option<(String, i64)>> {
        let o = self.m.op(op);
        let Some(Attribute::AffineMap(map)) = o.attr("map") else {
            return Err(format!("'{}' lacks its map", o.name));
        };
        let Some(e) = map.results.first() else {
            return Ok(None);
        };
        self.quarter(e, &o.operands[first..])
    }

    /// `e` as `4 * q + r`, q printed and r in 0..4: where each term is a
    /// constant, a multiple of four by its coefficient, or such an
    /// expression already known, remainders of multiples of four too;
    /// `None` where one is not (a floor division, an invocation's id).
    /// Exact for any sign: nothing is divided.
    fn quarter(&self, e: &AffineExpr, operands: &[ValueId]) -> R<Option<(String, i64)>> {
        use AffineExpr as E;
        let int = |c: i64| match c {
            c if c < 0 => format!("({})", self.lang.int(c)),
            c => self.lang.int(c),
        };
        let zero = self.lang.int(0);
        // Sums and products of printed quotients, without `+ 0` or `* 1`.
        let add = |a: String, b: String| match (a == zero, b == zero) {
            (true, _) => b,
            (_, true) => a,
            _ => format!("({a} + {b})"),
        };
        let scale = |x: String, c: i64| match c {
            1 => x,
            c => format!("({x} * {})", int(c)),
        };
        // `4 * q + r` from a printed q and any r.
        let normal = |q: String, r: i64| (add(q, int(r.div_euclid(4))), r.rem_euclid(4));
        let constant = |e: &E| match e {
            E::Const(c) => Some(*c),
            _ => None,
        };
        Ok(match e {
            E::Const(c) => Some((int(c.div_euclid(4)), c.rem_euclid(4))),
            E::Dim(i) => self.quarters.get(&operands[*i as usize]).cloned(),
            E::Sym(_) => None,
            E::Add(a, b) => match (self.quarter(a, operands)?, self.quarter(b, operands)?) {
                (Some((qa, ra)), Some((qb, rb))) => Some(normal(add(qa, qb), ra + rb)),
                _ => None,
            },
            E::Mul(a, b) => {
                let (x, c) = match (constant(a), constant(b)) {
                    (_, Some(c)) => (a, c),
                    (Some(c), _) => (b, c),
                    _ => return Ok(None),
                };
                if c % 4 == 0 {
                    Some((scale(self.expr(x, operands)?, c / 4), 0))
                } else {
                    self.quarter(x, operands)?
                        .map(|(q, r)| normal(scale(q, c), r * c))
                }
            }
            // (4q) mod 4d = 4 (q mod d): kernel.lower keeps a mod's left
            // side non-negative, so q is too.
            E::Mod(a, b) => match (self.quarter(a, operands)?, constant(b)) {
                (Some((q, 0)), Some(d)) if d > 0 && d % 4 == 0 => {
                    Some((format!("({q} % {})", int(d / 4)), 0))
                }
                _ => None,
            },
            E::FloorDiv(..) | E::CeilDiv(..) => None,
        })
    }

    fn block(&mut self, block: BlockId, indent: usize) -> R<()> {
        self.find_products(block);
        for &op in &self.m.blocks[block].ops.clone() {
            self.op(op, indent)?;
        }
        Ok(())
    }

    /// Groups of four products of one scalar with the four lanes of one
    /// `load4` in `block` (a tiled matmul's register tile), each product
    /// in one group, the first group of a product winning.
    fn find_products(&mut self, block: BlockId) {
        let m = self.m;
        let lane_of = |v: ValueId| match m.value(v).def {
            ValueDef::OpResult { op, index } if KernelOp::of(m, op) == Some(K::Load4) => {
                Some((op, index as usize))
            }
            _ => None,
        };
        // (scalar, load4) -> the products by lane, in block order.
        type Lanes = [Option<OpId>; 4];
        let mut groups: Vec<((ValueId, OpId), Lanes)> = Vec::new();
        for &op in &m.blocks[block].ops {
            let is_mul = ops::Binary::new(m, op).is_some_and(|b| b.fn_() == BinaryFn::Mul);
            if !is_mul {
                continue;
            }
            let o = m.op(op);
            let (a, b) = (o.operands[0], o.operands[1]);
            for (scalar, lane) in [(a, b), (b, a)] {
                let Some((load4, k)) = lane_of(lane) else {
                    continue;
                };
                let key = (scalar, load4);
                match groups.iter_mut().find(|(g, _)| *g == key) {
                    Some((_, lanes)) if lanes[k].is_none() => lanes[k] = Some(op),
                    Some(_) => {}
                    None => {
                        let mut lanes = [None; 4];
                        lanes[k] = Some(op);
                        groups.push((key, lanes));
                    }
                }
            }
        }
        for ((scalar, load4), lanes) in groups {
            let Some(lanes) = lanes.into_iter().collect::<Option<Vec<OpId>>>() else {
                continue;
            };
            if lanes.iter().any(|l| self.products.contains_key(l)) {
                continue;
            }
            let position = |op: &OpId| m.blocks[block].ops.iter().position(|o| o == op);
            let Some(&first) = lanes.iter().min_by_key(|op| position(op)) else {
                continue;
            };
            for (lane, &l) in lanes.iter().enumerate() {
                let p = Product {
                    first,
                    lane,
                    scalar,
                    load4,
                };
                self.products.insert(l, p);
            }
        }
    }

    fn line(&mut self, indent: usize, text: &str) {
        let _ = writeln!(self.out, "{:w$}{text}", "", w = indent * 4);
    }

    fn op(&mut self, op: OpId, indent: usize) -> R<()> {
        let m = self.m;
        let o = m.op(op);
        let result = o.results.first().copied();
        let index = self.lang.type_name(&Type::Index)?;
        let ty = match result {
            Some(r) if MatrixType::is(m.value_type(r)) => self.value_type(m.value_type(r))?,
            Some(r) => self
                .lang
                .type_name(m.value_type(r))
                .unwrap_or(index)
                .to_string(),
            None => String::new(),
        };
        let ty = ty.as_str();
        let arg = |i: usize| self.name(o.operands[i]).map(str::to_string);
        let malformed = || format!("malformed '{}'", o.name);
        let kind =
            KernelOp::of(m, op).ok_or_else(|| format!("'{}' cannot appear in a kernel", o.name))?;
        let value = match kind {
            K::Id => {
                let id = ops::Id::new(m, op).ok_or_else(malformed)?;
                let axis = id.axis() as usize;
                if axis > 2 {
                    return Err(malformed());
                }
                self.lang.id(id.kind(), axis)
            }
            K::Constant => match o.attr("value") {
                Some(Attribute::Float(x, _)) => self.lang.float(*x, ty),
                Some(Attribute::Int(x, _)) => {
                    let q = (self.lang.int(x.div_euclid(4)), x.rem_euclid(4));
                    self.quarters.insert(result.ok_or_else(malformed)?, q);
                    self.lang.int(*x)
                }
                Some(Attribute::Bool(b)) => b.to_string(),
                _ => return Err("a kernel.constant lacks its value".to_string()),
            },
            K::Apply => {
                if let Some(q) = self.map_quarter(op, 0)? {
                    self.quarters.insert(result.ok_or_else(malformed)?, q);
                }
                self.map_expr(op, 0)?
            }
            K::Load => {
                let memory = self.memory(o.operands[0])?;
                let offset = self.map_expr(op, 1)?;
                let vectors = self.map_quarter(op, 1)?;
                let in_bounds = self
                    .map_range(op, 1, 0)
                    .is_some_and(|(lo, hi)| lo >= 0 && hi < memory.len);
                self.lang
                    .load(&memory, offset_of(&offset, &vectors), in_bounds)
            }
            K::Store => {
                let memory = self.memory(o.operands[1])?;
                let offset = self.map_expr(op, 2)?;
                let vectors = self.map_quarter(op, 2)?;
                let value = arg(0)?;
                let line = self
                    .lang
                    .store(&memory, offset_of(&offset, &vectors), &value);
                self.line(indent, &line);
                return Ok(());
            }
            K::Store4 => {
                let memory = self.memory(o.operands[4])?;
                let offset = self.map_expr(op, 5)?;
                let vectors = self.map_quarter(op, 5)?;
                let lanes = (0..4).map(arg).collect::<R<Vec<_>>>()?;
                let lane_ty = self.lang.type_name(m.value_type(o.operands[0]))?;
                let lines =
                    self.lang
                        .store4(&memory, offset_of(&offset, &vectors), &lanes, lane_ty);
                for line in lines {
                    self.line(indent, &line);
                }
                return Ok(());
            }
            K::Load4 => {
                let memory = self.memory(o.operands[0])?;
                if memory.space == Space::Texture {
                    return Err("load4 cannot read a texture".to_string());
                }
                let offset = self.map_expr(op, 1)?;
                let vectors = self.map_quarter(op, 1)?;
                let name = format!("v{}", self.next);
                self.next += 1;
                let vector = self.lang.load4(&memory, offset_of(&offset, &vectors));
                let line = self.lang.declare(&name, &self.lang.vec4_type(ty), &vector);
                self.line(indent, &line);
                for (&r, lane) in o.results.iter().zip(["x", "y", "z", "w"]) {
                    self.names.insert(r, format!("{name}.{lane}"));
                }
                return Ok(());
            }
            K::TextureLoad => {
                let memory = self.memory(o.operands[0])?;
                let [x, y, lane] = <[String; 3]>::try_from(self.map_exprs(op, 1)?)
                    .map_err(|_| "a texture load maps to (x, y, lane)")?;
                self.lang.texture_lane(&memory, &x, &y, &lane, ty)
            }
            K::TextureStore => {
                let memory = self.memory(o.operands[4])?;
                let [x, y] = <[String; 2]>::try_from(self.map_exprs(op, 5)?)
                    .map_err(|_| "a texture store maps to (x, y)")?;
                let lanes = (0..4).map(arg).collect::<R<Vec<_>>>()?;
                let lane_ty = self.lang.type_name(m.value_type(o.operands[0]))?;
                let line = self.lang.texture_store(&memory, &x, &y, &lanes, lane_ty);
                self.line(indent, &line);
                return Ok(());
            }
            K::MatrixZero => self.lang.matrix_zero(ty),
            K::MatrixLoad => {
                let memory = self.memory(o.operands[0])?;
                let offset = self.map_expr(op, 1)?;
                let vectors = self.map_quarter(op, 1)?;
                let stride = ops::MatrixLoad::new(m, op).ok_or_else(malformed)?.stride();
                self.lang
                    .matrix_load(&memory, offset_of(&offset, &vectors), stride, ty)
            }
            K::MatrixStore => {
                let memory = self.memory(o.operands[1])?;
                let offset = self.map_expr(op, 2)?;
                let vectors = self.map_quarter(op, 2)?;
                let stride = ops::MatrixStore::new(m, op).ok_or_else(malformed)?.stride();
                let line =
                    self.lang
                        .matrix_store(&memory, offset_of(&offset, &vectors), stride, &arg(0)?);
                self.line(indent, &line);
                return Ok(());
            }
            K::MatrixMultiplyAdd => self.lang.matrix_multiply_add(&arg(0)?, &arg(1)?, &arg(2)?),
            K::Unary => {
                let f = ops::Unary::new(m, op).ok_or_else(malformed)?.fn_();
                self.lang.unary(f, &arg(0)?, ty)
            }
            K::Binary if self.products.contains_key(&op) => {
                return self.scalar_vector_product(op, indent);
            }
            K::Binary => {
                let f = ops::Binary::new(m, op).ok_or_else(malformed)?.fn_();
                self.lang.binary(f, &arg(0)?, &arg(1)?, ty)
            }
            K::Cmp => {
                let pred = ops::Cmp::new(m, op).ok_or_else(malformed)?.pred();
                let operand = m.value_type(o.operands[0]);
                if pred == CmpPred::Eq
                    && o.operands[0] == o.operands[1]
                    && matches!(operand, Type::Scalar(e) if e.is_float())
                {
                    let operand = self.lang.type_name(operand)?;
                    self.lang.is_number(&arg(0)?, operand)
                } else {
                    let p = match pred {
                        CmpPred::Lt => "<",
                        CmpPred::Le => "<=",
                        CmpPred::Gt => ">",
                        CmpPred::Ge => ">=",
                        CmpPred::Eq => "==",
                        CmpPred::Ne => "!=",
                    };
                    format!("{} {p} {}", arg(0)?, arg(1)?)
                }
            }
            K::Select => self.lang.select(&arg(0)?, &arg(1)?, &arg(2)?),
            K::Cast => {
                let from = self.lang.type_name(m.value_type(o.operands[0]))?;
                self.lang.cast(&arg(0)?, from, ty)
            }
            K::For => return self.for_loop(op, indent),
            K::If => {
                let cond = arg(0)?;
                self.line(indent, &format!("if ({cond}) {{"));
                let body = m.entry_block(op).ok_or("a kernel.if without a body")?;
                let narrowed = self.narrow(o.operands[0]);
                self.block(body, indent + 1)?;
                if let Some((v, range)) = narrowed {
                    self.ranges.insert(v, range);
                }
                self.line(indent, "}");
                return Ok(());
            }
            K::Barrier => {
                let line = self.lang.barrier();
                self.line(indent, line);
                return Ok(());
            }
            K::Alloc | K::Return | K::Yield => return Ok(()),
            K::Func | K::Launch => return Err(format!("'{kind}' cannot appear in a kernel")),
        };
        self.track_range(op, kind);
        let r = result.ok_or("an expression op without a result")?;
        let name = match kind {
            // Named for what they are: `gid_x`, `lid_y`, `wid_x` (the first
            // of each), and `idx` for addresses.
            K::Id => {
                let id = ops::Id::new(m, op).ok_or_else(malformed)?;
                let prefix = match id.kind() {
                    IdKind::Global => "gid",
                    IdKind::Local => "lid",
                    IdKind::Workgroup => "wid",
                };
                let axis = ["x", "y", "z"][id.axis() as usize];
                let n = format!("{prefix}_{axis}");
                if self.names.values().any(|v| *v == n) {
                    self.fresh("v", r)
                } else {
                    self.names.insert(r, n.clone());
                    n
                }
            }
            K::Apply => self.fresh("idx", r),
            _ => self.fresh("v", r),
        };
        let line = self.lang.declare(&name, ty, &value);
        self.line(indent, &line);
        Ok(())
    }

    /// One of four products of a scalar with a `load4`'s lanes: the first
    /// prints the vector product (the scalar splat unless the device
    /// broadcasts it), each names its lane of it.
    fn scalar_vector_product(&mut self, op: OpId, indent: usize) -> R<()> {
        let m = self.m;
        let p = self.products[&op];
        let lanes = ["x", "y", "z", "w"];
        let r = m.op(op).results[0];
        let base = |name: &str| name.rsplit_once('.').map_or(name, |(b, _)| b).to_string();
        if op != p.first {
            let vector = self.name(m.op(p.first).results[0])?;
            let name = format!("{}.{}", base(vector), lanes[p.lane]);
            self.names.insert(r, name);
            return Ok(());
        }
        let ty = self.lang.type_name(m.value_type(r))?;
        let vector = base(self.name(m.op(p.load4).results[0])?);
        let s = self.name(p.scalar)?.to_string();
        let s = if self.options.autobroadcast {
            s
        } else {
            self.lang.splat(&s, ty)
        };
        let name = format!("v{}", self.next);
        self.next += 1;
        let line = self
            .lang
            .declare(&name, &self.lang.vec4_type(ty), &format!("{s} * {vector}"));
        self.line(indent, &line);
        self.names.insert(r, format!("{name}.{}", lanes[p.lane]));
        Ok(())
    }

    fn for_loop(&mut self, op: OpId, indent: usize) -> R<()> {
        let m = self.m;
        let o = m.op(op);
        let body = m.entry_block(op).ok_or("a kernel.for without a body")?;
        let args = m.blocks[body].args.clone();
        let mut carried = Vec::new();
        for (i, &init) in o.operands.iter().enumerate() {
            let var = format!("c{}", self.next);
            self.next += 1;
            let ty = self.value_type(m.value_type(init))?;
            let line = self.lang.var(&var, &ty, self.name(init)?);
            self.line(indent, &line);
            self.names.insert(o.results[i], var.clone());
            carried.push(var);
        }
        // Not `i`: the 32nd name would be `i32`, a type.
        let iv = self.fresh("k", args[0]);
        let for_op = ops::For::new(m, op).ok_or("malformed kernel.for")?;
        if for_op.upper() > for_op.lower() {
            self.ranges
                .insert(args[0], (for_op.lower(), for_op.upper() - 1));
        }
        let head = self
            .lang
            .for_head(&iv, for_op.lower(), for_op.upper(), for_op.step());
        self.line(indent, &head);
        // Snapshots, so the yields below assign all carried values at once.
        for (k, &a) in args[1..].iter().enumerate() {
            let ty = self.value_type(m.value_type(a))?;
            let snap = self.fresh("p", a);
            let line = self.lang.declare(&snap, &ty, &carried[k]);
            self.line(indent + 1, &line);
        }
        self.block(body, indent + 1)?;
        let last = *m.blocks[body].ops.last().ok_or("an empty loop body")?;
        for (k, &y) in m.op(last).operands.iter().enumerate() {
            let line = format!("{} = {};", carried[k], self.name(y)?);
            self.line(indent + 1, &line);
        }
        self.line(indent, "}");
        Ok(())
    }
}
