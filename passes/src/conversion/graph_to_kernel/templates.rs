//! The kernel templates (the matmul in `matmul.rs`, attention in
//! `attention.rs`, the row reduction and element-wise ones here) and the
//! host side: each kernel built for a group is run by a `kernel.launch`
//! that replaces the group's results.

use std::collections::{HashMap, HashSet};

use egg::Rewrite;
use ircc_core::ir::OpBuilder;
use ircc_core::pass::PassContext;
use ircc_core::{Attribute, ElemType, Module, OpId, Type, ValueId};
use ircc_dialects::graph::{GraphOp, shape};
use ircc_dialects::kernel::builder::FuncBuilder;
use ircc_dialects::kernel::ops::{BinaryFn, CmpPred, FuncTemplate, IdKind, UnaryFn};
use ircc_dialects::kernel::{
    CooperativeSchedule, DepthwiseSchedule, KernelOp, MatmulSchedule, SCHEDULE_ATTR, Schedule,
};
use ircc_dialects::texture::{LANES, TextureLayout};

use super::attention;
use super::group::{Group, SplitProduct, group_of, resolve_input};
use super::lowering::{
    ArgRole, Input, Ix, KernelBuilder, SimplifyCache, delinearize, guarded, shape_of, short,
    store_outputs, target, tensor_shape,
};
use super::matmul::config_of;
use super::product::column_axis;
use super::schedule::{Kind, consumers_sum_partials, kind_of};
use super::values::{Reduction, is_pointwise};
use crate::index::simplify::{Idx, Ranges};
use crate::layout::problem::Writer;
use crate::tuning::SharedTuning;

type R<T> = Result<T, String>;

/// A template with the parameters its group's schedule gives.
#[derive(Clone, Copy)]
enum Template {
    Elementwise,
    Matmul(MatmulSchedule),
    Cooperative(CooperativeSchedule),
    Row,
    /// One of the attention templates, with its tiles.
    Attention(Schedule),
    Depthwise(DepthwiseSchedule),
    NonMaxSuppression,
}

impl Template {
    fn of(schedule: Schedule) -> Template {
        match schedule {
            Schedule::Elementwise => Template::Elementwise,
            Schedule::Row => Template::Row,
            Schedule::Matmul(s) => Template::Matmul(s),
            Schedule::MatmulCooperative(s) => Template::Cooperative(s),
            Schedule::AttentionRows(_)
            | Schedule::AttentionTiled
            | Schedule::AttentionCooperative(_) => Template::Attention(schedule),
            Schedule::ConvDepthwise(s) => Template::Depthwise(s),
            Schedule::NonMaxSuppression => Template::NonMaxSuppression,
        }
    }
}

/// Whether the op computes each element from the same index of its operands.
fn is_pointwise_op(m: &Module, op: OpId) -> bool {
    GraphOp::of(m, op).is_some_and(|k| k == GraphOp::Identity || is_pointwise(k))
}

/// What lowering a function's groups shares: the simplifier, the
/// precision, the kernel counter and where tensors live.
pub(crate) struct Lowering<'a> {
    pub ctx: &'a PassContext<'a>,
    pub rules: &'a [Rewrite<Idx, Ranges>],
    pub cache: &'a SimplifyCache,
    pub float: ElemType,
    pub counter: usize,
    /// Host tensors placed in textures (by texture.map), by layout.
    pub textures: HashMap<ValueId, TextureLayout>,
    /// Products split along K, by result: their partial products, which
    /// kernels read as the sum over the first axis, then the epilogue.
    pub split: HashMap<ValueId, SplitProduct>,
    /// The tuned parameters products take, and where the tunable kernels
    /// lowered are recorded.
    pub tuning: Option<SharedTuning>,
}

