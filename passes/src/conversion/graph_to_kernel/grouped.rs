//! The grouped convolution template, for groups of too few output
//! channels to fill product tiles (ResNeXt-50's 3x3 convolutions of 4, 8
//! and 16 channels a group): an invocation computes `channels`
//! neighbouring output channels of one group at `columns` neighbouring
//! output columns of one row, as a register block. For each input
//! channel of the group and each row of the kernel it reads the input
//! words its columns' windows span once, and the weights of its channels
//! (the same for every invocation of a workgroup, which shares one block
//! of channels), and accumulates every product of the two.
//!
//! Per element, each output read its whole window and the weights of its
//! channel itself: every input word was read by each output channel of
//! its group and each column its window covers, two loads a
//! multiply-add.

use ircc_core::{Module, OpId, Type, ValueId};
use ircc_dialects::kernel::ops::{BinaryFn, CmpPred, FuncTemplate, IdKind};
use ircc_dialects::kernel::{GroupedSchedule, Target};

use super::depthwise::{Window, float_conv2d, is_depthwise, span};
use super::lowering::{Ix, KernelBuilder, guarded, store_outputs, target};
use super::values::ACC;

type R<T> = Result<T, String>;

/// Invocations of a workgroup: one subgroup of NVIDIA's. On an H100,
/// ResNeXt-50's thirteen convolutions in blocks of 2x2 took 161 us
/// together at f16 in workgroups of 32, 206 in workgroups of 16, and
/// blocks of one output 244 in workgroups of 64 (per element, in
/// workgroups of 256: 188).
const INVOCATIONS: i64 = 32;

/// Invocations a compute unit is given at least, where blocks as large
/// allow: fewer leave each unit's loads waiting with nothing to hide them.
/// An H100's 132 units want 67584: ResNeXt-50's first stage (128
/// channels, 56x56) gets blocks of 2x2 (100352 invocations), which took
/// 9.3-10.8 us a convolution, against 10.3-10.6 in blocks of 4x2 and
/// 10.8-11.7 in blocks of 4x4 (per element: 14.0-14.4).
const INVOCATIONS_PER_UNIT: i64 = 512;

/// Blocks of (channels, columns) an invocation computes, largest first.
/// None smaller than 2x2: on the H100 the second and third stages of
/// ResNeXt-50 took 131 us together at f16 in blocks of 2x2, 143 in
/// blocks of 2x1 (per element 145), so blocks stay 2x2 even where that
/// leaves units short of invocations. A GPU of few units (Mali-G76's 5)
/// takes larger blocks.
const BLOCKS: [[i64; 2]; 3] = [[4, 4], [4, 2], [2, 2]];

/// Whether `anchor` is a float 2-D convolution of several groups and not
/// depthwise (a group may read one input channel for several outputs).
pub(super) fn is_grouped(m: &Module, anchor: OpId) -> bool {
    float_conv2d(m, anchor).is_some_and(|(conv, _, _)| conv.group() > 1) && !is_depthwise(m, anchor)
}

/// The schedule for grouped convolution `op` on a device of
/// `compute_units`: the largest valid block (of `BLOCKS`; see `invalid`)
/// that still gives every unit `INVOCATIONS_PER_UNIT` invocations, else
/// the smallest valid one; `None` where none is (groups of an odd number
/// of channels, a kernel, stride or dilation over 16, a grid over the
/// limit), and the convolution runs per element.
pub(super) fn choose(
    m: &Module,
    op: OpId,
    t: &Target,
    compute_units: i64,
) -> Option<GroupedSchedule> {
    let window = Window::of(m, op)?;
    let valid: Vec<GroupedSchedule> = BLOCKS
        .iter()
        .map(|&[channels, columns]| GroupedSchedule {
            channels,
            columns,
            invocations: INVOCATIONS,
        })
        .filter(|s| invalid(s, &window, t).is_none())
        .collect();
    let wanted = compute_units * INVOCATIONS_PER_UNIT;
    valid
        .iter()
        .find(|s| blocks(s, &window) >= wanted)
        .or(valid.last())
        .copied()
}

/// Output channels of one group of the convolution of `window`.
fn group_channels(window: &Window) -> i64 {
    window.y[1] / window.group
}

