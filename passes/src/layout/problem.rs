//! The layout problem of a host function (SmartMem §3.3): which tensors
//! are stored, the layouts each may take, and how each kernel reads them.
//!
//! A stored tensor is a function input or a result of a top-level compute
//! op (a fused group or a lone op). A kernel reads one through the views
//! above it; inside the kernel the value goes to ops that each state the
//! axis they want contiguous: an op with reduction dimensions in its spec
//! (matmul: k; conv: input channels; softmax, norms, reductions: the
//! reduced axes) wants those, innermost first, except a reduction that
//! `kernel.schedule` made a column one, which wants the axes it keeps
//! (its neighbouring invocations read along them); a one-to-one op wants what
//! its result's readers want, and a result the group writes out wants the
//! layout that output is given: a read that *follows* another tensor's
//! choice, the quadratic term of the problem. Other ops walk their output
//! row-major and want the last axis.

use std::collections::HashMap;

use ircc_core::builtin::FuncOp;
use ircc_core::registry::{MappingType, ReductionDims};
use ircc_core::{AffineMap, Attribute, BlockId, Module, OpId, Registry, ValueId};
use ircc_dialects::graph::{self, GraphOp};
use ircc_dialects::index::{self, source_axis};
use ircc_dialects::is_data;
use ircc_dialects::kernel::Schedule;
use ircc_dialects::texture::TextureLayout;

/// A layout a stored tensor may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Choice {
    /// A row-major buffer.
    Buffer,
    /// A 2.5D texture: `lanes` packed four to a texel, `contiguous` along x.
    Texture { lanes: usize, contiguous: usize },
}

/// What writes a stored tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writer {
    /// An element-wise kernel, one invocation per texel: it can write any
    /// texture layout.
    Texels,
    /// A tiled kernel that writes a row-major buffer; a texture layout
    /// costs a copy.
    Buffer,
    /// A kernel that writes texels of four neighbours along one axis of
    /// the tensor only: a tiled product's columns (it stages its results
    /// in workgroup memory), a row kernel's row (a softmax's or a norm's,
    /// along the one axis it reduces). A texture with its lanes along
    /// another axis costs a copy.
    TexelsAlong { axis: usize },
    /// The host (a function input).
    Host,
}

impl Writer {
    /// Whether the kernel writes the tensor in `choice` itself (no copy).
    pub fn writes(self, choice: Choice) -> bool {
        match (self, choice) {
            (_, Choice::Buffer) | (Writer::Texels, _) => true,
            (Writer::TexelsAlong { axis }, Choice::Texture { lanes, .. }) => lanes == axis,
            (Writer::Buffer | Writer::Host, Choice::Texture { .. }) => false,
        }
    }
}

pub struct Node {
    pub value: ValueId,
    pub shape: Vec<i64>,
    pub elem_bytes: i64,
    pub writer: Writer,
    /// `Buffer` first.
    pub choices: Vec<Choice>,
}

/// The axes a read wants contiguous, in the stored tensor's axes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Want {
    /// Fixed axes, the first most wanted (none: no preference).
    Axes(Vec<usize>),
    /// The fastest axis of node `output`'s layout, through `axes` (output
    /// axis -> axis of this tensor).
    Follow {
        output: usize,
        axes: Vec<Option<usize>>,
    },
}

pub struct Read {
    pub node: usize,
    /// The kernel that reads.
    pub consumer: OpId,
    /// Which operand of it.
    pub operand: usize,
    pub want: Want,
}

/// Whether a tensor of a shape may take the texture layout with lanes
/// and x axes, and which.
pub type Fits<'a> = &'a dyn Fn(&[i64], usize, usize) -> Option<TextureLayout>;

pub struct Problem {
    pub nodes: Vec<Node>,
    pub reads: Vec<Read>,
    pub index: HashMap<ValueId, usize>,
}

/// Wants of one value, in its own axes; a walk inside a group visits at
/// most this many values per read.
const MAX_WALK: usize = 256;