/// Lowers `group` to kernels. Returns whether the group's op must stay
/// until its consumers are lowered: a lone product split along K whose
/// consumers sum its partials themselves (and compute its epilogue from
/// the op's operands), so that no kernel of its own does.
pub(crate) fn lower_group(
    m: &mut Module,
    lowering: &mut Lowering,
    group: &Group,
    schedule: Schedule,
) -> R<bool> {
    let template = Template::of(schedule);
    let (kind, space) = kind_of(m, group.anchor);
    // Any op computes element by element; the other templates compute
    // only the anchors kernel.schedule gives them.
    let fits = match schedule {
        Schedule::Elementwise => true,
        Schedule::Row => kind == Kind::Row,
        Schedule::Matmul(_) | Schedule::MatmulCooperative(_) => kind == Kind::Matmul,
        Schedule::AttentionRows(_)
        | Schedule::AttentionTiled
        | Schedule::AttentionCooperative(_) => kind == Kind::Attention,
        Schedule::ConvDepthwise(_) => {
            kind == Kind::Elementwise && super::depthwise::is_depthwise(m, group.anchor)
        }
        Schedule::NonMaxSuppression => kind == Kind::NonMaxSuppression,
    };
    if !fits {
        let chosen = match kind {
            Kind::Elementwise => "elementwise",
            Kind::Matmul => "matmul",
            Kind::Row => "row",
            Kind::Attention => "attention_rows, attention_tiled or attention_cooperative",
            Kind::NonMaxSuppression => "nms",
        };
        return Err(format!(
            "its {SCHEDULE_ATTR} names the {} template, which does not compute it (its shapes, types or attributes take {chosen})",
            schedule.template()
        ));
    }
    let sum_in_consumers = match template {
        Template::Matmul(s) => s.sum_in_consumers,
        Template::Cooperative(s) => s.sum_in_consumers,
        _ => false,
    };
    if sum_in_consumers && !consumers_sum_partials(m, group) {
        return Err(format!(
            "its {SCHEDULE_ATTR} has its readers sum its partial products, which they cannot (run kernel.schedule again after changing them)"
        ));
    }
    let anchor_result = m.op(group.anchor).results[0];
    let (mut primary, mut rest): (Vec<_>, Vec<_>) = group
        .outputs
        .iter()
        .copied()
        .partition(|&(inner, _)| computed_by_template(m, group, &space, inner));
    let mut group_inputs = group.bindings.clone();
    // Outputs outside the anchor's iteration space that need the anchor (a
    // matmul read back through a view) read it from memory: the template
    // stores it, so no kernel recomputes it per element.
    let needs_anchor = rest
        .iter()
        .any(|&(inner, _)| depends_on(m, inner, anchor_result));
    if needs_anchor && !primary.iter().any(|&(inner, _)| inner == anchor_result) {
        primary.push((anchor_result, anchor_result));
    }
    // A product whose schedule does not normalize its rows (kernel.schedule
    // decides), and one on the matrix units (whose short K walk the
    // moments' walk would double, as measured on the H100), leave their
    // normalization a row kernel of its own, whose result they read.
    let own_kernel = match template {
        Template::Matmul(s) => !s.normalizes,
        _ => true,
    };
    if own_kernel && let Some(norm) = super::prologue::normalization(m, group) {
        let normalized = m.op(norm).results[0];
        let own = Group {
            op: group.op,
            anchor: norm,
            bindings: group_inputs.clone(),
            outputs: vec![(normalized, normalized)],
        };
        let built = build(
            m,
            lowering,
            &group_inputs,
            &own,
            Template::Row,
            &own.outputs,
        )?;
        for (_, r) in built.replaced {
            group_inputs.push((normalized, r));
            group_inputs.push((r, r));
        }
    }
    if !primary.is_empty() {
        let mut built = build(m, lowering, &group_inputs, group, template, &primary)?;
        if let Some(partials) = built.partials {
            let anchor = group.anchor;
            lowering
                .split
                .insert(anchor_result, SplitProduct { partials, anchor });
            if sum_in_consumers {
                return Ok(true);
            }
            // An element-wise kernel sums the partial products and
            // computes the outputs from them (timed with the product when
            // tuning).
            group_inputs.push((anchor_result, anchor_result));
            let key = built.tuning_key.take();
            let counter = lowering.counter;
            built = build(
                m,
                lowering,
                &group_inputs,
                group,
                Template::Elementwise,
                &primary,
            )?;
            if let (Some(key), Some(tuning)) = (key, &lowering.tuning) {
                let name = format!("k{counter}_{}", short(m, group.anchor));
                record_kernel(tuning, &key, &name);
            }
        }
        for (host, r) in built.replaced {
            let inner = primary.iter().find(|&&(_, h)| h == host).map(|&(i, _)| i);
            if inner == Some(anchor_result) {
                group_inputs.push((anchor_result, r));
                group_inputs.push((r, r));
            }
        }
    }
    while !rest.is_empty() {
        let first = shape_of(m, rest[0].0);
        let (same, other): (Vec<_>, Vec<_>) = rest
            .into_iter()
            .partition(|&(inner, _)| shape_of(m, inner) == first);
        build(
            m,
            lowering,
            &group_inputs,
            group,
            Template::Elementwise,
            &same,
        )?;
        rest = other;
    }
    Ok(false)
}