/// The blocks of schedule `s` along each output row.
fn row_blocks(s: &GroupedSchedule, window: &Window) -> i64 {
    (window.y[3] + s.columns - 1) / s.columns
}

/// The blocks (invocations with work) of schedule `s`.
fn blocks(s: &GroupedSchedule, window: &Window) -> i64 {
    window.y[0] * (window.y[1] / s.channels) * window.y[2] * row_blocks(s, window)
}

/// The grid of schedule `s`: workgroups along the rows' blocks, blocks of
/// channels, batches.
fn grid(s: &GroupedSchedule, window: &Window) -> [i64; 3] {
    let positions = window.y[2] * row_blocks(s, window);
    [
        (positions + s.invocations - 1) / s.invocations,
        window.y[1] / s.channels,
        window.y[0],
    ]
}

/// Why schedule `s` cannot compute the convolution of `window`, if it
/// cannot.
fn invalid(s: &GroupedSchedule, window: &Window, t: &Target) -> Option<String> {
    let small = |v: i64, most: i64| (1..=most).contains(&v);
    if !(small(s.channels, 8) && small(s.columns, 8)) {
        return Some("its channels or columns are out of range (1 to 8)".into());
    }
    if !small(s.invocations, t.max_workgroup_invocations) {
        return Some(format!(
            "its {} invocations are out of range (1 to the workgroup limit of {})",
            s.invocations, t.max_workgroup_invocations
        ));
    }
    if !window
        .kernel
        .iter()
        .chain(&window.strides)
        .chain(&window.dilations)
        .all(|&v| small(v, 16))
    {
        return Some("its kernel, strides or dilations are out of range (1 to 16)".into());
    }
    if group_channels(window) % s.channels != 0 {
        return Some(format!(
            "its {} channels do not divide a group's {}",
            s.channels,
            group_channels(window)
        ));
    }
    if grid(s, window)
        .iter()
        .any(|&g| g > t.max_workgroups_per_dimension)
    {
        return Some(format!(
            "its blocks exceed the grid's {} workgroups a dimension",
            t.max_workgroups_per_dimension
        ));
    }
    None
}

