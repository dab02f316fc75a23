//! The depthwise convolution template (a 2-D convolution of one group
//! per channel, ConvNeXt's 7x7 and MobileNet's 3x3): a workgroup computes
//! a block of `rows` x `columns` outputs of `channels` channels, an
//! invocation each. The block's input window (its rows and columns, the
//! kernel's halo around them) is staged once in workgroup memory,
//! neighbouring invocations reading neighbouring words of the input
//! (along the channels where it lies channel-last, a transposed view of
//! an NHWC tensor, else along its rows); each output then reads its
//! window from there and the weights of its channel, which every
//! invocation of a subgroup shares.
//!
//! Per element, the same convolution read each of its kernel's taps from
//! the input itself, neighbouring invocations a channel's stride apart
//! where the input lies channel-last; and a fused producer of the input
//! was recomputed at every tap, where staging computes it once.

use ircc_core::{Module, OpId, Type, ValueId};
use ircc_dialects::graph;
use ircc_dialects::kernel::ops::{BinaryFn, CmpPred, FuncTemplate, IdKind};
use ircc_dialects::kernel::{DepthwiseSchedule, Target};

use super::lowering::{Input, Ix, KernelBuilder, guarded, shape_of, store_outputs, target};
use super::values::ACC;

type R<T> = Result<T, String>;

/// Rounds of staging a workgroup unrolls; more go in a loop, so that a
/// schedule of small blocks over a large kernel stays a small kernel.
const UNROLLED_ROUNDS: i64 = 4;

/// The convolution `anchor` with its input and weight shapes, where it is
/// a float 2-D convolution (the convolution templates' kind).
pub(super) fn float_conv2d(
    m: &Module,
    anchor: OpId,
) -> Option<(graph::ops::Conv<'_>, Vec<i64>, Vec<i64>)> {
    let conv = graph::ops::Conv::new(m, anchor)?;
    let o = m.op(anchor);
    let (x, w) = (shape_of(m, o.operands[0]), shape_of(m, o.operands[1]));
    let float = m
        .value_type(o.results[0])
        .as_tensor()
        .is_some_and(|t| t.elem.is_float());
    (float && x.len() == 4 && w.len() == 4).then_some((conv, x, w))
}

/// Whether `anchor` is a float 2-D convolution of one channel a group
/// (each output channel reads its own input channel).
pub(super) fn is_depthwise(m: &Module, anchor: OpId) -> bool {
    float_conv2d(m, anchor)
        .is_some_and(|(conv, x, w)| w[1] == 1 && conv.group() == x[1] && w[0] == x[1])
}

/// The window of input a block of `rows` x `columns` outputs reads along
/// one axis: `(outputs - 1) * stride + (kernel - 1) * dilation + 1`.
pub(super) fn span(outputs: i64, stride: i64, kernel: i64, dilation: i64) -> i64 {
    (outputs - 1) * stride + (kernel - 1) * dilation + 1
}

/// The parameters of 2-D convolution `op` that the convolution templates
/// read: its input and output shapes, kernel, strides, dilations, leading
/// pads and groups.
pub(super) struct Window {
    pub x: Vec<i64>,
    pub y: Vec<i64>,
    pub kernel: [i64; 2],
    pub strides: [i64; 2],
    pub dilations: [i64; 2],
    pub pads: [i64; 2],
    pub group: i64,
}

impl Window {
    pub(super) fn of(m: &Module, op: OpId) -> Option<Window> {
        let conv = graph::ops::Conv::new(m, op)?;
        let o = m.op(op);
        let w = shape_of(m, o.operands[1]);
        // The verifier gives strides and dilations two values (of two
        // spatial axes) and pads four: the leading two, then the trailing.
        let pair = |v: Option<Vec<i64>>, default: i64| match v.as_deref() {
            None => Some([default; 2]),
            Some(&[a, b]) => Some([a, b]),
            _ => None,
        };
        let leading = match conv.pads().as_deref() {
            None => [0, 0],
            Some(&[top, left, _, _]) => [top, left],
            _ => return None,
        };
        Some(Window {
            x: shape_of(m, o.operands[0]),
            y: shape_of(m, o.results[0]),
            kernel: [*w.get(2)?, *w.get(3)?],
            strides: pair(conv.strides(), 1)?,
            dilations: pair(conv.dilations(), 1)?,
            pads: leading,
            group: conv.group(),
        })
    }

