//! The kernel interpreter: `kernel.launch` run on the CPU, so kernel IR is
//! checked against the graph level like every other level (`ircc check`).
//!
//! A workgroup runs in lockstep: each op is executed for all its
//! invocations (lanes) before the next, `kernel.if` narrows the set of
//! active lanes, and loops have constant bounds, so they are uniform.
//! Executing in program order for every lane at once gives a barrier its
//! meaning for free: every write before it happens before every read after
//! it; one that only some invocations reach is an error. Workgroup memory
//! starts as NaN (a GPU's starts undefined). Values are columns, one entry per lane; floats are held as `f64` and
//! rounded to f32 or f16 after every op, integers wrap to i32 (indices are
//! i32 on the GPU), as the printers' targets compute. Reads past the end
//! of a buffer give 0, as robust buffer access allows; writes past it are
//! errors. A texture argument is its `height x width x 4` lanes, filled
//! from the host tensor through its layout map and read back through it.

use std::collections::HashMap;

use ircc_core::interp::Env;
use ircc_core::registry::OpView;
use ircc_core::{
    AffineExpr, Attribute, BlockId, ElemType, Module, OpId, Tensor, TensorData, TensorType, Type,
    ValueId,
};
use ndarray::{ArrayD, IxDyn};

use super::KernelOp;
use super::matrix::MatrixType;
use super::ops::{self, BinaryFn, CmpPred, IdKind, UnaryFn};
use crate::graph::erf;
use crate::texture::{LANES, place_lanes, read_lanes};
use ircc_core::limits::MAX_INVOCATIONS;

type R<T> = Result<T, String>;

/// One value per lane, or one memory's elements.
#[derive(Clone, Debug)]
enum Col {
    Float(Vec<f64>),
    Int(Vec<i64>),
    Bool(Vec<bool>),
    /// A cooperative matrix, whole in every lane (row-major): the lanes of
    /// a subgroup hold one matrix together, and since they load it from
    /// one address, each holding all of it computes the same.
    Matrix(Vec<Vec<f64>>),
}

impl Col {
    fn floats(&self) -> R<&[f64]> {
        match self {
            Col::Float(v) => Ok(v),
            _ => Err("a float operand is not a float".into()),
        }
    }

    fn ints(&self) -> R<&[i64]> {
        match self {
            Col::Int(v) => Ok(v),
            _ => Err("an integer operand is not an integer".into()),
        }
    }

    fn bools(&self) -> R<&[bool]> {
        match self {
            Col::Bool(v) => Ok(v),
            _ => Err("a boolean operand is not i1".into()),
        }
    }

    /// Element `i`.
    fn get(&self, i: usize) -> Option<Scalar> {
        Some(match self {
            Col::Float(v) => Scalar::Float(*v.get(i)?),
            Col::Int(v) => Scalar::Int(*v.get(i)?),
            Col::Bool(v) => Scalar::Bool(*v.get(i)?),
            Col::Matrix(_) => return None,
        })
    }

    fn matrices(&self) -> R<&[Vec<f64>]> {
        match self {
            Col::Matrix(v) => Ok(v),
            _ => Err("a matrix operand is not a matrix".into()),
        }
    }

    fn set(&mut self, i: usize, x: Scalar) -> R<()> {
        let slot = match (self, x) {
            (Col::Float(v), Scalar::Float(x)) => v.get_mut(i).map(|s| *s = x),
            (Col::Int(v), Scalar::Int(x)) => v.get_mut(i).map(|s| *s = x),
            (Col::Bool(v), Scalar::Bool(x)) => v.get_mut(i).map(|s| *s = x),
            // Booleans are stored as integers (0 or 1), as on the GPU.
            (Col::Int(v), Scalar::Bool(x)) => v.get_mut(i).map(|s| *s = i64::from(x)),
            _ => return Err("a store of the wrong type".into()),
        };
        slot.ok_or_else(|| format!("a store to element {i}, past the end of its memory"))
    }

    /// Memory of `n` elements of `elem`: floats, or integers (booleans
    /// are stored as 0 and 1, as on the GPU).
    fn zeros_like(elem: ElemType, n: usize) -> Col {
        if elem.is_float() {
            Col::Float(vec![0.0; n])
        } else {
            Col::Int(vec![0; n])
        }
    }