/// Whether the template of `group` (whose anchor iterates over `space`)
/// computes its output `inner`; the others get element-wise kernels. The
/// template computes the outputs that read the anchor at their own index.
/// An output that reads it elsewhere (Swin's roll of a layer_norm: four
/// shifted pieces) would recompute a whole row or dot product per element,
/// so it reads the stored anchor instead.
fn computed_by_template(m: &Module, group: &Group, space: &[i64], inner: ValueId) -> bool {
    let costly_anchor = !GraphOp::of(m, group.anchor).is_some_and(is_pointwise);
    let anchor_result = m.op(group.anchor).results[0];
    shape_of(m, inner) == space && (!costly_anchor || reads_in_place(m, inner, anchor_result))
}

/// How the kernels lowering top-level op `op` write its result `k`, for
/// the texture level: an element-wise kernel writes any texture layout; a
/// tiled product unsplit, texels along its columns (where its tiles and
/// staging allow); a product split along K, through the element-wise
/// kernel summing it, unless its readers sum it; any other template, rows
/// of a buffer.
pub(crate) fn result_writer(m: &Module, op: OpId, k: usize) -> Writer {
    let Ok(Some(schedule)) = Schedule::of(m, op) else {
        return Writer::Buffer;
    };
    let group = group_of(m, op);
    let Some(&(inner, _)) = group.outputs.get(k) else {
        return Writer::Buffer;
    };
    let (_, space) = kind_of(m, group.anchor);
    if !computed_by_template(m, &group, &space, inner) {
        return Writer::Texels;
    }
    match schedule {
        Schedule::Elementwise => Writer::Texels,
        Schedule::Matmul(s) if s.splits > 1 && !s.sum_in_consumers => Writer::Texels,
        Schedule::MatmulCooperative(s) if s.splits > 1 && !s.sum_in_consumers => Writer::Texels,
        Schedule::Matmul(s) => {
            let results = group
                .outputs
                .iter()
                .filter(|&&(inner, _)| computed_by_template(m, &group, &space, inner))
                .count();
            let config = config_of(&s);
            let moments = if s.normalizes {
                super::prologue::moments_words(config.tile_m(), config.invocations())
            } else {
                0
            };
            if config.writes_texels(results, moments, target()) {
                Writer::Product {
                    columns: column_axis(m, group.anchor),
                }
            } else {
                Writer::Buffer
            }
        }
        _ => Writer::Buffer,
    }
}

/// What building a group's kernel gave: the launch results that replaced
/// the host values written, and the partial products where the kernel
/// computed only those (a product split along K).
#[derive(Default)]
struct Built {
    replaced: Vec<(ValueId, ValueId)>,
    partials: Option<ValueId>,
    /// The tuning signature of a product's kernel.
    tuning_key: Option<String>,
}