    /// The grid of schedule `s`: blocks of rows and columns, blocks of
    /// channels, batches.
    fn grid(&self, s: &DepthwiseSchedule) -> [i64; 3] {
        let blocks = |n: i64, per: i64| (n + per - 1) / per;
        [
            blocks(self.y[2], s.rows) * blocks(self.y[3], s.columns),
            blocks(self.y[1], s.channels),
            self.y[0],
        ]
    }

    /// Words of the staged input of a block of schedule `s`.
    fn words(&self, s: &DepthwiseSchedule) -> i64 {
        let [rows, columns] = self.spans(s);
        s.channels * rows * columns
    }

    /// The rows and columns of input a block reads.
    fn spans(&self, s: &DepthwiseSchedule) -> [i64; 2] {
        let outputs = [s.rows, s.columns];
        [0, 1].map(|a| {
            span(
                outputs[a],
                self.strides[a],
                self.kernel[a],
                self.dilations[a],
            )
        })
    }
}

/// The schedule for depthwise convolution `op` on target `t`: blocks of 8
/// x 8 outputs of 4 channels (256 invocations; a subgroup of 32 takes
/// four rows of one channel, sharing its weights), fewer channels where
/// the staged window would not fit the target's workgroup memory at
/// `elem_bytes` a word; `None` where not even one channel's does.
pub(super) fn choose(
    m: &Module,
    op: OpId,
    t: &Target,
    elem_bytes: i64,
) -> Option<DepthwiseSchedule> {
    let window = Window::of(m, op)?;
    [4, 2, 1]
        .into_iter()
        .map(|channels| DepthwiseSchedule {
            channels,
            rows: 8,
            columns: 8,
        })
        .find(|s| invalid(s, &window, t, elem_bytes).is_none())
}

/// Why schedule `s` cannot compute a convolution of `window`, if it
/// cannot.
fn invalid(s: &DepthwiseSchedule, window: &Window, t: &Target, elem_bytes: i64) -> Option<String> {
    let small = |v: i64| (1..=64).contains(&v);
    if !(small(s.channels) && small(s.rows) && small(s.columns)) {
        return Some("its channels, rows or columns are out of range (1 to 64)".into());
    }
    if !window
        .kernel
        .iter()
        .chain(&window.strides)
        .chain(&window.dilations)
        .all(|&v| small(v))
    {
        return Some("its kernel, strides or dilations are out of range (1 to 64)".into());
    }
    let threads = s.invocations();
    if threads > t.max_workgroup_invocations {
        return Some(format!(
            "its {threads} invocations exceed the workgroup limit of {}",
            t.max_workgroup_invocations
        ));
    }
    if window
        .grid(s)
        .iter()
        .any(|&g| g > t.max_workgroups_per_dimension)
    {
        return Some(format!(
            "its blocks exceed the grid's {} workgroups a dimension",
            t.max_workgroups_per_dimension
        ));
    }
    // Workgroup memory: the portable limit every device meets, as the
    // other templates that run on any GPU keep to.
    let bytes = window.words(s) * elem_bytes;
    if bytes > t.max_workgroup_storage_bytes {
        return Some(format!(
            "its staged input takes {bytes} bytes of workgroup memory, over the target's {}",
            t.max_workgroup_storage_bytes
        ));
    }
    None
}