/// The grouped convolution `anchor` with its group's epilogue, by
/// schedule `s`.
pub(super) fn lower(
    kb: &mut KernelBuilder,
    anchor: OpId,
    outputs: &[(ValueId, ValueId)],
    s: GroupedSchedule,
) -> R<()> {
    if !is_grouped(kb.m(), anchor) {
        return Err(
            "the conv_grouped template computes 2-D convolutions of several groups, not depthwise"
                .into(),
        );
    }
    let window = Window::of(kb.m(), anchor)
        .ok_or("the conv_grouped template computes convolutions of two spatial axes")?;
    if let Some(why) = invalid(&s, &window, target()) {
        return Err(format!("its conv_grouped schedule cannot be built: {why}"));
    }
    let o = kb.m().op(anchor);
    let (x, w, bias, y) = (
        o.operands[0],
        o.operands[1],
        o.operands.get(2).copied(),
        o.results[0],
    );
    let float = kb.float;
    let [n, out_channels, height, width] = [0, 1, 2, 3].map(|a| window.y[a]);
    let [in_c, in_h, in_w] = [1, 2, 3].map(|a| window.x[a]);
    let group_inputs = in_c / window.group;
    let [kh, kw] = window.kernel;
    let [sy, sx] = window.strides;
    let [dy, dx] = window.dilations;
    let [gx, gy, _] = grid(&s, &window);
    let per_row = row_blocks(&s, &window);
    let positions = height * per_row;
    let lid = kb.id(IdKind::Local, 0, s.invocations);
    let wid = kb.id(IdKind::Workgroup, 0, gx);
    let channel_block = kb.id(IdKind::Workgroup, 1, gy);
    let batch = if n > 1 {
        kb.id(IdKind::Workgroup, 2, n)
    } else {
        Ix::constant(0)
    };
    let p = wid * Ix::constant(s.invocations) + lid;
    let oy = p.clone().floor_div(Ix::constant(per_row));
    let ox = p.clone().modulo(Ix::constant(per_row)) * Ix::constant(s.columns);
    let oc = channel_block * Ix::constant(s.channels);
    // The block's channels lie in one group (`channels` divides a
    // group's), whose input channels start here.
    let first_input =
        oc.clone().floor_div(Ix::constant(group_channels(&window))) * Ix::constant(group_inputs);
    // Input columns the block's windows span along a row.
    let row_span = span(s.columns, sx, kw, dx);
    let accs = (s.channels * s.columns) as usize;
    let zero = kb.ir.constant(0.0, ACC);
    let acc = kb.loop_nest(
        &[group_inputs, kh],
        vec![zero; accs],
        &mut |kb, ivs, acc| {
            let (ic, ky) = (first_input.clone() + ivs[0].clone(), ivs[1].clone());
            let iy = oy.clone() * Ix::constant(sy) - Ix::constant(window.pads[0])
                + ky.clone() * Ix::constant(dy);
            let row_inside = [
                kb.index_cmp(CmpPred::Ge, &iy, 0),
                kb.index_cmp(CmpPred::Lt, &iy, in_h),
            ];
            // Outside the input (the padding, a ragged block) a word is zero;
            // the read there is wrapped into the input, never used.
            let mut words = Vec::with_capacity(row_span as usize);
            for t in 0..row_span {
                let ix =
                    ox.clone() * Ix::constant(sx) - Ix::constant(window.pads[1]) + Ix::constant(t);
                let mut flags = row_inside.to_vec();
                flags.push(kb.index_cmp(CmpPred::Ge, &ix, 0));
                flags.push(kb.index_cmp(CmpPred::Lt, &ix, in_w));
                let at = [
                    batch.clone(),
                    ic.clone(),
                    iy.clone().modulo(Ix::constant(in_h)),
                    ix.modulo(Ix::constant(in_w)),
                ];
                let v = kb.value_at(x, &at)?;
                let v = kb.widen(v);
                let inside = kb.ir.all(flags);
                words.push(kb.ir.select(inside, v, zero));
            }
            let mut acc = acc.to_vec();
            for j in 0..s.channels {
                for kx in 0..kw {
                    let at = [
                        oc.clone() + Ix::constant(j),
                        ivs[0].clone(),
                        ky.clone(),
                        Ix::constant(kx),
                    ];
                    let k = kb.value_at(w, &at)?;
                    let k = kb.widen(k);
                    for i in 0..s.columns {
                        let a = (j * s.columns + i) as usize;
                        let p = kb
                            .ir
                            .binary(BinaryFn::Mul, words[(i * sx + kx * dx) as usize], k);
                        acc[a] = kb.ir.binary(BinaryFn::Add, acc[a], p);
                    }
                }
            }
            Ok(acc)
        },
    )?;
    let within = (positions % s.invocations != 0).then(|| kb.index_cmp(CmpPred::Lt, &p, positions));
    for j in 0..s.channels {
        let c = oc.clone() + Ix::constant(j);
        let b = match bias {
            Some(b) => {
                let b = kb.value_at(b, std::slice::from_ref(&c))?;
                Some(kb.widen(b))
            }
            None => None,
        };
        for i in 0..s.columns {
            let col = ox.clone() + Ix::constant(i);
            let mut flags: Vec<ValueId> = within.into_iter().collect();
            if width % s.columns != 0 {
                flags.push(kb.index_cmp(CmpPred::Lt, &col, width));
            }
            let cond = (!flags.is_empty()).then(|| kb.ir.all(flags));
            let a = acc[(j * s.columns + i) as usize];
            let a = match b {
                Some(b) => kb.ir.binary(BinaryFn::Add, a, b),
                None => a,
            };
            let idx = [batch.clone(), c.clone(), oy.clone(), col];
            guarded(kb, cond, &mut |kb| {
                let v = kb.ir.cast(a, Type::Scalar(float));
                kb.memo_put(y, &idx, v);
                store_outputs(kb, outputs, &idx)
            })?;
        }
    }
    // None where a hostile shape's count would overflow.
    kb.flops = [n, out_channels, height, width, group_inputs, kh, kw]
        .iter()
        .try_fold(2i64, |a, &b| a.checked_mul(b));
    kb.finish(
        [s.invocations, 1, 1],
        [gx, gy, n],
        FuncTemplate::ConvGrouped,
        Some(vec![s.channels, s.columns, s.invocations]),
    );
    Ok(())
}