impl Problem {
    /// The problem of host function body `block`. `writer` says how a
    /// top-level op writes each of its results, `textures` whether a tensor may be
    /// placed in a texture at all, and `fits` whether a layout fits.
    pub fn extract(
        m: &Module,
        registry: &Registry,
        block: BlockId,
        writer: &dyn Fn(OpId, usize) -> Writer,
        fits: Fits,
    ) -> Problem {
        let mut p = Problem {
            nodes: Vec::new(),
            reads: Vec::new(),
            index: HashMap::new(),
        };
        for &arg in &m.blocks[block].args {
            p.add_node(m, arg, Writer::Host, false, fits);
        }
        let ops = m.blocks[block].ops.clone();
        let kernels: Vec<OpId> = ops
            .into_iter()
            .filter(|&op| GraphOp::of(m, op).is_some() && !is_data(m, op))
            .collect();
        for &op in &kernels {
            for (k, &r) in m.op(op).results.iter().enumerate() {
                let returned = m
                    .value(r)
                    .uses
                    .iter()
                    .any(|u| FuncOp::of(m, u.op) == Some(FuncOp::Return));
                p.add_node(m, r, writer(op, k), !returned, fits);
            }
        }
        for &op in &kernels {
            for (i, &host) in m.op(op).operands.iter().enumerate() {
                let (stored, map) = index::through_views(m, host);
                let Some(&node) = p.index.get(&stored) else {
                    continue;
                };
                let wants = operand_wants(m, registry, &p.index, op, i);
                for want in wants {
                    let want = match map.as_ref() {
                        Some(map) => to_source(&want, map),
                        None => want,
                    };
                    p.reads.push(Read {
                        node,
                        consumer: op,
                        operand: i,
                        want,
                    });
                }
            }
        }
        p
    }

    fn add_node(&mut self, m: &Module, v: ValueId, writer: Writer, may_texture: bool, fits: Fits) {
        let Some(t) = m.value_type(v).as_tensor() else {
            return;
        };
        let mut choices = vec![Choice::Buffer];
        if may_texture && t.elem.is_float() && writer != Writer::Host {
            let axes: Vec<usize> = (0..t.rank()).filter(|&a| t.shape[a] > 1).collect();
            for &lanes in &axes {
                for &contiguous in &axes {
                    if fits(&t.shape, lanes, contiguous).is_some() {
                        choices.push(Choice::Texture { lanes, contiguous });
                    }
                }
            }
        }
        self.index.insert(v, self.nodes.len());
        self.nodes.push(Node {
            value: v,
            shape: t.shape.clone(),
            elem_bytes: t.elem.byte_size() as i64,
            writer,
            choices,
        });
    }
}

/// A want in a view's result axes, in its source's axes.
fn to_source(want: &Want, map: &AffineMap) -> Want {
    match want {
        Want::Axes(axes) => {
            let mut out = Vec::new();
            for s in axes.iter().filter_map(|&a| source_axis(map, a)) {
                if !out.contains(&s) {
                    out.push(s);
                }
            }
            Want::Axes(out)
        }
        Want::Follow { output, axes } => Want::Follow {
            output: *output,
            axes: axes
                .iter()
                .map(|a| a.and_then(|a| source_axis(map, a)))
                .collect(),
        },
    }
}

/// A want in a one-to-one op's result axes, in its operand's (numpy
/// broadcasting aligns the trailing axes; a broadcast axis moves nothing).
fn to_operand(want: &Want, result: &[i64], operand: &[i64]) -> Want {
    let map = |a: usize| graph::shape::broadcast_source_axis(result, operand, a);
    match want {
        Want::Axes(axes) => Want::Axes(axes.iter().filter_map(|&a| map(a)).collect()),
        Want::Follow { output, axes } => Want::Follow {
            output: *output,
            axes: axes.iter().map(|a| a.and_then(map)).collect(),
        },
    }
}

fn shape(m: &Module, v: ValueId) -> Vec<i64> {
    m.value_type(v)
        .as_tensor()
        .map(|t| t.shape.clone())
        .unwrap_or_default()
}

/// What operand `i` of top-level kernel `op` wants.
fn operand_wants(
    m: &Module,
    registry: &Registry,
    nodes: &HashMap<ValueId, usize>,
    op: OpId,
    i: usize,
) -> Vec<Want> {
    let mut budget = MAX_WALK;
    if graph::ops::Fused::new(m, op).is_some() {
        let Some(block) = m.entry_block(op) else {
            return Vec::new();
        };
        let arg = m.blocks[block].args[i];
        return value_wants(m, registry, nodes, op, arg, &mut budget);
    }
    use_wants(m, registry, nodes, op, op, i, &mut budget)
}

/// What the readers of `v` (inside group `group`) want, in `v`'s axes.
fn value_wants(
    m: &Module,
    registry: &Registry,
    nodes: &HashMap<ValueId, usize>,
    group: OpId,
    v: ValueId,
    budget: &mut usize,
) -> Vec<Want> {
    let mut out = Vec::new();
    for u in &m.value(v).uses {
        if *budget == 0 {
            break;
        }
        *budget -= 1;
        let wants = use_wants(m, registry, nodes, group, u.op, u.index as usize, budget);
        for w in wants {
            if !out.contains(&w) {
                out.push(w);
            }
        }
    }
    out
}

