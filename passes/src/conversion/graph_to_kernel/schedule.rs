//! `kernel.schedule`: the strategy half of the conversion to kernels (as
//! IREE's `KernelConfig` sets each dispatch's `lowering_config`). For each
//! compute op of a host function — a fused group or a lone graph op — it
//! chooses the template from the group's anchor (a tiled product for
//! matmul, gemm and one-group convolutions, a row per workgroup for
//! softmax, normalizations and float reductions, fused attention where a
//! template fits it, non-maximum suppression, else one invocation per
//! element) and the template's parameters for the module's target
//! (`ircc.target`): the product's tiles and split-K for the device's
//! compute units, or a tuning database's; the attention template and its
//! tiles. It records them as `kernel.schedule` on the op and the precision
//! as `kernel.precision` on the module; the texture-level passes and
//! `kernel.lower` only read them.

use std::collections::BTreeMap;

use ircc_core::diag::{Diagnostic, Diagnostics};
use ircc_core::pass::{Pass, PassContext};
use ircc_core::registry::MappingType;
use ircc_core::{Attribute, ElemType, Module, OpId, ValueId};
use ircc_dialects::graph::{self, GraphOp};
use ircc_dialects::is_data;
use ircc_dialects::kernel::{
    DeviceProfile, MatmulSchedule, PRECISION_ATTR, Schedule, target_profile,
};

use super::attention;
use super::cooperative;
use super::group::{Group, group_of};
use super::lowering::{shape_of, target};
use super::matmul::{Tiling, config_of, schedule_of, tuning_key};
use super::product::product_dims;
use crate::decl::{KernelScheduleAttention, KernelScheduleOptions, KernelSchedulePrecision};
use crate::tuning::database::TuningDb;
use crate::tuning::space::{MatmulConfig, ProductShape};

pub struct KernelSchedule {
    float: ElemType,
    tuning_db: String,
    attention: KernelScheduleAttention,
}

impl KernelSchedule {
    pub fn new(options: KernelScheduleOptions) -> Self {
        KernelSchedule {
            float: match options.precision {
                KernelSchedulePrecision::F32 => ElemType::F32,
                KernelSchedulePrecision::F16 => ElemType::F16,
            },
            tuning_db: options.tuning_db,
            attention: options.attention,
        }
    }
}

/// What choosing a schedule reads besides the group.
struct Choice<'a> {
    float: ElemType,
    device: &'a DeviceProfile,
    attention: KernelScheduleAttention,
    compute_units: i64,
    /// A tuning database's parameters by product signature, and its path.
    tuned: Option<(&'a BTreeMap<String, MatmulConfig>, &'a str)>,
}

/// The ALU lanes from which a device runs the workgroups of a kernel side
/// by side rather than one after another (a GPU, not a CPU's cores).
const PARALLEL_LANES: u32 = 64;

