//! Operators that move or make data, imported as compositions of graph
//! ops: EyeLike as a constant, ReverseSequence and Pad's `wrap` mode as
//! gathers of known indices, SpaceToDepth's CRD mode as a reshape and a
//! transpose, the old Upsample as the Resize it equals, Col2Im as the
//! transposed convolution it is, and TensorScatter as a gather of known
//! indices from the cache and the update.

use ircc_core::{Attribute, ElemType, Tensor};
use ircc_dialects::graph::GraphOp;
use ndarray::{ArrayD, IxDyn};

use crate::attrs::Attrs;
use crate::import::{Importer, Val, i64s};
use crate::ops::{attrs, ints_attr, rank_axis};
use crate::proto::{AttributeProto, NodeProto, attr_type};
use crate::tensor::elem_type;
use crate::{ImportError, Result};

impl Importer<'_> {
    /// EyeLike: ones on the k-th diagonal of a matrix of the input's shape,
    /// zeros elsewhere, of `dtype` (else the input's type): a constant,
    /// whatever the input holds.
    pub(crate) fn eye_like(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["dtype", "k"])?;
        let ty = self.type_of(&self.required(n, 0)?);
        if ty.rank() != 2 {
            return Err(ImportError::invalid(format!(
                "EyeLike takes a matrix, not {ty}"
            )));
        }
        let elem = match a.i("dtype", -1) {
            -1 => ty.elem,
            t => elem_type(t as i32)?,
        };
        let k = a.i("k", 0);
        let shape = IxDyn(&[ty.shape[0] as usize, ty.shape[1] as usize]);
        let on = |i: &IxDyn| i[1] as i64 - i[0] as i64 == k;
        let t = match elem {
            e if e.is_float() => Tensor::float(
                e,
                ArrayD::from_shape_fn(shape, |i| f64::from(u8::from(on(&i)))),
            ),
            ElemType::I1 => Tensor::bool(ArrayD::from_shape_fn(shape, |i| on(&i))),
            e => Tensor::int(e, ArrayD::from_shape_fn(shape, |i| i64::from(on(&i)))),
        };
        Ok(vec![Val::constant(t)])
    }

    /// ReverseSequence: each batch's first `sequence_lens` steps along the
    /// time axis in reverse order, the rest as they are; the lengths must
    /// be known (a constant, or an input bound to its value), so that the
    /// result is a gather of known indices.
    pub(crate) fn reverse_sequence(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["batch_axis", "time_axis"])?;
        let x = self.required(n, 0)?;
        let ty = self.type_of(&x);
        let rank = ty.rank();
        let batch = rank_axis(a.i("batch_axis", 1), rank)?;
        let time = rank_axis(a.i("time_axis", 0), rank)?;
        if rank < 2 || batch == time || batch > 1 || time > 1 {
            return Err(ImportError::invalid(
                "ReverseSequence's batch and time axes must be 0 and 1, in either order",
            ));
        }
        let lens = i64s(
            &self
                .constant_input(n, 1, "sequence_lens")?
                .ok_or_else(|| ImportError::invalid("missing sequence_lens"))?,
        );
        let (batches, steps) = (ty.shape[batch], ty.shape[time]);
        if lens.len() as i64 != batches || lens.iter().any(|&l| l < 0 || l > steps) {
            return Err(ImportError::invalid(format!(
                "sequence_lens {lens:?} must give each of the {batches} batches a length of at most {steps}"
            )));
        }
        let shape: Vec<usize> = ty.shape.iter().map(|&d| d as usize).collect();
        let index = ArrayD::from_shape_fn(IxDyn(&shape), |i| {
            let (t, len) = (i[time] as i64, lens[i[batch]]);
            if t < len { len - 1 - t } else { t }
        });
        let index = Val::constant(Tensor::int(ElemType::I64, index));
        let at = attrs(vec![("axis", Attribute::i64(time as i64))]);
        self.emit(GraphOp::GatherElements, vec![x, index], at, 1)
    }

    /// SpaceToDepth: each `blocksize`² block of the spatial axes moved into
    /// channels, the channel outermost (CRD, opset 25's mode) or the block
    /// offset outermost (DCR, the default and graph.space_to_depth's order).
    pub(crate) fn space_to_depth(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["blocksize", "mode"])?;
        let x = self.required(n, 0)?;
        let b = a.i("blocksize", 0);
        match a.s("mode", "DCR").as_str() {
            "DCR" => self.emit(
                GraphOp::SpaceToDepth,
                vec![x],
                attrs(vec![("blocksize", Attribute::i64(b))]),
                1,
            ),
            "CRD" => {
                let ty = self.type_of(&x);
                let &[batch, c, h, w] = ty.shape.as_slice() else {
                    return Err(ImportError::invalid(format!(
                        "SpaceToDepth takes an NCHW tensor, not {ty}"
                    )));
                };
                if b <= 0 || h % b != 0 || w % b != 0 {
                    return Err(ImportError::invalid(format!(
                        "blocksize {b} does not divide the spatial axes of {ty}"
                    )));
                }
                let split = self.reshape(x, vec![batch, c, h / b, b, w / b, b])?;
                let moved = self.transpose(split, vec![0, 1, 3, 5, 2, 4])?;
                Ok(vec![
                    self.reshape(moved, vec![batch, c * b * b, h / b, w / b])?,
                ])
            }
            m => Err(ImportError::invalid(format!(
                "SpaceToDepth's mode is DCR or CRD, not '{m}'"
            ))),
        }
    }

    /// Pad's `wrap` mode: along each axis, the output's element `i` is the
    /// input's `(i - begin) mod extent`: a gather of known indices per
    /// padded axis (a negative pad crops).
    pub(crate) fn wrap_pad(&mut self, x: Val, pads: &[i64]) -> Result<Vec<Val>> {
        let ty = self.type_of(&x);
        let rank = ty.rank();
        if pads.len() != 2 * rank {
            return Err(ImportError::invalid(format!(
                "{} pads for a tensor of rank {rank}",
                pads.len()
            )));
        }
        let mut y = x;
        for axis in 0..rank {
            let (begin, end, d) = (pads[axis], pads[rank + axis], ty.shape[axis]);
            if begin == 0 && end == 0 {
                continue;
            }
            let len = d + begin + end;
            if d == 0 || len < 0 {
                return Err(ImportError::invalid(format!(
                    "pads {begin} and {end} of an axis of {d} leave nothing to wrap"
                )));
            }
            let index: Vec<i64> = (0..len).map(|i| (i - begin).rem_euclid(d)).collect();
            let index = Val::constant(Tensor::int(
                ElemType::I64,
                ArrayD::from_shape_vec(IxDyn(&[len as usize]), index).expect("sized"),
            ));
            let at = attrs(vec![("axis", Attribute::i64(axis as i64))]);
            y = self.emit(GraphOp::Gather, vec![y, index], at, 1)?.remove(0);
        }
        Ok(vec![y])
    }

    /// Upsample (opsets 7 to 9): Resize with each output coordinate mapped
    /// back by dividing by the scale (`asymmetric`) and, for `nearest`,
    /// rounded down; the scales an attribute (opset 7) or input 1.
    pub(crate) fn upsample(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["mode", "scales"])?;
        if self.opset >= 10 {
            return Err(ImportError::invalid(
                "Upsample was removed in opset 10: use Resize",
            ));
        }
        let mode = a.s("mode", "nearest");
        let mut resize = NodeProto {
            input: n.input.iter().take(1).cloned().collect(),
            output: n.output.clone(),
            name: n.name.clone(),
            op_type: "Resize".into(),
            ..Default::default()
        };
        match a.floats("scales") {
            Some(scales) => {
                let name = format!(
                    "{}__upsample_scales",
                    n.output.first().cloned().unwrap_or_default()
                );
                let t = Tensor::float(
                    ElemType::F32,
                    ArrayD::from_shape_vec(
                        IxDyn(&[scales.len()]),
                        scales.iter().map(|&s| s as f64).collect(),
                    )
                    .expect("sized"),
                );
                self.bind_name(&name, Val::constant(t));
                resize.input.push(name);
            }
            None => resize.input.extend(n.input.get(1).cloned()),
        }
        let text = |name: &str, value: &str| AttributeProto {
            name: name.into(),
            r#type: attr_type::STRING,
            s: value.as_bytes().to_vec(),
            ..Default::default()
        };
        resize.attribute = vec![
            text("mode", &mode),
            text("coordinate_transformation_mode", "asymmetric"),
            text("nearest_mode", "floor"),
        ];
        let ra = Attrs::new(&resize);
        let out = self.resize(&resize, &ra)?;
        ra.check()?;
        Ok(out)
    }

    /// Col2Im: the columns [N, C * block, blocks] summed back into an
    /// image [N, C, ...image_shape]. A transposed convolution does just
    /// that: the blocks laid out as their grid, C groups of `block`
    /// channels, each group's weights one at the column's place in the
    /// block and zero elsewhere, with Col2Im's strides, dilations and pads.
    pub(crate) fn col2im(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["dilations", "pads", "strides"])?;
        let x = self.required(n, 0)?;
        let ty = self.type_of(&x);
        let known = |imp: &Self, i: usize, what: &str| -> Result<Vec<i64>> {
            imp.constant_input(n, i, what)?
                .map(|t| i64s(&t))
                .ok_or_else(|| ImportError::invalid(format!("missing {what}")))
        };
        let image = known(self, 1, "image_shape")?;
        let block = known(self, 2, "block_shape")?;
        let dims = image.len();
        let strides = a.ints("strides").unwrap_or_else(|| vec![1; dims]);
        let dilations = a.ints("dilations").unwrap_or_else(|| vec![1; dims]);
        let pads = a.ints("pads").unwrap_or_else(|| vec![0; 2 * dims]);
        let max = ircc_core::limits::MAX_DIM;
        let per_block = block
            .iter()
            .try_fold(1i64, |n, &b| n.checked_mul(b))
            .filter(|&n| n >= 1)
            .unwrap_or(0);
        let sizes_fit = block.len() == dims
            && per_block >= 1
            && image.iter().all(|&d| (1..=max).contains(&d))
            && strides.len() == dims
            && dilations.len() == dims
            && pads.len() == 2 * dims
            && block
                .iter()
                .chain(&strides)
                .chain(&dilations)
                .all(|&v| (1..=max).contains(&v))
            && pads.iter().all(|&p| (0..=max).contains(&p));
        if ty.rank() != 3 || dims == 0 || !sizes_fit || ty.shape[1] % per_block != 0 {
            return Err(ImportError::invalid(format!(
                "Col2Im of {ty} into an image {image:?} by blocks {block:?}: the input is [N, C * blocks, L] with one block, stride, dilation and two pads an image axis"
            )));
        }
        // The blocks along each image axis, which together must be L.
        let grid: Vec<i64> = (0..dims)
            .map(|i| {
                (image[i] + pads[i] + pads[dims + i] - dilations[i] * (block[i] - 1) - 1)
                    / strides[i]
                    + 1
            })
            .collect();
        let blocks = grid.iter().try_fold(1i64, |n, &g| n.checked_mul(g));
        if grid.iter().any(|&g| g < 1) || blocks != Some(ty.shape[2]) {
            return Err(ImportError::invalid(format!(
                "Col2Im: {} columns, where an image {image:?} takes {grid:?} blocks",
                ty.shape[2]
            )));
        }
        let channels = ty.shape[1] / per_block;
        let limit = ircc_core::limits::MAX_FOLDED_ELEMENTS;
        if ty.shape[1].saturating_mul(per_block) > limit {
            return Err(ImportError::invalid(format!(
                "Col2Im's weights would be {} x {per_block} elements, more than the {limit} a constant computed while importing may hold",
                ty.shape[1]
            )));
        }
        // Where the blocks do not reach the image's end, the rest is
        // padding the transposed convolution adds there.
        let short: Vec<i64> = (0..dims)
            .map(|i| {
                (image[i] + pads[i] + pads[dims + i] - dilations[i] * (block[i] - 1) - 1)
                    % strides[i]
            })
            .collect();
        let mut shape = vec![ty.shape[0], ty.shape[1]];
        shape.extend(&grid);
        let x = self.reshape(x, shape)?;
        let mut wshape = vec![ty.shape[1] as usize, 1];
        wshape.extend(block.iter().map(|&b| b as usize));
        let weight = ArrayD::from_shape_fn(IxDyn(&wshape), |i| {
            // Column c * per_block + k holds element k of the block, in
            // row-major order.
            let k = (0..dims).fold(0, |k, d| k * block[d] as usize + i[2 + d]);
            f64::from(u8::from(i[0] % per_block as usize == k))
        });
        let weight = Val::constant(Tensor::float(ty.elem, weight));
        let at = attrs(vec![
            ("strides", ints_attr(strides)),
            ("dilations", ints_attr(dilations)),
            ("group", Attribute::i64(channels)),
            ("pads", ints_attr(pads)),
            ("output_padding", ints_attr(short)),
        ]);
        self.emit(GraphOp::ConvTranspose, vec![x, weight], at, 1)
    }

    /// TensorScatter: `update` written into `past_cache` along `axis`,
    /// each batch's steps from its `write_indices` on (wrapping around in
    /// `circular` mode). With the indices known, each element of the result
    /// is one of the cache or the update: a gather of known indices from
    /// the two joined along the axis.
    pub(crate) fn tensor_scatter(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["axis", "mode"])?;
        let (cache, update) = (self.required(n, 0)?, self.required(n, 1)?);
        let (ct, ut) = (self.type_of(&cache), self.type_of(&update));
        let rank = ct.rank();
        let axis = rank_axis(a.i("axis", -2), rank)?;
        let mode = a.s("mode", "linear");
        let fits = rank >= 2
            && axis >= 1
            && ut.rank() == rank
            && ut.elem == ct.elem
            && (0..rank).all(|d| d == axis || ct.shape[d] == ut.shape[d])
            && ut.shape[axis] <= ct.shape[axis];
        if !fits || !matches!(mode.as_str(), "linear" | "circular") {
            return Err(ImportError::invalid(format!(
                "TensorScatter of {ut} into {ct} along axis {axis} in mode '{mode}': the update matches the cache but along the axis (after the batch), where it is no longer; modes are linear and circular"
            )));
        }
        let (batches, length, written) = (ct.shape[0], ct.shape[axis], ut.shape[axis]);
        let starts = match self.constant_input(n, 2, "write_indices")? {
            Some(t) => i64s(&t),
            None => vec![0; batches as usize],
        };
        let circular = mode == "circular";
        if starts.len() as i64 != batches
            || starts
                .iter()
                .any(|&w| w < 0 || w >= length.max(1) || (!circular && w + written > length))
        {
            return Err(ImportError::invalid(format!(
                "write_indices {starts:?}: each of the {batches} batches' {written} steps must start inside the cache's {length}{}",
                if circular { "" } else { " and end there" }
            )));
        }
        let limit = ircc_core::limits::MAX_FOLDED_ELEMENTS;
        if ct.num_elements() > limit {
            return Err(ImportError::unsupported(format!(
                "TensorScatter into {ct}: its index would take more than the {limit} elements a constant computed while importing may hold"
            )));
        }
        let shape: Vec<usize> = ct.shape.iter().map(|&d| d as usize).collect();
        let index = ArrayD::from_shape_fn(IxDyn(&shape), |i| {
            let (s, w) = (i[axis] as i64, starts[i[0]]);
            // Step j of the update lands at (w + j), mod the length if circular.
            let j = if circular {
                (s - w).rem_euclid(length)
            } else {
                s - w
            };
            if (0..written).contains(&j) {
                length + j
            } else {
                s
            }
        });
        let joined = self.concat(vec![cache, update], axis as i64)?;
        let index = Val::constant(Tensor::int(ElemType::I64, index));
        let at = attrs(vec![("axis", Attribute::i64(axis as i64))]);
        self.emit(GraphOp::GatherElements, vec![joined, index], at, 1)
    }
}