    /// A loaded column as the type the load gives (i1 from 0 and 1).
    fn into_loaded(self, elem: Option<ElemType>) -> Col {
        match (self, elem) {
            (Col::Int(v), Some(ElemType::I1)) => Col::Bool(v.iter().map(|&x| x != 0).collect()),
            (c, _) => c,
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Scalar {
    Float(f64),
    Int(i64),
    Bool(bool),
}

fn round(x: f64, elem: ElemType) -> f64 {
    ircc_core::attr::round_to(x, elem)
}

fn wrap(x: i64) -> i64 {
    x as i32 as i64
}

fn elem_of(t: &Type) -> ElemType {
    match t {
        Type::Scalar(e) => *e,
        Type::Tensor(t) => t.elem,
        _ => ElemType::I32,
    }
}

/// The interpret hook of `kernel.launch`.
pub(super) fn interpret_launch(v: &OpView, args: &[Tensor], _: &mut dyn Env) -> R<Vec<Tensor>> {
    let m = v.module;
    let launch = ops::Launch::new(m, v.op).ok_or("not a kernel.launch")?;
    let func = m
        .lookup_symbol(launch.kernel())
        .and_then(|f| ops::Func::new(m, f))
        .ok_or_else(|| format!("no kernel.func @{}", launch.kernel()))?;
    let textures = super::texture_args(m, func.id())?;
    let texture = |arg: usize| textures.iter().find(|t| t.arg == arg);
    let entry = m.entry_block(func.id()).ok_or("the kernel has no body")?;
    let params = &m.blocks[entry].args;
    let results = &m.op(v.op).results;
    if params.len() != args.len() + results.len() {
        return Err("the launch does not bind every kernel argument".into());
    }
    let mut memory = Vec::with_capacity(params.len());
    let mut widths = HashMap::new();
    for (i, (&p, t)) in params.iter().zip(args).enumerate() {
        let elem = elem_of(m.value_type(p));
        memory.push(match texture(i) {
            Some(tex) => {
                widths.insert(p, tex.width as i64);
                let values: Vec<f64> = t.to_f64().iter().map(|&x| round(x, elem)).collect();
                let shape: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
                Col::Float(place_lanes(
                    &tex.layout,
                    &shape,
                    &values,
                    tex.width as i64,
                    tex.height as i64,
                )?)
            }
            None => to_memory(t, elem)?,
        });
    }
    for (k, (&p, &r)) in params[args.len()..].iter().zip(results).enumerate() {
        let n = match texture(args.len() + k) {
            Some(tex) => {
                widths.insert(p, tex.width as i64);
                tex.width as i64 * tex.height as i64 * LANES
            }
            None => m.value_type(r).as_tensor().map_or(0, |t| t.num_elements()),
        };
        memory.push(Col::zeros_like(elem_of(m.value_type(p)), n as usize));
    }
    let wg = func.workgroup_size();
    let grid = func.grid();
    let lanes: i64 = wg.iter().product();
    if lanes.saturating_mul(grid.iter().product()) > MAX_INVOCATIONS {
        return Err(format!(
            "@{} launches more invocations than the interpreter runs ({MAX_INVOCATIONS})",
            func.sym_name()
        ));
    }
    let mut run = Run {
        m,
        params: params.clone(),
        memory,
        wg: [wg[0], wg[1], wg[2]],
        group: [0; 3],
        lanes: lanes as usize,
        values: HashMap::new(),
        allocs: Vec::new(),
        widths,
    };
    for z in 0..grid[2] {
        for y in 0..grid[1] {
            for x in 0..grid[0] {
                run.group = [x, y, z];
                run.values.clear();
                run.allocs.clear();
                let all = vec![true; run.lanes];
                run.block(entry, &all)
                    .map_err(|e| format!("@{} (workgroup {x},{y},{z}): {e}", func.sym_name()))?;
            }
        }
    }
    let mut out = Vec::with_capacity(results.len());
    for (i, &r) in results.iter().enumerate() {
        let ty = m
            .value_type(r)
            .as_tensor()
            .ok_or("launch results are tensors")?;
        let held = &run.memory[args.len() + i];
        let col = match texture(args.len() + i) {
            Some(tex) => Col::Float(read_lanes(
                &tex.layout,
                &ty.shape,
                held.floats()?,
                tex.width as i64,
            )?),
            None => held.clone(),
        };
        out.push(from_memory(&col, ty)?);
    }
    Ok(out)
}

/// A host tensor as the kernel argument of element type `elem` holds it.
fn to_memory(t: &Tensor, elem: ElemType) -> R<Col> {
    Ok(match (t.data(), elem) {
        (TensorData::Float(a), e) if e.is_float() => {
            Col::Float(a.iter().map(|&x| round(x, e)).collect())
        }
        (TensorData::Int(a), _) => Col::Int(a.iter().map(|&x| wrap(x)).collect()),
        (TensorData::Bool(a), _) => Col::Int(a.iter().map(|&b| b as i64).collect()),
        (TensorData::Float(_), e) => return Err(format!("a float tensor bound to {e} memory")),
    })
}

/// What a kernel wrote, as a host tensor of type `ty`.
fn from_memory(c: &Col, ty: &TensorType) -> R<Tensor> {
    let shape: Vec<usize> = ty.shape.iter().map(|&d| d as usize).collect();
    let shaped = |n: usize| -> R<IxDyn> {
        if n == ty.num_elements() as usize {
            Ok(IxDyn(&shape))
        } else {
            Err(format!("{n} elements written for {ty}"))
        }
    };
    let err = |e: ndarray::ShapeError| e.to_string();
    Ok(match (c, ty.elem) {
        (Col::Float(v), e) if e.is_float() => Tensor::float(
            e,
            ArrayD::from_shape_vec(shaped(v.len())?, v.clone()).map_err(err)?,
        ),
        (Col::Int(v), ElemType::I1) => Tensor::bool(
            ArrayD::from_shape_vec(shaped(v.len())?, v.iter().map(|&x| x != 0).collect())
                .map_err(err)?,
        ),
        (Col::Int(v), e) => Tensor::int(
            e,
            ArrayD::from_shape_vec(shaped(v.len())?, v.clone()).map_err(err)?,
        ),
        _ => return Err(format!("kernel memory does not hold {ty}")),
    })
}

struct Run<'a> {
    m: &'a Module,
    params: Vec<ValueId>,
    /// The launch's arguments, by position.
    memory: Vec<Col>,
    wg: [i64; 3],
    group: [i64; 3],
    lanes: usize,
    values: HashMap<ValueId, Col>,
    /// Workgroup memory of the current workgroup.
    allocs: Vec<(ValueId, Col)>,
    /// The width in texels of each texture argument.
    widths: HashMap<ValueId, i64>,
}

impl Run<'_> {
    fn col(&self, v: ValueId) -> R<&Col> {
        self.values
            .get(&v)
            .ok_or_else(|| format!("value #{} is not computed", v.index()))
    }

    fn memory_mut(&mut self, v: ValueId) -> R<&mut Col> {
        if let Some(i) = self.params.iter().position(|&p| p == v) {
            return Ok(&mut self.memory[i]);
        }
        self.allocs
            .iter_mut()
            .find(|(a, _)| *a == v)
            .map(|(_, c)| c)
            .ok_or_else(|| "memory that is neither an argument nor kernel.alloc".to_string())
    }

    fn memory(&self, v: ValueId) -> R<&Col> {
        if let Some(i) = self.params.iter().position(|&p| p == v) {
            return Ok(&self.memory[i]);
        }
        self.allocs
            .iter()
            .find(|(a, _)| *a == v)
            .map(|(_, c)| c)
            .ok_or_else(|| "memory that is neither an argument nor kernel.alloc".to_string())
    }

    /// The id of every lane along `axis`.
    fn ids(&self, kind: IdKind, axis: usize) -> Vec<i64> {
        let [wx, wy, _] = self.wg;
        (0..self.lanes as i64)
            .map(|lane| {
                let local = [lane % wx, lane / wx % wy, lane / (wx * wy)][axis];
                match kind {
                    IdKind::Local => local,
                    IdKind::Workgroup => self.group[axis],
                    IdKind::Global => self.group[axis] * self.wg[axis] + local,
                }
            })
            .collect()
    }

    /// `e` per lane, its dimensions being the index operands `dims`.
    fn affine(&self, e: &AffineExpr, dims: &[ValueId]) -> R<Vec<i64>> {
        use AffineExpr as E;
        let pair = |a: &E, b: &E| -> R<(Vec<i64>, Vec<i64>)> {
            Ok((self.affine(a, dims)?, self.affine(b, dims)?))
        };
        Ok(match e {
            E::Dim(d) => {
                let v = dims
                    .get(*d as usize)
                    .ok_or("a map dimension without operand")?;
                self.col(*v)?.ints()?.to_vec()
            }
            E::Sym(_) => return Err("kernel maps have no symbols".into()),
            E::Const(c) => vec![*c; self.lanes],
            E::Add(a, b) => {
                let (a, b) = pair(a, b)?;
                a.iter().zip(&b).map(|(x, y)| x.wrapping_add(*y)).collect()
            }
            E::Mul(a, b) => {
                let (a, b) = pair(a, b)?;
                a.iter().zip(&b).map(|(x, y)| x.wrapping_mul(*y)).collect()
            }
            E::FloorDiv(a, b) | E::CeilDiv(a, b) | E::Mod(a, b) => {
                let (a, b) = pair(a, b)?;
                let mut out = Vec::with_capacity(a.len());
                for (&x, &y) in a.iter().zip(&b) {
                    if y == 0 {
                        return Err("an address divides by zero".into());
                    }
                    out.push(match e {
                        E::FloorDiv(..) => floor_div(x, y),
                        E::CeilDiv(..) => -floor_div(x.wrapping_neg(), y),
                        _ => x.wrapping_sub(y.wrapping_mul(floor_div(x, y))),
                    });
                }
                out
            }
        })
    }

    /// The width of texture argument `v`.
    fn width(&self, v: ValueId) -> R<i64> {
        self.widths
            .get(&v)
            .copied()
            .ok_or_else(|| "a texture access to an argument that is not a texture".to_string())
    }

    /// The address of a load or store: its map's one result per lane.
    fn address(&self, op: OpId, first_index: usize, result: usize) -> R<Vec<i64>> {
        let o = self.m.op(op);
        let Some(Attribute::AffineMap(map)) = o.attr("map") else {
            return Err(format!("'{}' has no map", o.name));
        };
        let e = map
            .results
            .get(result)
            .ok_or("a map with too few results")?;
        self.affine(e, &o.operands[first_index.min(o.operands.len())..])
    }

    fn block(&mut self, block: BlockId, mask: &[bool]) -> R<()> {
        for &op in &self.m.blocks[block].ops {
            self.op(op, mask)?;
        }
        Ok(())
    }

    fn op(&mut self, op: OpId, mask: &[bool]) -> R<()> {
        let m = self.m;
        let o = m.op(op);
        let kind = KernelOp::of(m, op).ok_or_else(|| format!("'{}' in a kernel", o.name))?;
        let result_elem = o.results.first().map(|&r| elem_of(m.value_type(r)));
        let arg = |i: usize| self.col(o.operands[i]);
        let value = match kind {
            KernelOp::Id => {
                let id = ops::Id::new(m, op).ok_or("malformed kernel.id")?;
                Col::Int(self.ids(id.kind(), id.axis().clamp(0, 2) as usize))
            }
            KernelOp::Constant => {
                let lanes = self.lanes;
                match o.attr("value") {
                    Some(Attribute::Float(x, _)) => {
                        Col::Float(vec![round(*x, result_elem.unwrap_or(ElemType::F32)); lanes])
                    }
                    Some(Attribute::Int(x, _)) => Col::Int(vec![wrap(*x); lanes]),
                    Some(Attribute::Bool(b)) => Col::Bool(vec![*b; lanes]),
                    _ => return Err("a kernel.constant without a value".into()),
                }
            }
            KernelOp::Apply => Col::Int(self.address(op, 0, 0)?.into_iter().map(wrap).collect()),
            KernelOp::TextureLoad => {
                let width = self.width(o.operands[0])?;
                let [x, y, lane] = [0, 1, 2].map(|k| self.address(op, 1, k));
                let addr: Vec<i64> = (x?.iter().zip(y?.iter()).zip(lane?.iter()))
                    .map(|((x, y), l)| texel_lane(*x, *y, *l, width))
                    .collect();
                gather(self.memory(o.operands[0])?, &addr)?.into_loaded(result_elem)
            }
            KernelOp::TextureStore => {
                let texture = o.operands[4];
                let width = self.width(texture)?;
                let (x, y) = (self.address(op, 5, 0)?, self.address(op, 5, 1)?);
                let values: Vec<Col> = (0..4).map(|k| arg(k).cloned()).collect::<R<_>>()?;
                let memory = self.memory_mut(texture)?;
                for lane in (0..mask.len()).filter(|&l| mask[l]) {
                    for (k, v) in values.iter().enumerate() {
                        let a = texel_lane(x[lane], y[lane], k as i64, width);
                        let i = usize::try_from(a)
                            .map_err(|_| format!("a texel store at ({}, {})", x[lane], y[lane]))?;
                        memory.set(i, v.get(lane).ok_or("a short value column")?)?;
                    }
                }
                return Ok(());
            }
            KernelOp::Load => {
                let addr = self.address(op, 1, 0)?;
                let memory = self.memory(o.operands[0])?;
                gather(memory, &addr)?.into_loaded(result_elem)
            }
            KernelOp::Load4 => {
                let addr = self.address(op, 1, 0)?;
                let memory = self.memory(o.operands[0])?;
                let lanes: Vec<Col> = (0..o.results.len())
                    .map(|k| {
                        let shifted: Vec<i64> = addr.iter().map(|a| a + k as i64).collect();
                        gather(memory, &shifted)
                    })
                    .collect::<R<_>>()?;
                for (&r, c) in o.results.iter().zip(lanes) {
                    self.values.insert(r, c.into_loaded(result_elem));
                }
                return Ok(());
            }
            KernelOp::Store => {
                let addr = self.address(op, 2, 0)?;
                let value = arg(0)?.clone();
                let memory = self.memory_mut(o.operands[1])?;
                for (lane, &a) in addr.iter().enumerate() {
                    if !mask[lane] {
                        continue;
                    }
                    let x = value.get(lane).ok_or("a short value column")?;
                    let i = usize::try_from(a).map_err(|_| format!("a store to element {a}"))?;
                    memory.set(i, x)?;
                }
                return Ok(());
            }
            KernelOp::Store4 => {
                let addr = self.address(op, 5, 0)?;
                let values: Vec<Col> = (0..4).map(|k| arg(k).cloned()).collect::<R<_>>()?;
                let memory = self.memory_mut(o.operands[4])?;
                for (lane, &a) in addr.iter().enumerate() {
                    if !mask[lane] {
                        continue;
                    }
                    for (k, value) in values.iter().enumerate() {
                        let x = value.get(lane).ok_or("a short value column")?;
                        let at = a + k as i64;
                        let i =
                            usize::try_from(at).map_err(|_| format!("a store to element {at}"))?;
                        memory.set(i, x)?;
                    }
                }
                return Ok(());
            }
            // A subgroup's invocations take a matrix op together: one
            // that only some reach is undefined behaviour on a GPU.
            KernelOp::MatrixZero
            | KernelOp::MatrixLoad
            | KernelOp::MatrixMultiplyAdd
            | KernelOp::MatrixStore
                if mask.iter().any(|&active| !active) =>
            {
                return Err(format!(
                    "'{}' inside a kernel.if that only some invocations take",
                    o.name
                ));
            }
            KernelOp::MatrixZero => {
                let t = MatrixType::of(m.value_type(o.results[0]))?;
                Col::Matrix(vec![vec![0.0; (t.rows * t.cols) as usize]; self.lanes])
            }
            KernelOp::MatrixLoad => {
                let t = MatrixType::of(m.value_type(o.results[0]))?;
                let stride = ops::MatrixLoad::new(m, op)
                    .ok_or("malformed kernel.matrix_load")?
                    .stride();
                let addr = self.address(op, 1, 0)?;
                let memory = self.memory(o.operands[0])?;
                let mut lanes = Vec::with_capacity(self.lanes);
                for &base in &addr {
                    let at: Vec<i64> = (0..t.rows)
                        .flat_map(|r| (0..t.cols).map(move |c| base + r * stride + c))
                        .collect();
                    let loaded = gather(memory, &at)?;
                    lanes.push(loaded.floats()?.iter().map(|&x| round(x, t.elem)).collect());
                }
                Col::Matrix(lanes)
            }
            KernelOp::MatrixMultiplyAdd => {
                let [a, b, c] = [0, 1, 2].map(|i| MatrixType::of(m.value_type(o.operands[i])));
                let (a, b, c) = (a?, b?, c?);
                let (rows, inner, cols) = (a.rows as usize, a.cols as usize, b.cols as usize);
                let (xs, ys, zs) = (
                    arg(0)?.matrices()?,
                    arg(1)?.matrices()?,
                    arg(2)?.matrices()?,
                );
                let mut lanes = Vec::with_capacity(self.lanes);
                for ((x, y), z) in xs.iter().zip(ys).zip(zs) {
                    let mut out = z.clone();
                    for r in 0..rows {
                        for col in 0..cols {
                            let dot: f64 = (0..inner)
                                .map(|k| x[r * inner + k] * y[k * cols + col])
                                .sum();
                            out[r * cols + col] = round(out[r * cols + col] + dot, c.elem);
                        }
                    }
                    lanes.push(out);
                }
                Col::Matrix(lanes)
            }
            KernelOp::MatrixStore => {
                let t = MatrixType::of(m.value_type(o.operands[0]))?;
                let stride = ops::MatrixStore::new(m, op)
                    .ok_or("malformed kernel.matrix_store")?
                    .stride();
                let addr = self.address(op, 2, 0)?;
                let values = arg(0)?.matrices()?.to_vec();
                let memory = self.memory_mut(o.operands[1])?;
                for lane in (0..mask.len()).filter(|&l| mask[l]) {
                    for r in 0..t.rows {
                        for c in 0..t.cols {
                            let a = addr[lane] + r * stride + c;
                            let i = usize::try_from(a)
                                .map_err(|_| format!("a matrix store to element {a}"))?;
                            let x = values[lane][(r * t.cols + c) as usize];
                            memory.set(i, Scalar::Float(x))?;
                        }
                    }
                }
                return Ok(());
            }
            KernelOp::Alloc => {
                let t = m
                    .value_type(o.results[0])
                    .as_tensor()
                    .ok_or("alloc of a tensor")?;
                // Workgroup memory starts undefined on OpenCL and on any
                // Vulkan driver that does not zero it: NaN here, so a
                // template that reads a word it never wrote gives NaN
                // instead of passing on the zero a GPU may not give.
                let n = t.num_elements() as usize;
                let c = if t.elem.is_float() {
                    Col::Float(vec![f64::NAN; n])
                } else {
                    Col::zeros_like(t.elem, n)
                };
                self.allocs.push((o.results[0], c));
                return Ok(());
            }
            KernelOp::Unary => {
                let f = ops::Unary::new(m, op)
                    .ok_or("malformed kernel.unary")?
                    .fn_();
                unary(f, arg(0)?, result_elem.unwrap_or(ElemType::F32))?
            }
            KernelOp::Binary => {
                let f = ops::Binary::new(m, op)
                    .ok_or("malformed kernel.binary")?
                    .fn_();
                binary(f, arg(0)?, arg(1)?, result_elem.unwrap_or(ElemType::F32))?
            }
            KernelOp::Cmp => {
                let p = ops::Cmp::new(m, op).ok_or("malformed kernel.cmp")?.pred();
                compare(p, arg(0)?, arg(1)?)?
            }
            KernelOp::Select => {
                let c = arg(0)?.bools()?;
                select(c, arg(1)?, arg(2)?)?
            }
            KernelOp::Cast => cast(arg(0)?, result_elem.unwrap_or(ElemType::I32))?,
            KernelOp::For => return self.for_loop(op, mask),
            KernelOp::If => {
                let cond = arg(0)?.bools()?;
                let inner: Vec<bool> = mask.iter().zip(cond).map(|(&a, &b)| a && b).collect();
                if inner.iter().any(|&x| x) {
                    let body = m.entry_block(op).ok_or("a kernel.if without a body")?;
                    self.block(body, &inner)?;
                }
                return Ok(());
            }
            // A barrier that only some invocations reach is undefined
            // behaviour on a GPU (most hang).
            KernelOp::Barrier if mask.iter().any(|&active| !active) => {
                return Err(
                    "a barrier inside a kernel.if that only some invocations take".to_string(),
                );
            }
            KernelOp::Barrier | KernelOp::Yield | KernelOp::Return => return Ok(()),
            KernelOp::Func | KernelOp::Launch => {
                return Err(format!("'{kind}' cannot appear in a kernel"));
            }
        };
        let r = *o.results.first().ok_or("an op without a result")?;
        self.values.insert(r, value);
        Ok(())
    }

    fn for_loop(&mut self, op: OpId, mask: &[bool]) -> R<()> {
        let m = self.m;
        let l = ops::For::new(m, op).ok_or("malformed kernel.for")?;
        let body = m.entry_block(op).ok_or("a kernel.for without a body")?;
        let args = m.blocks[body].args.clone();
        let mut carried: Vec<Col> = l
            .inits()
            .iter()
            .map(|&v| self.col(v).cloned())
            .collect::<R<_>>()?;
        let yield_op = *m.blocks[body].ops.last().ok_or("an empty loop body")?;
        let mut i = l.lower();
        while i < l.upper() {
            self.values
                .insert(args[0], Col::Int(vec![wrap(i); self.lanes]));
            for (&a, c) in args[1..].iter().zip(carried.drain(..)) {
                self.values.insert(a, c);
            }
            self.block(body, mask)?;
            carried = m
                .op(yield_op)
                .operands
                .iter()
                .map(|&v| self.col(v).cloned())
                .collect::<R<_>>()?;
            i += l.step().max(1);
        }
        for (&r, c) in m.op(op).results.iter().zip(carried) {
            self.values.insert(r, c);
        }
        Ok(())
    }
}

/// Where lane `lane` of texel `(x, y)` is in a texture's lanes; outside
/// the texture is outside the memory (a read gives 0, a write fails).
fn texel_lane(x: i64, y: i64, lane: i64, width: i64) -> i64 {
    if (0..width).contains(&x) && (0..LANES).contains(&lane) {
        (y * width + x) * LANES + lane
    } else {
        -1
    }
}

fn floor_div(x: i64, y: i64) -> i64 {
    let q = x.wrapping_div(y);
    if x % y != 0 && (x < 0) != (y < 0) {
        q - 1
    } else {
        q
    }
}

/// `memory[addr]` per lane; 0 past either end (robust buffer access).
fn gather(memory: &Col, addr: &[i64]) -> R<Col> {
    let at = |a: i64| usize::try_from(a).ok();
    Ok(match memory {
        Col::Float(v) => Col::Float(
            addr.iter()
                .map(|&a| at(a).and_then(|i| v.get(i)).copied().unwrap_or(0.0))
                .collect(),
        ),
        Col::Int(v) => Col::Int(
            addr.iter()
                .map(|&a| at(a).and_then(|i| v.get(i)).copied().unwrap_or(0))
                .collect(),
        ),
        Col::Bool(v) => Col::Bool(
            addr.iter()
                .map(|&a| at(a).and_then(|i| v.get(i)).copied().unwrap_or(false))
                .collect(),
        ),
        Col::Matrix(_) => return Err("a load from a matrix, which is not memory".into()),
    })
}

fn unary(f: UnaryFn, x: &Col, elem: ElemType) -> R<Col> {
    if let Col::Bool(b) = x {
        return match f {
            UnaryFn::Not => Ok(Col::Bool(b.iter().map(|x| !x).collect())),
            _ => Err(format!("{} of a boolean", f.name())),
        };
    }
    if let Col::Int(v) = x {
        return Ok(Col::Int(match f {
            UnaryFn::Neg => v.iter().map(|x| wrap(x.wrapping_neg())).collect(),
            UnaryFn::Abs => v.iter().map(|x| wrap(x.wrapping_abs())).collect(),
            UnaryFn::Not => v.iter().map(|&x| !x).collect(),
            UnaryFn::Sign => v.iter().map(|&x| x.signum()).collect(),
            _ => return Err(format!("{} of an integer", f.name())),
        }));
    }
    let g: fn(f64) -> f64 = match f {
        UnaryFn::Neg => |x| -x,
        UnaryFn::Abs => f64::abs,
        UnaryFn::Exp => f64::exp,
        UnaryFn::Log => f64::ln,
        UnaryFn::Sqrt => f64::sqrt,
        UnaryFn::Rsqrt => |x| 1.0 / x.sqrt(),
        UnaryFn::Tanh => f64::tanh,
        UnaryFn::Erf => erf,
        UnaryFn::Sin => f64::sin,
        UnaryFn::Cos => f64::cos,
        UnaryFn::Tan => f64::tan,
        UnaryFn::Asin => f64::asin,
        UnaryFn::Acos => f64::acos,
        UnaryFn::Atan => f64::atan,
        UnaryFn::Sinh => f64::sinh,
        UnaryFn::Cosh => f64::cosh,
        UnaryFn::Asinh => f64::asinh,
        UnaryFn::Acosh => f64::acosh,
        UnaryFn::Atanh => f64::atanh,
        UnaryFn::Sign => |x| {
            if x == 0.0 || x.is_nan() {
                x
            } else {
                x.signum()
            }
        },
        UnaryFn::Floor => f64::floor,
        UnaryFn::Ceil => f64::ceil,
        // WGSL's round() rounds halves to even.
        UnaryFn::Round => f64::round_ties_even,
        UnaryFn::Not => return Err("not of a float".into()),
    };
    Ok(Col::Float(
        x.floats()?.iter().map(|&x| round(g(x), elem)).collect(),
    ))
}

fn binary(f: BinaryFn, a: &Col, b: &Col, elem: ElemType) -> R<Col> {
    match (a, b) {
        (Col::Float(a), Col::Float(b)) => {
            let g: fn(f64, f64) -> f64 = match f {
                BinaryFn::Add => |x, y| x + y,
                BinaryFn::Sub => |x, y| x - y,
                BinaryFn::Mul => |x, y| x * y,
                BinaryFn::Div => |x, y| x / y,
                BinaryFn::Max => f64::max,
                BinaryFn::Min => f64::min,
                BinaryFn::Pow => f64::powf,
                BinaryFn::And | BinaryFn::Or | BinaryFn::Xor | BinaryFn::Shl | BinaryFn::Shr => {
                    return Err(format!("{} of floats", f.name()));
                }
            };
            Ok(Col::Float(
                a.iter()
                    .zip(b)
                    .map(|(&x, &y)| round(g(x, y), elem))
                    .collect(),
            ))
        }
        (Col::Int(a), Col::Int(b)) => {
            // WGSL: x / 0 is x, and i32::MIN / -1 is i32::MIN.
            let g: fn(i64, i64) -> i64 = match f {
                BinaryFn::Add => |x, y| x.wrapping_add(y),
                BinaryFn::Sub => |x, y| x.wrapping_sub(y),
                BinaryFn::Mul => |x, y| x.wrapping_mul(y),
                BinaryFn::Div => |x, y| if y == 0 { x } else { x.wrapping_div(y) },
                BinaryFn::Max => i64::max,
                BinaryFn::Min => i64::min,
                BinaryFn::Pow => |x, y| {
                    if y < 0 {
                        0
                    } else {
                        (0..y.min(64)).fold(1i64, |acc, _| wrap(acc.wrapping_mul(x)))
                    }
                },
                BinaryFn::And => |x, y| x & y,
                BinaryFn::Or => |x, y| x | y,
                BinaryFn::Xor => |x, y| x ^ y,
                // WGSL and OpenCL C take the shift count modulo the width.
                BinaryFn::Shl => |x, y| x << (y & 31),
                BinaryFn::Shr => |x, y| wrap(x) >> (y & 31),
            };
            Ok(Col::Int(
                a.iter().zip(b).map(|(&x, &y)| wrap(g(x, y))).collect(),
            ))
        }
        (Col::Bool(a), Col::Bool(b)) => {
            let g: fn(bool, bool) -> bool = match f {
                BinaryFn::And | BinaryFn::Min | BinaryFn::Mul => |x, y| x && y,
                BinaryFn::Or | BinaryFn::Max | BinaryFn::Add => |x, y| x || y,
                BinaryFn::Xor => |x, y| x != y,
                _ => return Err(format!("{} of booleans", f.name())),
            };
            Ok(Col::Bool(a.iter().zip(b).map(|(&x, &y)| g(x, y)).collect()))
        }
        _ => Err(format!("{} of operands of two types", f.name())),
    }
}

fn compare(p: CmpPred, a: &Col, b: &Col) -> R<Col> {
    fn by<T: PartialOrd>(p: CmpPred, a: &[T], b: &[T]) -> Vec<bool> {
        a.iter()
            .zip(b)
            .map(|(x, y)| match p {
                CmpPred::Lt => x < y,
                CmpPred::Le => x <= y,
                CmpPred::Gt => x > y,
                CmpPred::Ge => x >= y,
                CmpPred::Eq => x == y,
                CmpPred::Ne => x != y,
            })
            .collect()
    }
    Ok(Col::Bool(match (a, b) {
        (Col::Float(a), Col::Float(b)) => by(p, a, b),
        (Col::Int(a), Col::Int(b)) => by(p, a, b),
        (Col::Bool(a), Col::Bool(b)) => by(p, a, b),
        _ => return Err("a comparison of two types".into()),
    }))
}

fn select(c: &[bool], a: &Col, b: &Col) -> R<Col> {
    fn pick<T: Copy>(c: &[bool], a: &[T], b: &[T]) -> Vec<T> {
        c.iter()
            .zip(a.iter().zip(b))
            .map(|(&c, (&x, &y))| if c { x } else { y })
            .collect()
    }
    Ok(match (a, b) {
        (Col::Float(a), Col::Float(b)) => Col::Float(pick(c, a, b)),
        (Col::Int(a), Col::Int(b)) => Col::Int(pick(c, a, b)),
        (Col::Bool(a), Col::Bool(b)) => Col::Bool(pick(c, a, b)),
        _ => return Err("a select of two types".into()),
    })
}

fn cast(x: &Col, to: ElemType) -> R<Col> {
    Ok(match (x, to) {
        (Col::Float(v), e) if e.is_float() => Col::Float(v.iter().map(|&x| round(x, e)).collect()),
        (Col::Float(v), ElemType::I1) => Col::Bool(v.iter().map(|&x| x != 0.0).collect()),
        // Float to integer truncates toward zero (saturating, as WGSL's i32()).
        (Col::Float(v), _) => Col::Int(
            v.iter()
                .map(|&x| x.trunc().clamp(i32::MIN as f64, i32::MAX as f64) as i64)
                .collect(),
        ),
        (Col::Int(v), e) if e.is_float() => {
            Col::Float(v.iter().map(|&x| round(x as f64, e)).collect())
        }
        (Col::Int(v), ElemType::I1) => Col::Bool(v.iter().map(|&x| x != 0).collect()),
        (Col::Int(v), _) => Col::Int(v.clone()),
        (Col::Bool(v), e) if e.is_float() => {
            Col::Float(v.iter().map(|&b| b as i64 as f64).collect())
        }
        (Col::Bool(v), ElemType::I1) => Col::Bool(v.clone()),
        (Col::Bool(v), _) => Col::Int(v.iter().map(|&b| b as i64).collect()),
        (Col::Matrix(_), _) => return Err("a cast of a matrix".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_division_follows_wgsl() {
        let a = Col::Int(vec![7, -7, 5, i32::MIN as i64]);
        let b = Col::Int(vec![2, 2, 0, -1]);
        let Col::Int(q) = binary(BinaryFn::Div, &a, &b, ElemType::I32).unwrap() else {
            panic!("an integer column")
        };
        assert_eq!(q, vec![3, -3, 5, i32::MIN as i64]);
    }

    #[test]
    fn reads_past_the_end_give_zero_and_floats_round_to_f16() {
        let mem = Col::Float(vec![1.0, 2.0]);
        let Ok(Col::Float(v)) = gather(&mem, &[1, 2, -1]) else {
            panic!("a float column")
        };
        assert_eq!(v, vec![2.0, 0.0, 0.0]);
        let Col::Float(s) = binary(
            BinaryFn::Add,
            &Col::Float(vec![1.0]),
            &Col::Float(vec![1e-4]),
            ElemType::F16,
        )
        .unwrap() else {
            panic!("a float column")
        };
        assert_eq!(s, vec![1.0]);
    }
}