/// The schedule of `group`.
fn choose(m: &Module, group: &Group, c: &Choice) -> Result<Schedule, String> {
    let anchor = group.anchor;
    Ok(match kind_of(m, anchor).0 {
        // A depthwise convolution stages its input window in workgroup
        // memory on a GPU whose L1 serves buffers (the window reads of one
        // per element cost ConvNeXt-T's stage-one 7x7 convolutions 68-134
        // us each on an H100). Not on a CPU's few ALU lanes; nor where
        // only textures are cached (Adreno), where layout.select keeps
        // such results in textures, which the template does not write
        // (ConvNeXt-T under adreno740: 97 dispatches with it, 67 without).
        Kind::Elementwise
            if super::depthwise::is_depthwise(m, anchor)
                && gpu_lanes(c.device)
                && c.device.l1_serves_buffers =>
        {
            let bytes = i64::from(c.float.bits()) / 8;
            super::depthwise::choose(m, anchor, target(), bytes)
                .map_or(Schedule::Elementwise, Schedule::ConvDepthwise)
        }
        // A grouped convolution of narrow groups computes a block of
        // channels and columns an invocation, reading each input word once
        // for the whole block (`grouped.rs`), on the same GPUs. Not on a
        // CPU's lanes: lavapipe ran ResNeXt-50's thirteen 4x faster in
        // blocks of 4x4, but the reduced RegNetX's of 4x4 pixels 1.5-2x
        // slower in blocks of 2x2 than per element.
        Kind::Elementwise
            if super::grouped::is_grouped(m, anchor)
                && gpu_lanes(c.device)
                && c.device.l1_serves_buffers =>
        {
            super::grouped::choose(m, anchor, target(), c.compute_units)
                .map_or(Schedule::Elementwise, Schedule::ConvGrouped)
        }
        Kind::Elementwise => Schedule::Elementwise,
        Kind::Row => {
            super::row::column(m, group, c.compute_units).map_or(Schedule::Row, Schedule::Column)
        }
        Kind::NonMaxSuppression => Schedule::NonMaxSuppression,
        Kind::Attention => {
            super::attention::schedule(m, anchor, target(), c.device, c.float, c.attention)
        }
        Kind::Matmul => {
            let sum_in_consumers = consumers_sum_partials(m, group);
            let (rows, columns, k, batch) = product_dims(m, anchor);
            let shape = ProductShape {
                m: rows,
                n: columns,
                k,
                batches: batch.iter().product(),
            };
            let key = tuning_key(m, anchor, &shape, c.float);
            let mut schedule = match c
                .tuned
                .and_then(|(table, path)| Some((table.get(&key)?, path)))
            {
                Some((config, path)) => {
                    if let Some(why) = config.invalid(&shape, target()) {
                        return Err(format!(
                            "tuning database {path}: the parameters for '{key}' do not fit it: {why}"
                        ));
                    }
                    Schedule::Matmul(schedule_of(config, sum_in_consumers, true))
                }
                None if c.float == ElemType::F16 => {
                    match cooperative::choose(
                        shape.m,
                        shape.n,
                        shape.k,
                        shape.batches,
                        c.device,
                        sum_in_consumers,
                    ) {
                        Some(s) => Schedule::MatmulCooperative(s),
                        None => fma(&shape, c.compute_units, sum_in_consumers),
                    }
                }
                None => fma(&shape, c.compute_units, sum_in_consumers),
            };
            // The product normalizes its rows itself unless it splits K
            // (each split would walk all of K for their moments) or the
            // device computes the walks its workgroups repeat one after
            // another: a CPU's few ALU lanes (lavapipe's 2 cores x 8, where
            // the shared ConvNeXt ran 4% slower), against a GPU's thousands
            // (the H100's 16,896, where ConvNeXt-T ran 7% faster).
            //
            // Such a product's workgroups, where as tall as wide and the
            // product more than a tile tall, are halved where a unit
            // would get fewer than `matmul_workgroups_per_unit` of them: a
            // workgroup computing its rows' moments walks no K meanwhile,
            // so a unit needs more of them to overlap the two (on the
            // H200, ConvNeXt-T's 15 normalizing products took 40 us less
            // together; halving every product's so cost RegNetX-3.2GF's
            // convolutions 40 us).
            if let Schedule::Matmul(s) = &mut schedule
                && super::prologue::normalization(m, group).is_some()
            {
                let config = config_of(s);
                let words = super::prologue::moments_words(config.tile_m(), config.invocations());
                s.normalizes =
                    s.splits == 1 && gpu_lanes(c.device) && config.fits_beside(words, target());
                let [x, y, z] = config.grid(&shape);
                let wanted = c.compute_units * target().matmul_workgroups_per_unit;
                let square = s.workgroup[0] == s.workgroup[1];
                if s.normalizes
                    && !s.tuned
                    && square
                    && x * y * z < wanted
                    && config.tile_m() < shape.m
                {
                    let halved = MatmulSchedule {
                        workgroup: [s.workgroup[0], s.workgroup[1] / 2],
                        ..*s
                    };
                    if config_of(&halved).invalid(&shape, target()).is_none() {
                        *s = halved;
                    }
                }
            }
            schedule
        }
    })
}