fn build(
    m: &mut Module,
    lowering: &mut Lowering,
    bindings: &[(ValueId, ValueId)],
    group: &Group,
    template: Template,
    outputs: &[(ValueId, ValueId)],
) -> R<Built> {
    let in_texture = |&(_, host): &(ValueId, ValueId)| lowering.textures.contains_key(&host);
    // A split product writes its partials, and the kernel summing them
    // the results.
    let writes_texels = match &template {
        Template::Elementwise | Template::Matmul(_) => true,
        Template::Cooperative(s) => s.splits > 1,
        _ => false,
    };
    if !writes_texels && outputs.iter().any(in_texture) {
        return Err(
            "only element-wise kernels and tiled or split products write textures, and this result is placed in one (texture.map copies such results first)"
                .to_string(),
        );
    }
    // The four lanes of a texel come from one invocation, so outputs with
    // different lane axes get kernels of their own.
    let lanes_of =
        |&(_, host): &(ValueId, ValueId)| lowering.textures.get(&host).map(|l| l.lanes());
    if let Some(first) = outputs.iter().find_map(lanes_of) {
        let (same, other): (Vec<_>, Vec<_>) = outputs
            .iter()
            .copied()
            .partition(|o| lanes_of(o).is_none_or(|l| l == first));
        if !other.is_empty() {
            let mut built = build(m, lowering, bindings, group, Template::Elementwise, &same)?;
            let other = build(m, lowering, bindings, group, Template::Elementwise, &other)?;
            built.replaced.extend(other.replaced);
            return Ok(built);
        }
    }
    let name = format!("k{}_{}", lowering.counter, short(m, group.anchor));
    lowering.counter += 1;
    let mut inputs: Vec<(ValueId, Input)> = bindings
        .iter()
        .map(|&(inner, host)| (inner, resolve_input(m, &lowering.split, host)))
        .collect();
    // Another group's lone product, whose partials this kernel sums,
    // computes its epilogue (gemm's C, a convolution's bias) from its own
    // operands, host values; this group's product reads its bound ones.
    let epilogue_operands: Vec<ValueId> = inputs
        .iter()
        .filter_map(|(_, input)| match input {
            Input::Partials { anchor, .. } if *anchor != group.anchor => {
                Some(m.op(*anchor).operands.clone())
            }
            _ => None,
        })
        .flatten()
        .collect();
    for v in epilogue_operands {
        inputs.push((v, resolve_input(m, &lowering.split, v)));
    }
    // The layouts of the textures this kernel reads and writes.
    let stored = inputs.iter().filter_map(|(_, input)| match input {
        Input::Memory { stored, .. } => Some(*stored),
        Input::Partials { .. } | Input::Splat(_) => None,
    });
    let textures: HashMap<ValueId, TextureLayout> = stored
        .chain(outputs.iter().map(|&(_, host)| host))
        .filter_map(|v| Some((v, lowering.textures.get(&v)?.clone())))
        .collect();
    let mut tuning_key = None;
    let (args, partials_type) = {
        let mut kb = KernelBuilder::new(
            m,
            lowering.ctx,
            lowering.rules,
            lowering.cache,
            &name,
            lowering.float,
        );
        kb.inputs = inputs.into_iter().collect();
        kb.textures = textures.clone();
        match template {
            Template::Elementwise => elementwise(&mut kb, outputs)?,
            Template::Matmul(schedule) => {
                tuning_key = Some(super::matmul::matmul(
                    &mut kb,
                    group.anchor,
                    outputs,
                    lowering.tuning.as_ref(),
                    schedule,
                )?);
            }
            Template::Cooperative(schedule) => {
                super::cooperative::lower(&mut kb, group.anchor, outputs, schedule)?
            }
            Template::Row => row(&mut kb, group.anchor, outputs)?,
            Template::NonMaxSuppression => super::nms::lower(&mut kb, group.anchor, outputs)?,
            Template::Attention(s) => attention::lower(&mut kb, group.anchor, outputs, s)?,
            Template::Depthwise(s) => super::depthwise::lower(&mut kb, group.anchor, outputs, s)?,
        }
        (kb.args.clone(), kb.partials.clone())
    };
    let func = m.lookup_symbol(&name).ok_or("the kernel vanished")?;
    let entry = m.entry_block(func).ok_or("the kernel has no body")?;
    let order = m.blocks[entry].args.clone();
    let role = |a: ValueId| args.iter().find(|(x, _)| *x == a).map(|(_, r)| *r);
    let mut launch_inputs = Vec::new();
    let mut launch_outputs = Vec::new();
    for a in order {
        match role(a) {
            Some(ArgRole::Input(h)) => launch_inputs.push(h),
            Some(ArgRole::Output(h)) => launch_outputs.push(Some(h)),
            Some(ArgRole::Partials) => launch_outputs.push(None),
            None => return Err("a kernel argument without a role".to_string()),
        }
    }
    let types = launch_outputs
        .iter()
        .map(|h| match h {
            Some(h) => Ok(m.value_type(*h).clone()),
            None => partials_type
                .clone()
                .ok_or("partial products without a type"),
        })
        .collect::<Result<Vec<Type>, _>>()?;
    let launch = m.create_op(
        OpBuilder::new(KernelOp::Launch.name())
            .operands(launch_inputs)
            .attr("kernel", Attribute::SymbolRef(vec![name.clone()]))
            .results(types)
            .loc(m.op(group.op).loc.clone()),
    );
    m.insert_before(group.op, launch);
    let mut built = Built::default();
    if let (Some(key), Some(tuning)) = (&tuning_key, &lowering.tuning) {
        record_kernel(tuning, key, &name);
        if let Some(t) = tuning.borrow_mut().seen.get_mut(key) {
            t.ops.push(group.op);
        }
    }
    built.tuning_key = tuning_key;
    for (i, h) in launch_outputs.into_iter().enumerate() {
        let r = m.op(launch).results[i];
        let Some(h) = h else {
            built.partials = Some(r);
            continue;
        };
        m.replace_all_uses(h, r);
        built.replaced.push((h, r));
        if let Some(layout) = textures.get(&h) {
            lowering.textures.insert(r, layout.clone());
        }
    }
    Ok(built)
}

/// Notes that kernel `name` is (part of) the product of signature `key`.
fn record_kernel(tuning: &SharedTuning, key: &str, name: &str) {
    if let Some(t) = tuning.borrow_mut().seen.get_mut(key) {
        t.kernels.push(name.to_string());
    }
}

/// Whether `v` is computed from `target` within its group.
fn depends_on(m: &Module, v: ValueId, target: ValueId) -> bool {
    let mut stack = vec![v];
    let mut seen = HashSet::new();
    while let Some(x) = stack.pop() {
        if x == target {
            return true;
        }
        if !seen.insert(x) {
            continue;
        }
        if let Some(op) = m.defining_op(x) {
            stack.extend(m.op(op).operands.iter().copied());
        }
    }
    false
}