/// The depthwise convolution `anchor` with its group's epilogue, by
/// schedule `s`.
pub(super) fn lower(
    kb: &mut KernelBuilder,
    anchor: OpId,
    outputs: &[(ValueId, ValueId)],
    s: DepthwiseSchedule,
) -> R<()> {
    if !is_depthwise(kb.m(), anchor) {
        return Err(
            "the conv_depthwise template computes convolutions of one channel a group".into(),
        );
    }
    let window = Window::of(kb.m(), anchor).ok_or("a convolution of two spatial axes")?;
    let float = kb.float;
    let elem_bytes = i64::from(float.bits()) / 8;
    if let Some(why) = invalid(&s, &window, target(), elem_bytes) {
        return Err(format!(
            "its conv_depthwise schedule cannot be built: {why}"
        ));
    }
    let o = kb.m().op(anchor);
    let (x, w, bias, y) = (
        o.operands[0],
        o.operands[1],
        o.operands.get(2).copied(),
        o.results[0],
    );
    let [n, channels, height, width] = [0, 1, 2, 3].map(|a| window.y[a]);
    let [span_rows, span_columns] = window.spans(&s);
    let [blocks, channel_blocks, _] = window.grid(&s);
    let tiles_x = (width + s.columns - 1) / s.columns;
    let threads = s.invocations();
    let tid = kb.id(IdKind::Local, 0, threads);
    let tile = kb.id(IdKind::Workgroup, 0, blocks);
    let channel_tile = kb.id(IdKind::Workgroup, 1, channel_blocks);
    let batch = if n > 1 {
        kb.id(IdKind::Workgroup, 2, n)
    } else {
        Ix::constant(0)
    };
    let first_row = tile.clone().floor_div(Ix::constant(tiles_x)) * Ix::constant(s.rows);
    let first_column = tile.modulo(Ix::constant(tiles_x)) * Ix::constant(s.columns);
    let first_channel = channel_tile * Ix::constant(s.channels);
    let plane = span_rows * span_columns;
    let staged = kb.ir.alloc(s.channels * plane, float);
    // Stage the window: load `e` as (channel, row, column) of it, the
    // channels fastest where the input lies channel-last, or is computed
    // from a buffer that does (ConvNeXt-T's blocks add their residual in
    // the kernel of the next block's convolution). There, where a block's
    // channels and the input's come in fours, an invocation stages four
    // channels of one pixel: one vector of each channel-last buffer, four
    // words of each other, neighbouring invocations reading neighbouring
    // pixels of both (ConvNeXt-T's previous residual lies channel-first,
    // the branch added to it channel-last).
    let channel_last = channels_adjacent(kb, x) || kb.vector_reachable(x, 1);
    let per_load = if channel_last && s.channels % 4 == 0 && channels % 4 == 0 {
        4
    } else {
        1
    };
    let channel_loads = s.channels / per_load;
    let count = channel_loads * plane;
    let zero = kb.ir.constant(0.0, float);
    let (in_h, in_w) = (window.x[2], window.x[3]);
    let stage = |kb: &mut KernelBuilder, e: Ix| -> R<()> {
        let (c, r, col) = if channel_last {
            let c = e.clone().modulo(Ix::constant(channel_loads)) * Ix::constant(per_load);
            let p = e.floor_div(Ix::constant(channel_loads));
            (
                c,
                p.clone().floor_div(Ix::constant(span_columns)),
                p.modulo(Ix::constant(span_columns)),
            )
        } else {
            let p = e.clone().modulo(Ix::constant(plane));
            (
                e.floor_div(Ix::constant(plane)),
                p.clone().floor_div(Ix::constant(span_columns)),
                p.modulo(Ix::constant(span_columns)),
            )
        };
        let iy = first_row.clone() * Ix::constant(window.strides[0]) - Ix::constant(window.pads[0])
            + r.clone();
        let ix = first_column.clone() * Ix::constant(window.strides[1])
            - Ix::constant(window.pads[1])
            + col.clone();
        let ic = first_channel.clone() + c.clone();
        let mut flags = vec![
            kb.index_cmp(CmpPred::Ge, &iy, 0),
            kb.index_cmp(CmpPred::Lt, &iy, in_h),
            kb.index_cmp(CmpPred::Ge, &ix, 0),
            kb.index_cmp(CmpPred::Lt, &ix, in_w),
        ];
        if channels % s.channels != 0 {
            flags.push(kb.index_cmp(CmpPred::Lt, &ic, channels));
        }
        // Outside the input (the padding, a ragged block) the window holds
        // zeros; the read there is wrapped into the input, never used.
        let at = [
            batch.clone(),
            ic.modulo(Ix::constant(channels)),
            iy.modulo(Ix::constant(in_h)),
            ix.modulo(Ix::constant(in_w)),
        ];
        let words = if per_load == 4 {
            kb.value4_at(x, &at, 1)?.to_vec()
        } else {
            vec![kb.value_at(x, &at)?]
        };
        let inside = kb.ir.all(flags);
        for (j, v) in words.into_iter().enumerate() {
            let v = kb.ir.cast(v, Type::Scalar(float));
            let v = kb.ir.select(inside, v, zero);
            let slot = (c.clone() + Ix::constant(j as i64)) * Ix::constant(plane)
                + r.clone() * Ix::constant(span_columns)
                + col.clone();
            kb.store(v, staged, &slot);
        }
        Ok(())
    };
    // Whole rounds of the workgroup, unrolled where few (their loads then
    // go out together), else in a loop; then the last, partial round.
    let (rounds, rest) = (count / threads, count % threads);
    if rounds <= UNROLLED_ROUNDS {
        for round in 0..rounds {
            stage(kb, tid.clone() + Ix::constant(round * threads))?;
        }
    } else {
        kb.for_loop(rounds, Vec::new(), &mut |kb, round, _| {
            stage(kb, tid.clone() + round * Ix::constant(threads))?;
            Ok(Vec::new())
        })?;
    }
    if rest > 0 {
        let e = tid.clone() + Ix::constant(rounds * threads);
        let within = kb.index_cmp(CmpPred::Lt, &e, count);
        guarded(kb, Some(within), &mut |kb| stage(kb, e.clone()))?;
    }
    kb.ir.barrier();
    // This invocation's output: channel, row and column of the block, the
    // columns fastest so that a subgroup stores along the rows.
    let per_channel = s.rows * s.columns;
    let c = tid.clone().floor_div(Ix::constant(per_channel));
    let r = tid
        .clone()
        .modulo(Ix::constant(per_channel))
        .floor_div(Ix::constant(s.columns));
    let col = tid.modulo(Ix::constant(s.columns));
    let oc = first_channel + c.clone();
    let oy = first_row + r.clone();
    let ox = first_column + col.clone();
    let wc = if channels % s.channels != 0 {
        oc.clone().modulo(Ix::constant(channels))
    } else {
        oc.clone()
    };
    let base = c * Ix::constant(plane)
        + r * Ix::constant(window.strides[0] * span_columns)
        + col * Ix::constant(window.strides[1]);
    let acc = kb.ir.constant(0.0, ACC);
    let acc = kb.loop_nest(&window.kernel, vec![acc], &mut |kb, taps, acc| {
        let at = base.clone()
            + taps[0].clone() * Ix::constant(window.dilations[0] * span_columns)
            + taps[1].clone() * Ix::constant(window.dilations[1]);
        let v = kb.load(staged, &at);
        let k = kb.value_at(
            w,
            &[
                wc.clone(),
                Ix::constant(0),
                taps[0].clone(),
                taps[1].clone(),
            ],
        )?;
        let (v, k) = (kb.widen(v), kb.widen(k));
        let p = kb.ir.binary(BinaryFn::Mul, v, k);
        Ok(vec![kb.ir.binary(BinaryFn::Add, acc[0], p)])
    })?[0];
    let acc = match bias {
        Some(b) => {
            let b = kb.value_at(b, std::slice::from_ref(&wc))?;
            let b = kb.widen(b);
            kb.ir.binary(BinaryFn::Add, acc, b)
        }
        None => acc,
    };
    let mut flags = Vec::new();
    if height % s.rows != 0 {
        flags.push(kb.index_cmp(CmpPred::Lt, &oy, height));
    }
    if width % s.columns != 0 {
        flags.push(kb.index_cmp(CmpPred::Lt, &ox, width));
    }
    if channels % s.channels != 0 {
        flags.push(kb.index_cmp(CmpPred::Lt, &oc, channels));
    }
    let cond = (!flags.is_empty()).then(|| kb.ir.all(flags));
    let idx = [batch, oc, oy, ox];
    guarded(kb, cond, &mut |kb| {
        let v = kb.ir.cast(acc, Type::Scalar(float));
        kb.memo_put(y, &idx, v);
        store_outputs(kb, outputs, &idx)
    })?;
    kb.flops = Some(2 * n * channels * height * width * window.kernel[0] * window.kernel[1]);
    kb.finish(
        [threads, 1, 1],
        [blocks, channel_blocks, n],
        FuncTemplate::ConvDepthwise,
        Some(vec![s.channels, s.rows, s.columns]),
    );
    Ok(())
}

/// Whether `x` (`[n, c, h, w]`) lies in memory with its channels adjacent
/// (an NHWC tensor read through a transposed view).
fn channels_adjacent(kb: &KernelBuilder, x: ValueId) -> bool {
    let Some(Input::Memory {
        shape,
        map: Some(map),
        ..
    }) = kb.inputs.get(&x)
    else {
        return false;
    };
    let address = |at: &[i64]| -> Option<i64> {
        let idx = map.eval(at, &[]).ok()?;
        Some(idx.iter().zip(shape).fold(0, |a, (&i, &n)| a * n + i))
    };
    match (address(&[0, 0, 0, 0]), address(&[0, 1, 0, 0])) {
        (Some(a), Some(b)) => b - a == 1,
        _ => false,
    }
}
