//! The kernel templates (the matmul in `matmul.rs`, attention in
//! `attention.rs`, the row reduction and element-wise ones here) and the
//! host side: each kernel built for a group is run by a `kernel.launch`
//! that replaces the group's results.

use std::collections::{HashMap, HashSet};

use egg::Rewrite;
use ircc_core::ir::OpBuilder;
use ircc_core::pass::PassContext;
use ircc_core::{Attribute, ElemType, Module, OpId, Type, ValueId};
use ircc_dialects::graph::GraphOp;
use ircc_dialects::kernel::ops::{CmpPred, FuncTemplate, IdKind};
use ircc_dialects::kernel::{
    ColumnSchedule, CooperativeSchedule, DepthwiseSchedule, GroupedSchedule, KernelOp,
    MatmulSchedule, SCHEDULE_ATTR, Schedule,
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
use super::values::is_pointwise;
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
    /// The row template, in its column form where scheduled so.
    Row(Option<ColumnSchedule>),
    /// One of the attention templates, with its tiles.
    Attention(Schedule),
    Depthwise(DepthwiseSchedule),
    Grouped(GroupedSchedule),
    NonMaxSuppression,
}

impl Template {
    fn of(schedule: Schedule) -> Template {
        match schedule {
            Schedule::Elementwise => Template::Elementwise,
            Schedule::Row => Template::Row(None),
            Schedule::Column(s) => Template::Row(Some(s)),
            Schedule::Matmul(s) => Template::Matmul(s),
            Schedule::MatmulCooperative(s) => Template::Cooperative(s),
            Schedule::AttentionRows(_)
            | Schedule::AttentionTiled
            | Schedule::AttentionCooperative(_) => Template::Attention(schedule),
            Schedule::ConvDepthwise(s) => Template::Depthwise(s),
            Schedule::ConvGrouped(s) => Template::Grouped(s),
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
        Schedule::Row | Schedule::Column(_) => kind == Kind::Row,
        Schedule::Matmul(_) | Schedule::MatmulCooperative(_) => kind == Kind::Matmul,
        Schedule::AttentionRows(_)
        | Schedule::AttentionTiled
        | Schedule::AttentionCooperative(_) => kind == Kind::Attention,
        Schedule::ConvDepthwise(_) => {
            kind == Kind::Elementwise && super::depthwise::is_depthwise(m, group.anchor)
        }
        Schedule::ConvGrouped(_) => {
            kind == Kind::Elementwise && super::grouped::is_grouped(m, group.anchor)
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
            Template::Row(None),
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
/// kernel summing it, unless its readers sum it; a softmax's or layer
/// norm's row kernel, texels along the row ([`super::row::texel_axis`]);
/// any other template, rows of a buffer.
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
                Writer::TexelsAlong {
                    axis: column_axis(m, group.anchor),
                }
            } else {
                Writer::Buffer
            }
        }
        Schedule::Row => match super::row::texel_axis(m, group.anchor) {
            Some(axis) => Writer::TexelsAlong { axis },
            None => Writer::Buffer,
        },
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
        Template::Row(None) => super::row::texel_axis(m, group.anchor).is_some(),
        Template::Cooperative(s) => s.splits > 1,
        _ => false,
    };
    if !writes_texels && outputs.iter().any(in_texture) {
        return Err(
            "only element-wise kernels, tiled or split products and softmaxes' and norms' rows write textures, and this result is placed in one (texture.map copies such results first)"
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
            Template::Row(column) => super::row::lower(&mut kb, group.anchor, outputs, column)?,
            Template::NonMaxSuppression => super::nms::lower(&mut kb, group.anchor, outputs)?,
            Template::Attention(s) => attention::lower(&mut kb, group.anchor, outputs, s)?,
            Template::Depthwise(s) => super::depthwise::lower(&mut kb, group.anchor, outputs, s)?,
            Template::Grouped(s) => super::grouped::lower(&mut kb, group.anchor, outputs, s)?,
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
pub(super) fn below(kb: &mut KernelBuilder, i: &Ix, n: i64, always: bool) -> Option<ValueId> {
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
        write_texel(kb, outputs, &texel, lanes, extent, &mut |_, _| Ok(()))
    })?;
    kb.finish(
        [target().elementwise_workgroup, 1, 1],
        workgroups,
        FuncTemplate::ElementwiseTexels,
        None,
    );
    Ok(())
}

/// Writes the outputs at `texel`, an index into the texel grid of the
/// texture outputs, whose lanes run along axis `axis` of `extent`
/// elements: each lane's element is computed at its index (`at_lane`
/// first, where the caller computes it), texture outputs get the four as
/// one texel, buffer outputs one by one. Lanes past the end of the axis
/// hold zero.
pub(super) fn write_texel(
    kb: &mut KernelBuilder,
    outputs: &[(ValueId, ValueId)],
    texel: &[Ix],
    axis: usize,
    extent: i64,
    at_lane: &mut dyn FnMut(&mut KernelBuilder, &[Ix]) -> R<()>,
) -> R<()> {
    let mut texels: Vec<(ValueId, Vec<ValueId>)> = Vec::new();
    for lane in 0..LANES {
        let c = texel[axis].clone() * Ix::constant(LANES) + Ix::constant(lane);
        let inside = below(kb, &c, extent, extent % LANES == 0);
        let mut idx = texel.to_vec();
        // A padding lane computes at the last real index (and is then
        // replaced by zero): its loads stay inside their tensors, which
        // only Vulkan's robust buffer access would forgive.
        idx[axis] = match inside {
            Some(_) => kb.clamped(&c, extent),
            None => c,
        };
        at_lane(kb, &idx)?;
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
        let at = kb.textures[&host].texel(texel);
        kb.texture_store(lanes, memory, &at);
    }
    Ok(())
}