/// Whether `v` reads `anchor` only at its own index: through pointwise ops
/// whose operands that need the anchor have the result's shape.
fn reads_in_place(m: &Module, v: ValueId, anchor: ValueId) -> bool {
    if v == anchor || !depends_on(m, v, anchor) {
        return true;
    }
    let Some(op) = m.defining_op(v) else {
        return true;
    };
    is_pointwise_op(m, op)
        && m.op(op).operands.iter().all(|&x| {
            !depends_on(m, x, anchor)
                || (shape_of(m, x) == shape_of(m, v) && reads_in_place(m, x, anchor))
        })
}

/// `i < n` as a flag, or `None` when it always holds.
fn below(kb: &mut KernelBuilder, i: &Ix, n: i64, always: bool) -> Option<ValueId> {
    (!always).then(|| kb.index_cmp(CmpPred::Lt, i, n))
}

/// Invocation `i` of `n`, in workgroups of the target's element-wise size along x (spilling
/// into y past the grid's limit), the guard `i < n` where the grid
/// overshoots, and the grid.
fn flat_invocation(kb: &mut KernelBuilder, n: i64) -> (Ix, Option<ValueId>, [i64; 3]) {
    let groups = (n + target().elementwise_workgroup - 1) / target().elementwise_workgroup;
    let gx = groups.min(target().max_workgroups_per_dimension);
    let gy = (groups + gx - 1) / gx;
    let x = kb.id(IdKind::Global, 0, gx * target().elementwise_workgroup);
    let i = if gy > 1 {
        let y = kb.id(IdKind::Workgroup, 1, gy);
        x + y * Ix::constant(gx * target().elementwise_workgroup)
    } else {
        x
    };
    let cond = below(kb, &i, n, gx * gy * target().elementwise_workgroup == n);
    (i, cond, [gx, gy, 1])
}

/// One invocation per element of the outputs' common shape, or per texel
/// when an output lives in a texture.
fn elementwise(kb: &mut KernelBuilder, outputs: &[(ValueId, ValueId)]) -> R<()> {
    let space = tensor_shape(kb, outputs[0].0);
    if outputs
        .iter()
        .any(|(_, host)| kb.textures.contains_key(host))
    {
        return elementwise_texels(kb, outputs, &space);
    }
    let n: i64 = space.iter().product::<i64>().max(1);
    let (i, cond, grid) = flat_invocation(kb, n);
    let idx = delinearize(&i, &space);
    guarded(kb, cond, &mut |kb| store_outputs(kb, outputs, &idx))?;
    kb.finish(
        [target().elementwise_workgroup, 1, 1],
        grid,
        FuncTemplate::Elementwise,
        None,
    );
    Ok(())
}

/// A texel is written whole, so each invocation computes the four
/// elements of one texel (along the last axis): texture outputs get them
/// as one texel, buffer outputs one by one. Lanes past the end of the
/// axis hold zero.
fn elementwise_texels(
    kb: &mut KernelBuilder,
    outputs: &[(ValueId, ValueId)],
    space: &[i64],
) -> R<()> {
    let layout = outputs
        .iter()
        .find_map(|(_, host)| kb.textures.get(host))
        .cloned()
        .ok_or("no output lives in a texture")?;
    if layout.shape() != space {
        return Err("a texture output's shape is not the kernel's".to_string());
    }
    // Invocations walk the texel grid with the x axis innermost, so
    // neighbouring invocations write neighbouring texels.
    let (lanes, along) = (layout.lanes(), layout.contiguous());
    let grid = layout.texel_grid().to_vec();
    let order: Vec<usize> = (0..grid.len())
        .filter(|&a| a != along)
        .chain([along])
        .collect();
    let ordered: Vec<i64> = order.iter().map(|&a| grid[a]).collect();
    let (i, cond, workgroups) = flat_invocation(kb, ordered.iter().product());
    let at = delinearize(&i, &ordered);
    let mut texel = vec![Ix::constant(0); grid.len()];
    for (k, &a) in order.iter().enumerate() {
        texel[a] = at[k].clone();
    }
    let extent = space[lanes];
    guarded(kb, cond, &mut |kb| {
        let mut texels: Vec<(ValueId, Vec<ValueId>)> = Vec::new();
        for lane in 0..LANES {
            let c = texel[lanes].clone() * Ix::constant(LANES) + Ix::constant(lane);
            let inside = below(kb, &c, extent, extent % LANES == 0);
            let mut idx = texel.clone();
            // A padding lane computes at the last real index (and is then
            // replaced by zero): its loads stay inside their tensors, which
            // only Vulkan's robust buffer access would forgive.
            idx[lanes] = match inside {
                Some(_) => {
                    let at = kb.apply(&c);
                    let last = kb.ir.index_const(extent - 1);
                    let clamped = kb.ir.binary(BinaryFn::Min, at, last);
                    kb.var(clamped, extent)
                }
                None => c,
            };
            for &(inner, host) in outputs {
                if !kb.textures.contains_key(&host) {
                    guarded(kb, inside, &mut |kb| {
                        store_outputs(kb, &[(inner, host)], &idx)
                    })?;
                    continue;
                }
                let v = kb.value_at(inner, &idx)?;
                let v = kb.ir.cast(v, Type::Scalar(kb.float));
                let v = match inside {
                    Some(flag) => {
                        let zero = kb.ir.constant(0.0, kb.float);
                        kb.ir.select(flag, v, zero)
                    }
                    None => v,
                };
                match texels.iter_mut().find(|(h, _)| *h == host) {
                    Some((_, lanes)) => lanes.push(v),
                    None => texels.push((host, vec![v])),
                }
            }
        }
        for (host, lanes) in texels {
            let memory = kb.arg(ArgRole::Output(host));
            let lanes: [ValueId; 4] = lanes.try_into().map_err(|_| "a texel has four lanes")?;
            let at = kb.textures[&host].texel(&texel);
            kb.texture_store(lanes, memory, &at);
        }
        Ok(())
    })?;
    kb.finish(
        [target().elementwise_workgroup, 1, 1],
        workgroups,
        FuncTemplate::ElementwiseTexels,
        None,
    );
    Ok(())
}