/// Whether `device` runs the workgroups of a kernel side by side (a GPU's
/// [`PARALLEL_LANES`] or more ALU lanes, or lanes not given), rather than
/// one after another.
pub(super) fn gpu_lanes(device: &DeviceProfile) -> bool {
    let lanes = device.alus_per_unit.map(|a| a * device.compute_units);
    lanes.is_none_or(|l| l >= PARALLEL_LANES)
}

/// The FMA template's schedule, by the target's heuristic.
fn fma(shape: &ProductShape, compute_units: i64, sum_in_consumers: bool) -> Schedule {
    let tiling = Tiling::choose(
        shape.m,
        shape.n,
        shape.k,
        shape.batches,
        compute_units,
        sum_in_consumers,
    );
    Schedule::Matmul(schedule_of(&tiling.config(), sum_in_consumers, false))
}

impl Pass for KernelSchedule {
    fn name(&self) -> &str {
        KernelScheduleOptions::NAME
    }

    fn run(&mut self, m: &mut Module, _: &PassContext) -> Result<(), Diagnostics> {
        let fail = |e: String| {
            Diagnostics(vec![Diagnostic::plain(format!(
                "{}: {e}",
                KernelScheduleOptions::NAME
            ))])
        };
        let device = target_profile(m).map_err(fail)?;
        let table = if self.tuning_db.is_empty() {
            None
        } else {
            Some(
                TuningDb::read(&self.tuning_db, &device.name)
                    .map_err(fail)?
                    .table(),
            )
        };
        let choice = Choice {
            float: self.float,
            device: &device,
            attention: self.attention,
            compute_units: i64::from(device.compute_units),
            tuned: table.as_ref().map(|t| (t, self.tuning_db.as_str())),
        };
        let precision = if self.float == ElemType::F16 {
            "f16"
        } else {
            "f32"
        };
        m.attrs
            .insert(PRECISION_ATTR.into(), Attribute::String(precision.into()));
        for f in m.functions() {
            let Some(block) = m.entry_block(f) else {
                continue;
            };
            for op in m.blocks[block].ops.clone() {
                if is_data(m, op) || GraphOp::of(m, op).is_none() {
                    continue;
                }
                let group = group_of(m, op);
                let schedule = choose(m, &group, &choice).map_err(|e| {
                    Diagnostics(vec![Diagnostic::error(
                        m.op(op).loc.clone(),
                        format!("{}: {e}", KernelScheduleOptions::NAME),
                    )])
                })?;
                schedule.attach(m, op);
            }
        }
        Ok(())
    }
}

/// The kinds of template `kernel.schedule` chooses among, before their
/// parameters.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Elementwise,
    Matmul,
    Row,
    Attention,
    NonMaxSuppression,
}

/// The kind of template computing `anchor`, and its iteration space.
pub(super) fn kind_of(m: &Module, anchor: OpId) -> (Kind, Vec<i64>) {
    let o = m.op(anchor);
    let result = shape_of(m, o.results[0]);
    use GraphOp as G;
    let Some(kind) = GraphOp::of(m, anchor) else {
        return (Kind::Elementwise, result);
    };
    // The tiled product accumulates in f32; integer products (ONNX's
    // MatMulInteger, ConvInteger) run per element, summing in i32.
    let float_result = m
        .value_type(o.results[0])
        .as_tensor()
        .is_some_and(|t| t.elem.is_float());
    match kind {
        G::Matmul if float_result && o.operands.iter().all(|&x| shape_of(m, x).len() >= 2) => {
            (Kind::Matmul, result)
        }
        G::Gemm if float_result => (Kind::Matmul, result),
        // An implicit GEMM, a batch of them for a grouped convolution whose
        // groups have enough output channels to fill product tiles (RegNetX's
        // 48: on the H200, its 3x3 convolutions per element took 50-83 us
        // each, 42% of its kernel time). Groups of fewer channels reuse too
        // little to pay for product tiles: they run per element, or
        // depthwise ones by their own template (`depthwise.rs`). A group's
        // channels are a multiple of four, so that a texel of four
        // neighbouring columns is one group's.
        G::Conv if float_result && conv_is_product(m, anchor) => (Kind::Matmul, result),
        G::Softmax | G::LayerNorm | G::InstanceNorm => (Kind::Row, shape_of(m, o.operands[0])),
        G::Attention if attention::fits(m, anchor, target()) => (Kind::Attention, result),
        G::NonMaxSuppression => (Kind::NonMaxSuppression, result),
        G::ReduceSum
        | G::ReduceMean
        | G::ReduceMax
        | G::ReduceMin
        | G::ReduceProd
        | G::GlobalAveragePool
            if float_result =>
        {
            (Kind::Row, result)
        }
        _ => (Kind::Elementwise, result),
    }
}

