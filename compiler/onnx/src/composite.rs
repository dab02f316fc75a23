//! Operators imported as compositions of graph ops: Trilu as a select
//! through a constant mask, LpNormalization through a reduction, Hardmax
//! and OneHot as comparisons with a constant range, LpPool through an
//! average pool, CenterCropPad as a slice and a pad, GatherND and
//! Compress as gathers; and the helpers the other compositions share.

use ircc_core::{Attribute, Attributes, ElemType, Tensor};
use ircc_dialects::graph::GraphOp;
use ndarray::{ArrayD, IxDyn};

use crate::attrs::Attrs;
use crate::import::{Importer, Val, i64s};
use crate::ops::{attrs, f32_attr, ints_attr, rank_axis, window_attrs};
use crate::proto::NodeProto;
use crate::{ImportError, Result};

impl Importer<'_> {
    /// Trilu: the elements on and above (upper) or below (lower) the
    /// k-th diagonal of the last two axes; the others are zero.
    pub(crate) fn trilu(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["upper"])?;
        let x = self.required(n, 0)?;
        let k = match self.constant_input(n, 1, "k")? {
            Some(t) => *i64s(&t)
                .first()
                .ok_or_else(|| ImportError::invalid("k must hold one value"))?,
            None => 0,
        };
        let ty = self.type_of(&x);
        if ty.rank() < 2 {
            return Err(ImportError::invalid("Trilu needs at least two axes"));
        }
        let (rows, cols) = (ty.shape[ty.rank() - 2], ty.shape[ty.rank() - 1]);
        let upper = a.i("upper", 1) != 0;
        let mask = ArrayD::from_shape_fn(IxDyn(&[rows as usize, cols as usize]), |i| {
            let d = i[1] as i64 - i[0] as i64;
            if upper { d >= k } else { d <= k }
        });
        let zero = self.scalar_like(&x, 0.0);
        let mask = Val::constant(Tensor::bool(mask));
        self.emit(GraphOp::Where, vec![mask, x, zero], Attributes::new(), 1)
    }

    /// LpNormalization: x over its L1 or L2 norm along `axis`.
    pub(crate) fn lp_normalization(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["axis", "p"])?;
        let x = self.required(n, 0)?;
        let at = attrs(vec![
            ("axes", ints_attr(vec![a.i("axis", -1)])),
            ("keepdims", Attribute::i64(1)),
        ]);
        let norm = match a.i("p", 2) {
            1 => {
                let m = self.un(GraphOp::Abs, x.clone())?;
                self.emit(GraphOp::ReduceSum, vec![m], at, 1)?.remove(0)
            }
            2 => {
                let sq = self.bin(GraphOp::Mul, x.clone(), x.clone())?;
                let s = self.emit(GraphOp::ReduceSum, vec![sq], at, 1)?.remove(0);
                self.un(GraphOp::Sqrt, s)?
            }
            p => {
                return Err(ImportError::invalid(format!(
                    "LpNormalization's p must be 1 or 2, not {p}"
                )));
            }
        };
        // A zero norm divides zeros: by one, so they stay zero.
        let zero = self.scalar_like(&norm, 0.0);
        let vanishes = self.bin(GraphOp::Equal, norm.clone(), zero)?;
        let unit = self.scalar_like(&norm, 1.0);
        let norm = self
            .emit(
                GraphOp::Where,
                vec![vanishes, unit, norm],
                Attributes::new(),
                1,
            )?
            .remove(0);
        Ok(vec![self.bin(GraphOp::Div, x, norm)?])
    }

    /// Hardmax (opset 13): one where the first maximum along `axis` is,
    /// zero elsewhere: arg_max compared with the axis' range.
    pub(crate) fn hardmax(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["axis"])?;
        if self.opset < 13 {
            return Err(ImportError::unsupported(
                "Hardmax before opset 13 (over the input flattened to 2-D) is not supported",
            ));
        }
        let x = self.required(n, 0)?;
        let ty = self.type_of(&x);
        let axis = rank_axis(a.i("axis", -1), ty.rank())?;
        let at = attrs(vec![
            ("axis", Attribute::i64(axis as i64)),
            ("keepdims", Attribute::i64(1)),
            ("select_last_index", Attribute::i64(0)),
        ]);
        let first = self.emit(GraphOp::ArgMax, vec![x], at, 1)?.remove(0);
        let range = range_along(ElemType::I64, ty.rank(), axis, ty.shape[axis]);
        let hit = self.bin(GraphOp::Equal, first, range)?;
        Ok(vec![self.cast(hit, ty.elem)?])
    }

    /// OneHot: `on` where the range along the new axis equals the index
    /// (a negative index counted from `depth`), `off` elsewhere.
    pub(crate) fn one_hot(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["axis"])?;
        let indices = self.required(n, 0)?;
        let depth = self
            .constant_input(n, 1, "depth")?
            .and_then(|t| t.to_f64().iter().next().copied())
            .ok_or_else(|| ImportError::invalid("OneHot's depth must be a known scalar"))?;
        if !(1.0..=f64::from(1 << 24)).contains(&depth) {
            return Err(ImportError::invalid(format!(
                "OneHot's depth {depth} is not between 1 and 2^24"
            )));
        }
        let depth = depth as i64;
        let values = self
            .constant_input(n, 2, "values")?
            .ok_or_else(|| ImportError::invalid("OneHot's values must be known"))?;
        let [off, on] = values.to_f64().iter().copied().collect::<Vec<_>>()[..] else {
            return Err(ImportError::invalid("OneHot's values must hold [off, on]"));
        };
        let it = self.type_of(&indices);
        let rank = it.rank();
        let axis = a.i("axis", -1);
        let axis = if axis < 0 {
            axis + rank as i64 + 1
        } else {
            axis
        };
        if !(0..=rank as i64).contains(&axis) {
            return Err(ImportError::invalid(format!(
                "OneHot's axis is out of range for indices of rank {rank}"
            )));
        }
        let axis = axis as usize;
        let zero = self.scalar_like(&indices, 0.0);
        let negative = self.bin(GraphOp::Less, indices.clone(), zero)?;
        let from_end = self.scalar_like(&indices, depth as f64);
        let from_end = self.bin(GraphOp::Add, indices.clone(), from_end)?;
        let wrapped = self
            .emit(
                GraphOp::Where,
                vec![negative, from_end, indices],
                Attributes::new(),
                1,
            )?
            .remove(0);
        let mut shape = it.shape.clone();
        shape.insert(axis, 1);
        let column = self.reshape(wrapped, shape)?;
        let range = range_along(it.elem, rank + 1, axis, depth);
        let hit = self.bin(GraphOp::Equal, column, range)?;
        let on = Val::constant(crate::fold::scalar(on, values.elem));
        let off = Val::constant(crate::fold::scalar(off, values.elem));
        self.emit(GraphOp::Where, vec![hit, on, off], Attributes::new(), 1)
    }

    /// `where(condition, x, y)`.
    pub(crate) fn select(&mut self, condition: Val, x: Val, y: Val) -> Result<Val> {
        let operands = vec![condition, x, y];
        Ok(self
            .emit(GraphOp::Where, operands, Attributes::new(), 1)?
            .remove(0))
    }

    /// `x` clipped to [lo, hi].
    pub(crate) fn clip(&mut self, x: Val, (lo, hi): (f64, f64)) -> Result<Val> {
        let at = attrs(vec![("min", f32_attr(lo)), ("max", f32_attr(hi))]);
        Ok(self.emit(GraphOp::Clip, vec![x], at, 1)?.remove(0))
    }

    pub(crate) fn transpose(&mut self, x: Val, perm: Vec<i64>) -> Result<Val> {
        let at = attrs(vec![("perm", ints_attr(perm))]);
        Ok(self.emit(GraphOp::Transpose, vec![x], at, 1)?.remove(0))
    }

    pub(crate) fn reshape(&mut self, x: Val, shape: Vec<i64>) -> Result<Val> {
        let at = attrs(vec![("shape", ints_attr(shape))]);
        Ok(self.emit(GraphOp::Reshape, vec![x], at, 1)?.remove(0))
    }

    /// `parts` joined along `axis`; a single part as it is.
    pub(crate) fn concat(&mut self, mut parts: Vec<Val>, axis: i64) -> Result<Val> {
        if parts.len() == 1 {
            return Ok(parts.remove(0));
        }
        let at = attrs(vec![("axis", Attribute::i64(axis))]);
        Ok(self.emit(GraphOp::Concat, parts, at, 1)?.remove(0))
    }

    /// Elements `start`, `start + step`, ... before `end` of the last axis.
    pub(crate) fn last_axis(&mut self, x: &Val, start: i64, end: i64, step: i64) -> Result<Val> {
        self.strided_slice(x, -1, start, end, step)
    }

    /// Elements `start` to `end` of `axis`.
    pub(crate) fn slice_axis(&mut self, x: &Val, axis: i64, start: i64, end: i64) -> Result<Val> {
        self.strided_slice(x, axis, start, end, 1)
    }

    fn strided_slice(
        &mut self,
        x: &Val,
        axis: i64,
        start: i64,
        end: i64,
        step: i64,
    ) -> Result<Val> {
        let at = attrs(vec![
            ("starts", ints_attr(vec![start])),
            ("ends", ints_attr(vec![end])),
            ("axes", ints_attr(vec![axis])),
            ("steps", ints_attr(vec![step])),
        ]);
        Ok(self.emit(GraphOp::Slice, vec![x.clone()], at, 1)?.remove(0))
    }

    /// CenterCropPad: each of `axes` cropped or zero-padded to its size in
    /// `shape`, centred (an odd difference puts the extra element at the
    /// end): a slice, then a pad.
    pub(crate) fn center_crop_pad(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["axes"])?;
        let x = self.required(n, 0)?;
        let sizes = self
            .constant_input(n, 1, "shape")?
            .map(|t| i64s(&t))
            .ok_or_else(|| ImportError::invalid("CenterCropPad's shape must be known"))?;
        let ty = self.type_of(&x);
        let rank = ty.rank();
        let axes = match a.ints("axes") {
            Some(axes) => axes
                .iter()
                .map(|&ax| rank_axis(ax, rank))
                .collect::<Result<Vec<_>>>()?,
            None => (0..rank).collect(),
        };
        if axes.len() != sizes.len() || sizes.iter().any(|&s| s < 0) {
            return Err(ImportError::invalid(
                "CenterCropPad's shape must give a size of at least 0 for each axis",
            ));
        }
        let (mut starts, mut ends, mut pads) = (Vec::new(), Vec::new(), vec![0; 2 * rank]);
        for (&axis, &size) in axes.iter().zip(&sizes) {
            let dim = ty.shape[axis];
            let (begin, end) = if size < dim {
                ((dim - size) / 2, (dim - size) / 2 + size)
            } else {
                (0, dim)
            };
            starts.push(begin);
            ends.push(end);
            if size > dim {
                pads[axis] = (size - dim) / 2;
                pads[rank + axis] = size - dim - (size - dim) / 2;
            }
        }
        let axes: Vec<i64> = axes.iter().map(|&ax| ax as i64).collect();
        let cropped = self
            .emit(
                GraphOp::Slice,
                vec![x],
                attrs(vec![
                    ("starts", ints_attr(starts)),
                    ("ends", ints_attr(ends)),
                    ("axes", ints_attr(axes)),
                ]),
                1,
            )?
            .remove(0);
        if pads.iter().all(|&p| p == 0) {
            return Ok(vec![cropped]);
        }
        self.emit(
            GraphOp::Pad,
            vec![cropped],
            attrs(vec![("pads", ints_attr(pads))]),
            1,
        )
    }

    /// LpPool: each window's p-norm, the p-th root of its average of
    /// |x|^p (padding counted, as zeros) times the window's size.
    pub(crate) fn lp_pool(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&[
            "auto_pad",
            "ceil_mode",
            "dilations",
            "kernel_shape",
            "p",
            "pads",
            "strides",
        ])?;
        let x = self.required(n, 0)?;
        let mut at = window_attrs(a, &self.type_of(&x).shape)?;
        // Padding holds zeros, which add nothing to a window's sum.
        at.insert("count_include_pad".into(), Attribute::i64(1));
        let size: i64 = a.ints("kernel_shape").unwrap_or_default().iter().product();
        let p = a.i("p", 2);
        let powered = match p {
            1 => self.un(GraphOp::Abs, x.clone())?,
            2 => self.bin(GraphOp::Mul, x.clone(), x.clone())?,
            p if p > 2 => {
                let m = self.un(GraphOp::Abs, x.clone())?;
                let e = self.scalar_like(&x, p as f64);
                self.bin(GraphOp::Pow, m, e)?
            }
            p => {
                return Err(ImportError::invalid(format!(
                    "LpPool's p must be at least 1, not {p}"
                )));
            }
        };
        let mean = self
            .emit(GraphOp::AveragePool, vec![powered], at, 1)?
            .remove(0);
        let count = self.scalar_like(&mean, size as f64);
        let sum = self.bin(GraphOp::Mul, mean, count)?;
        let norm = match p {
            1 => sum,
            2 => self.un(GraphOp::Sqrt, sum)?,
            p => {
                let root = self.scalar_like(&sum, 1.0 / p as f64);
                self.bin(GraphOp::Pow, sum, root)?
            }
        };
        Ok(vec![norm])
    }
    /// GatherND: each index tuple of the indices' last axis picks a slice
    /// of the data (within its batch, the first `batch_dims` axes): the
    /// tuple becomes one row number of the data flattened to [rows, slice],
    /// which `graph.gather` reads.
    pub(crate) fn gather_nd(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["batch_dims"])?;
        let (data, indices) = (self.required(n, 0)?, self.required(n, 1)?);
        let (dt, it) = (self.type_of(&data), self.type_of(&indices));
        let b = a.i("batch_dims", 0);
        let k = it.shape.last().copied().unwrap_or(0);
        let (r, q) = (dt.rank() as i64, it.rank() as i64);
        if !it.elem.is_int() || q < 1 || b < 0 || b >= q || k < 1 || b + k > r {
            return Err(ImportError::invalid(format!(
                "GatherND of {dt} by {it} with batch_dims {b}: the indices must be integers whose last axis (1 to the data's rank less batch_dims) holds whole index tuples"
            )));
        }
        let (b, k) = (b as usize, k as usize);
        if dt.shape[..b] != it.shape[..b] {
            return Err(ImportError::invalid(format!(
                "GatherND's data {dt} and indices {it} differ in their {b} batch axes"
            )));
        }
        let picked = &dt.shape[b..b + k];
        let rows: i64 = picked.iter().product();
        let slice: i64 = dt.shape[b + k..].iter().product();
        let batches: i64 = dt.shape[..b].iter().product();
        // A negative index counts from the end of its axis.
        let extents = Val::constant(Tensor::int(
            it.elem,
            ndarray::Array1::from(picked.to_vec()).into_dyn(),
        ));
        let zero = self.scalar_like(&indices, 0.0);
        let negative = self.bin(GraphOp::Less, indices.clone(), zero)?;
        let wrapped = self.bin(GraphOp::Add, indices.clone(), extents)?;
        let indices = self.select(negative, wrapped, indices)?;
        let strides: Vec<i64> = (0..k).map(|d| picked[d + 1..].iter().product()).collect();
        let strides = Val::constant(Tensor::int(
            it.elem,
            ndarray::Array1::from(strides).into_dyn(),
        ));
        let scaled = self.bin(GraphOp::Mul, indices, strides)?;
        let at = attrs(vec![
            ("axes", ints_attr(vec![-1])),
            ("keepdims", Attribute::i64(0)),
        ]);
        let mut row = self
            .emit(GraphOp::ReduceSum, vec![scaled], at, 1)?
            .remove(0);
        if b > 0 {
            // Each batch's rows follow the ones before.
            let mut shape = vec![1; q as usize - 1];
            shape[..b].copy_from_slice(
                &dt.shape[..b]
                    .iter()
                    .map(|&d| d as usize)
                    .collect::<Vec<_>>(),
            );
            let first = ArrayD::from_shape_fn(IxDyn(&shape), |i| {
                let mut batch = 0;
                for d in 0..b {
                    batch = batch * dt.shape[d] + i[d] as i64;
                }
                batch * rows
            });
            let first = Val::constant(Tensor::int(it.elem, first));
            row = self.bin(GraphOp::Add, row, first)?;
        }
        let flat = self.reshape(data, vec![batches * rows, slice])?;
        let at = attrs(vec![("axis", Attribute::i64(0))]);
        let picked = self
            .emit(GraphOp::Gather, vec![flat, row], at, 1)?
            .remove(0);
        let mut shape = it.shape[..q as usize - 1].to_vec();
        shape.extend_from_slice(&dt.shape[b + k..]);
        Ok(vec![self.reshape(picked, shape)?])
    }

    /// Compress: the slices along `axis` (of the input flattened, without
    /// one) whose condition holds, a gather by the known positions.
    pub(crate) fn compress(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["axis"])?;
        let x = self.required(n, 0)?;
        let condition = self
            .constant_input(n, 1, "condition")?
            .ok_or_else(|| ImportError::invalid("Compress needs its condition"))?;
        let ty = self.type_of(&x);
        let (x, axis) = match a.has("axis") {
            true => {
                let axis = rank_axis(a.i("axis", 0), ty.rank())?;
                (x, axis)
            }
            false => (self.reshape(x, vec![ty.num_elements()])?, 0),
        };
        let extent = self.type_of(&x).shape[axis];
        let keep: Vec<i64> = condition
            .to_i64()
            .iter()
            .enumerate()
            .filter(|&(_, &c)| c != 0)
            .map(|(i, _)| i as i64)
            .collect();
        if condition.shape().len() != 1 || condition.len() as i64 > extent {
            return Err(ImportError::invalid(format!(
                "Compress's condition must be a vector of at most {extent} values, not {:?}",
                condition.shape()
            )));
        }
        let positions = Val::constant(Tensor::int(
            ElemType::I64,
            ndarray::Array1::from(keep).into_dyn(),
        ));
        let at = attrs(vec![("axis", Attribute::i64(axis as i64))]);
        self.emit(GraphOp::Gather, vec![x, positions], at, 1)
    }
}

/// The range 0, 1, ..., `len` - 1 of `elem` along `axis` of a tensor of
/// `rank` axes, the others of size one: what a comparison broadcasts.
pub(crate) fn range_along(elem: ElemType, rank: usize, axis: usize, len: i64) -> Val {
    let mut shape = vec![1; rank];
    shape[axis] = len as usize;
    let range = ArrayD::from_shape_fn(IxDyn(&shape), |i| i[axis] as i64);
    Val::constant(if elem.is_float() {
        Tensor::float(elem, range.mapv(|v| v as f64))
    } else {
        Tensor::int(elem, range)
    })
}