/// How a row pass folds a value into its accumulator.
type Combine<'a> = &'a dyn Fn(&mut FuncBuilder, ValueId, ValueId) -> ValueId;

/// What a row pass does at one element of the invocation's (its index in
/// the row), given and giving the values it carries.
type ElementStep<'a> = &'a mut dyn FnMut(&mut KernelBuilder, Ix, &[ValueId]) -> R<Vec<ValueId>>;

/// Partials one invocation combines at each level of a row's tree: a
/// level costs a barrier, which the workgroup waits on, while the reads of
/// workgroup memory it adds go out together (256 invocations take 2
/// levels, not the 8 of a halving tree).
const TREE_FAN_IN: i64 = 16;

/// Elements an invocation holds of its row, at most: a row that gives
/// each invocation no more is read from memory once, into registers,
/// which every pass over it and the write read again; a longer one is
/// read by each pass.
const ROW_REGISTER_STEPS: i64 = 8;

/// `f` of the `partial` (f32) of the `threads` invocations of one row,
/// through a tree in workgroup memory from `base`; each gets the result.
fn workgroup_reduce(
    kb: &mut KernelBuilder,
    partial: ValueId,
    f: Combine,
    t: &Ix,
    threads: i64,
    shared: ValueId,
    base: &Ix,
) -> R<ValueId> {
    kb.store(partial, shared, &(base.clone() + t.clone()));
    kb.ir.barrier();
    let mut n = threads;
    while n > 1 {
        // The most partials up to the fan-in that share the level's out
        // evenly.
        let fan = (2..=n.min(TREE_FAN_IN))
            .rev()
            .find(|f| n % f == 0)
            .unwrap_or(n);
        let stride = n / fan;
        let active = kb.index_cmp(CmpPred::Lt, t, stride);
        kb.if_then(active, &mut |kb| {
            let mut x = kb.load(shared, &(base.clone() + t.clone()));
            for i in 1..fan {
                let at = base.clone() + t.clone() + Ix::constant(i * stride);
                let y = kb.load(shared, &at);
                x = f(&mut kb.ir, x, y);
            }
            kb.store(x, shared, &(base.clone() + t.clone()));
            Ok(())
        })?;
        kb.ir.barrier();
        n = stride;
    }
    let r = kb.load(shared, base);
    kb.ir.barrier();
    Ok(r)
}