/// The fewest output channels a group of a grouped convolution has for
/// the product templates to take it: on the H200, ResNeXt-50's groups of
/// 16 ran slower as products than per element (its f32 kernels 2.14 ->
/// 2.21 ms), its groups of 32 as fast, RegNetX's of 48 faster.
const PRODUCT_GROUP_CHANNELS: i64 = 32;

/// Whether convolution `op` runs as an implicit GEMM (see [`kind_of`]).
fn conv_is_product(m: &Module, op: OpId) -> bool {
    if graph::ops::Conv::new(m, op).is_none() {
        return false;
    }
    // The groups are the product's batch, a group's channels its columns.
    let (_, channels, _, groups) = product_dims(m, op);
    groups.is_empty() || (channels >= PRODUCT_GROUP_CHANNELS && channels % 4 == 0)
}

/// Whether every kernel that reads lone product `group`'s result can sum
/// its partial products itself where it reads an element: kernels that
/// read each element a bounded number of times (element-wise ones, and
/// row reductions such as a layer norm's), not products, attention or
/// windows, which would sum the partials again at every reuse; and that
/// read it along its rows (ViT's patch convolution, read transposed, would
/// read every partial product a column at a time). The result must also
/// be stored in a buffer, not returned nor placed in a texture.
pub(super) fn consumers_sum_partials(m: &Module, group: &Group) -> bool {
    let [(inner, host)] = group.outputs[..] else {
        return false;
    };
    if group.op != group.anchor || inner != host {
        return false;
    }
    let mut values = vec![host];
    while let Some(v) = values.pop() {
        for u in &m.value(v).uses {
            let user = u.op;
            if ircc_dialects::index::ops::View::new(m, user).is_some() {
                values.extend(m.op(user).results.iter().copied());
                continue;
            }
            if GraphOp::of(m, user).is_none()
                || ircc_dialects::is_data(m, user)
                || !reads_along_rows(m, v)
            {
                return false;
            }
            let anchor = super::group::group_of(m, user).anchor;
            let cheap = match kind_of(m, anchor).0 {
                Kind::Row => true,
                Kind::Elementwise => GraphOp::of(m, anchor)
                    .is_some_and(|k| k.mapping() != Some(MappingType::ManyToMany)),
                Kind::Matmul | Kind::Attention | Kind::NonMaxSuppression => false,
            };
            if !cheap {
                return false;
            }
        }
    }
    true
}

/// Whether reading `v` (a stored tensor, or a view of one) along its last
/// axis reads the stored tensor's consecutive elements.
fn reads_along_rows(m: &Module, v: ValueId) -> bool {
    let (stored, map) = ircc_dialects::index::through_views(m, v);
    let Some(map) = map else {
        return true;
    };
    let (shape, stored_shape) = (shape_of(m, v), shape_of(m, stored));
    if shape.last().is_none_or(|&n| n < 2) {
        return true;
    }
    let offset = super::address::linearize(&map.results, &stored_shape);
    let mut next = vec![0; shape.len()];
    next[shape.len() - 1] = 1;
    match (
        offset.eval(&vec![0; shape.len()], &[]),
        offset.eval(&next, &[]),
    ) {
        (Ok(a), Ok(b)) => b - a == 1,
        _ => false,
    }
}