/// What op `user` (inside `group`, or `group` itself) wants of its
/// operand `i`.
fn use_wants(
    m: &Module,
    registry: &Registry,
    nodes: &HashMap<ValueId, usize>,
    group: OpId,
    user: OpId,
    i: usize,
    budget: &mut usize,
) -> Vec<Want> {
    let o = m.op(user);
    let operand_shape = shape(m, o.operands[i]);
    let rank = operand_shape.len();
    if GraphOp::of(m, user) == Some(GraphOp::Yield) {
        let Some(&node) = m.op(group).results.get(i).and_then(|r| nodes.get(r)) else {
            return vec![Want::Axes(last_axis(rank))];
        };
        return vec![Want::Follow {
            output: node,
            axes: (0..rank).map(Some).collect(),
        }];
    }
    if let Some(view) = index::ops::View::new(m, user) {
        let map = view.map().clone();
        return value_wants(m, registry, nodes, group, o.results[0], budget)
            .iter()
            .map(|w| to_source(w, &map))
            .collect();
    }
    let Some(spec) = registry.get(&o.name).map(|d| &d.spec) else {
        return vec![Want::Axes(last_axis(rank))];
    };
    let name = spec.operands.get(i).map(|a| a.name.as_str());
    if let Some(dims) = name.and_then(|n| spec.reduction.get(n)) {
        let reduced = reduction_axes(m, user, dims, rank);
        // A column reduction's neighbouring invocations read along the
        // axes it keeps (those longer than one, innermost first).
        let anchor = match graph::ops::Fused::new(m, group) {
            Some(fused) => o.name == fused.anchor(),
            None => user == group,
        };
        if anchor && let Ok(Some(Schedule::Column(_))) = Schedule::of(m, group) {
            let kept = (0..rank)
                .rev()
                .filter(|&a| !reduced.contains(&a) && operand_shape[a] > 1);
            return vec![Want::Axes(kept.collect())];
        }
        return vec![Want::Axes(reduced)];
    }
    let pointwise = GraphOp::of(m, user).is_some_and(|k| {
        k == GraphOp::Identity
            || (k.mapping() == Some(MappingType::OneToOne) && k != GraphOp::BatchNorm)
    });
    if !pointwise || o.results.len() != 1 {
        return vec![Want::Axes(last_axis(rank))];
    }
    let result = o.results[0];
    let result_shape = shape(m, result);
    let wants = if user == group {
        match nodes.get(&result) {
            Some(&node) => vec![Want::Follow {
                output: node,
                axes: (0..result_shape.len()).map(Some).collect(),
            }],
            None => vec![Want::Axes(last_axis(result_shape.len()))],
        }
    } else {
        value_wants(m, registry, nodes, group, result, budget)
    };
    wants
        .iter()
        .map(|w| to_operand(w, &result_shape, &operand_shape))
        .collect()
}

fn last_axis(rank: usize) -> Vec<usize> {
    rank.checked_sub(1).into_iter().collect()
}

/// The reduced axes of an operand of `rank`, innermost first: fixed by
/// the spec, or from the op's axis (softmax: that axis; layer_norm: from
/// it to the last) or axes (absent: every axis).
fn reduction_axes(m: &Module, op: OpId, dims: &ReductionDims, rank: usize) -> Vec<usize> {
    let norm = |a: i64| if a < 0 { a + rank as i64 } else { a };
    let raw: Vec<i64> = match dims {
        ReductionDims::Fixed(d) => d.clone(),
        ReductionDims::FromAttr(name) => {
            if let Some(s) = graph::ops::Softmax::new(m, op) {
                vec![s.axis()]
            } else if let Some(l) = graph::ops::LayerNorm::new(m, op) {
                (norm(l.axis())..rank as i64).collect()
            } else {
                match m.op(op).attrs.get(name.as_str()) {
                    Some(Attribute::Int(a, _)) => vec![*a],
                    Some(Attribute::DenseI64Array(a)) => a.clone(),
                    _ => (0..rank as i64).collect(),
                }
            }
        }
    };
    let mut axes: Vec<usize> = raw
        .into_iter()
        .map(norm)
        .filter(|&a| (0..rank as i64).contains(&a))
        .map(|a| a as usize)
        .collect();
    axes.sort_unstable_by(|a, b| b.cmp(a));
    axes.dedup();
    axes
}