/// A softmax, normalization or reduction: `threads` invocations per row,
/// one or more rows per workgroup.
fn row(kb: &mut KernelBuilder, anchor: OpId, outputs: &[(ValueId, ValueId)]) -> R<()> {
    let kind = GraphOp::of(kb.m(), anchor).ok_or("a graph op anchors a row")?;
    let x = kb.m().op(anchor).operands[0];
    let y = kb.m().op(anchor).results[0];
    let sx = tensor_shape(kb, x);
    let view = kb
        .ctx
        .registry
        .view(kb.m(), anchor)
        .ok_or("unregistered anchor")?;
    let (axes, keep): (Vec<usize>, bool) = match kind {
        GraphOp::Softmax => (vec![shape::axis(view.i64("axis")?, sx.len())?], true),
        GraphOp::GlobalAveragePool => ((2..sx.len()).collect(), true),
        GraphOp::LayerNorm | GraphOp::InstanceNorm => {
            (kb.norm_axes(anchor, kind == GraphOp::LayerNorm)?, true)
        }
        _ => (
            shape::reduce_axes(&view, sx.len())?,
            view.i64("keepdims")? != 0,
        ),
    };
    let kept: Vec<usize> = (0..sx.len()).filter(|d| !axes.contains(d)).collect();
    let kept_shape: Vec<i64> = kept.iter().map(|&d| sx[d]).collect();
    let red_shape: Vec<i64> = axes.iter().map(|&d| sx[d]).collect();
    let rows: i64 = kept_shape.iter().product();
    let len: i64 = red_shape.iter().product();
    if rows > target().max_workgroups_per_dimension * target().max_workgroups_per_dimension {
        return Err(format!("{rows} rows exceed the grid"));
    }
    // A row gets the next power of two of its length in invocations, and
    // short rows share a workgroup: a group of 256 takes 16 rows of 16
    // (ConvNeXt's first stage) instead of leaving 240 invocations idle.
    // Rows per group divide the row count, so the guard stays uniform.
    let most = target().row_max_threads;
    let threads = (len as u64).next_power_of_two().clamp(8, most as u64) as i64;
    let mut per_group = 1;
    while per_group * 2 * threads <= most && rows % (per_group * 2) == 0 {
        per_group *= 2;
    }
    let groups = rows / per_group;
    let gx = groups.min(target().max_workgroups_per_dimension);
    let gy = (groups + gx - 1) / gx;
    let t = kb.id(IdKind::Local, 0, threads);
    let lane_row = if per_group > 1 {
        kb.id(IdKind::Local, 1, per_group)
    } else {
        Ix::constant(0)
    };
    let wx = kb.id(IdKind::Workgroup, 0, gx);
    let group_ix = if gy > 1 {
        let wy = kb.id(IdKind::Workgroup, 1, gy);
        wx + wy * Ix::constant(gx)
    } else {
        wx
    };
    let row_cond = below(kb, &group_ix, groups, gx * gy == groups);
    let row_ix = group_ix * Ix::constant(per_group) + lane_row.clone();
    let base = lane_row * Ix::constant(threads);
    let kept_idx = delinearize(&row_ix, &kept_shape);
    let reduced = axes.clone();
    let rank = sx.len();
    let full = move |r: &Ix| -> Vec<Ix> {
        let red_idx = delinearize(r, &red_shape);
        let (mut ki, mut ri) = (kept_idx.iter(), red_idx.iter());
        (0..sx.len())
            .map(|d| {
                if axes.contains(&d) {
                    ri.next().cloned()
                } else {
                    ki.next().cloned()
                }
                .unwrap_or(Ix::constant(0))
            })
            .collect()
    };
    let shared = kb.ir.alloc(threads * per_group, ElemType::F32);
    let steps = (len + threads - 1) / threads;
    let exact = len % threads == 0;
    // Each pass visits the invocation's elements of the row in a loop,
    // or where the row is held in registers unrolled, at indices every
    // pass writes alike: later passes find the elements the first read
    // (and their fused producers computed) in the memo.
    let in_registers = steps <= ROW_REGISTER_STEPS;
    let each_element =
        |kb: &mut KernelBuilder, carried: Vec<ValueId>, body: ElementStep| -> R<Vec<ValueId>> {
            if !in_registers {
                return kb.for_loop(steps, carried, &mut |kb, j, c| {
                    body(kb, j * Ix::constant(threads) + t.clone(), c)
                });
            }
            (0..steps).try_fold(carried, |c, j| {
                body(kb, Ix::constant(j * threads) + t.clone(), &c)
            })
        };
    // One pass over the row: `combine(acc, x)` of every element, then
    // across the workgroup.
    let pass = |kb: &mut KernelBuilder,
                init: f64,
                f: Combine,
                term: &mut dyn FnMut(&mut KernelBuilder, ValueId) -> ValueId|
     -> R<ValueId> {
        let init_v = kb.ir.constant(init, ElemType::F32);
        let acc = each_element(kb, vec![init_v], &mut |kb, r, acc| {
            let v = kb.value_at(x, &full(&r))?;
            let v = kb.ir.cast(v, Type::Scalar(ElemType::F32));
            let v = term(kb, v);
            let merged = f(&mut kb.ir, acc[0], v);
            Ok(vec![match below(kb, &r, len, exact) {
                Some(inside) => kb.ir.select(inside, merged, acc[0]),
                None => merged,
            }])
        })?[0];
        workgroup_reduce(kb, acc, f, &t, threads, shared, &base)
    };
    let float = kb.float;
    let write_rows = |kb: &mut KernelBuilder,
                      value: &mut dyn FnMut(&mut KernelBuilder, &[Ix]) -> R<ValueId>|
     -> R<()> {
        each_element(kb, Vec::new(), &mut |kb, r, _| {
            let idx = full(&r);
            let cond = below(kb, &r, len, exact);
            guarded(kb, cond, &mut |kb| {
                let v = value(kb, &idx)?;
                kb.memo_put(y, &idx, v);
                store_outputs(kb, outputs, &idx)
            })?;
            Ok(Vec::new())
        })?;
        Ok(())
    };
    let add = |ir: &mut FuncBuilder, a, b| ir.binary(BinaryFn::Add, a, b);
    let mut body = |kb: &mut KernelBuilder| -> R<()> {
        match kind {
            GraphOp::Softmax => {
                // The maximum number: a NaN in the row makes every
                // exp(x - max), and so the whole row, NaN either way.
                let max_number = |ir: &mut FuncBuilder, a, b| ir.binary(BinaryFn::Max, a, b);
                let max = pass(kb, f64::NEG_INFINITY, &max_number, &mut |_, v| v)?;
                let sum = pass(kb, 0.0, &add, &mut |kb, v| {
                    let d = kb.ir.binary(BinaryFn::Sub, v, max);
                    kb.ir.unary(UnaryFn::Exp, d)
                })?;
                write_rows(kb, &mut |kb, idx| {
                    let v = kb.value_at(x, idx)?;
                    let v = kb.ir.cast(v, Type::Scalar(ElemType::F32));
                    let d = kb.ir.binary(BinaryFn::Sub, v, max);
                    let e = kb.ir.unary(UnaryFn::Exp, d);
                    let q = kb.ir.binary(BinaryFn::Div, e, sum);
                    Ok(kb.ir.cast(q, Type::Scalar(float)))
                })
            }
            GraphOp::LayerNorm | GraphOp::InstanceNorm => {
                let n = len as f64;
                let total = pass(kb, 0.0, &add, &mut |_, v| v)?;
                let count = kb.ir.constant(n, ElemType::F32);
                let mean = kb.ir.binary(BinaryFn::Div, total, count);
                let squares = pass(kb, 0.0, &add, &mut |kb, v| {
                    let d = kb.ir.binary(BinaryFn::Sub, v, mean);
                    kb.ir.binary(BinaryFn::Mul, d, d)
                })?;
                let var = kb.ir.binary(BinaryFn::Div, squares, count);
                let eps = kb
                    .ctx
                    .registry
                    .view(kb.m(), anchor)
                    .ok_or("unregistered anchor")?
                    .f64("epsilon")?;
                let e = kb.ir.constant(eps, ElemType::F32);
                let var = kb.ir.binary(BinaryFn::Add, var, e);
                let inv = kb.ir.unary(UnaryFn::Rsqrt, var);
                let layer = kind == GraphOp::LayerNorm;
                write_rows(kb, &mut |kb, idx| {
                    kb.normalized(anchor, layer, idx, mean, inv)
                })
            }
            reduce => {
                let reduction = Reduction::of(reduce).ok_or("a row reduction")?;
                let combine = |ir: &mut FuncBuilder, a, b| reduction.combine(ir, a, b);
                let mut r = pass(kb, reduction.init(), &combine, &mut |_, v| v)?;
                if reduction == Reduction::Mean {
                    let n = kb.ir.constant(len as f64, ElemType::F32);
                    r = kb.ir.binary(BinaryFn::Div, r, n);
                }
                let r = kb.ir.cast(r, Type::Scalar(float));
                let first = kb.index_cmp(CmpPred::Lt, &t, 1);
                let out_idx: Vec<Ix> = {
                    let zero = Ix::constant(0);
                    let all = full(&zero);
                    (0..rank)
                        .filter(|d| keep || !reduced.contains(d))
                        .map(|d| all[d].clone())
                        .collect()
                };
                kb.if_then(first, &mut |kb| {
                    kb.memo_put(y, &out_idx, r);
                    store_outputs(kb, outputs, &out_idx)
                })
            }
        }
    };
    guarded(kb, row_cond, &mut body)?;
    kb.finish(
        [threads, per_group, 1],
        [gx, gy, 1],
        FuncTemplate::RowReduction,
        None,
    );
    Ok(())
}
