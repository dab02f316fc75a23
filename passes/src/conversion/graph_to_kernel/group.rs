//! What a group lowers from: its anchor, its operands bound to host
//! values, its outputs, and how each input is read (through views, or as
//! a splat folded into the code).

use std::collections::HashMap;

use ircc_core::pass::PassContext;
use ircc_core::{AffineMap, Module, OpId, ValueId};
use ircc_dialects::graph::{self, GraphOp};
use ircc_dialects::index;

use super::lowering::shape_of;
use super::lowering::{Input, Ix, delinearize, linearize};

/// The index map of a layout op (result index to source index); reshapes
/// that no split/merge grouping describes go through the flat offset.
pub(crate) fn layout_map(m: &Module, ctx: &PassContext, op: OpId) -> Option<AffineMap> {
    if let Some(map) = crate::index::lower::layout_map(m, ctx, op) {
        return Some(map);
    }
    let o = m.op(op);
    use GraphOp as G;
    if !matches!(
        GraphOp::of(m, op),
        Some(G::Reshape | G::Flatten | G::Squeeze | G::Unsqueeze)
    ) {
        return None;
    }
    let from = m.value_type(o.operands[0]).as_tensor()?.shape.clone();
    let to = m.value_type(o.results[0]).as_tensor()?.shape.clone();
    let dims: Vec<Ix> = (0..to.len() as u32).map(Ix::dim).collect();
    let flat = linearize(&dims, &to);
    Some(AffineMap::new(
        to.len() as u32,
        0,
        delinearize(&flat, &from),
    ))
}

/// A group to lower: its ops' inputs bound to host values, and its
/// outputs (values inside the group) with the host results they become.
pub(crate) struct Group {
    pub op: OpId,
    pub anchor: OpId,
    pub bindings: Vec<(ValueId, ValueId)>,
    pub outputs: Vec<(ValueId, ValueId)>,
}

pub(crate) fn group_of(m: &Module, op: OpId) -> Group {
    let o = m.op(op);
    let Some(fused) = graph::ops::Fused::new(m, op) else {
        return Group {
            op,
            anchor: op,
            bindings: o.operands.iter().map(|&v| (v, v)).collect(),
            outputs: o.results.iter().map(|&r| (r, r)).collect(),
        };
    };
    let block = m.entry_block(op).expect("a fused op has a body");
    let anchor_name = fused.anchor();
    let body = &m.blocks[block].ops;
    let anchor = body
        .iter()
        .copied()
        .find(|&x| m.op(x).name == anchor_name)
        .or_else(|| body.first().copied())
        .unwrap_or(op);
    let yield_op = *body.last().expect("a fused body ends in graph.yield");
    Group {
        op,
        anchor,
        bindings: m.blocks[block]
            .args
            .iter()
            .copied()
            .zip(o.operands.iter().copied())
            .collect(),
        outputs: m
            .op(yield_op)
            .operands
            .iter()
            .copied()
            .zip(o.results.iter().copied())
            .collect(),
    }
}

/// A product split along K whose sum no kernel of its own computes: its
/// partial products, and the product op (for its epilogue).
#[derive(Clone, Copy)]
pub(crate) struct SplitProduct {
    pub partials: ValueId,
    pub anchor: OpId,
}

/// How a kernel reads host value `host`: through the views above it, as
/// the sum of a split product's partials (`split`, by the product's
/// result), or as a splat folded into the code.
pub(crate) fn resolve_input(
    m: &Module,
    split: &HashMap<ValueId, SplitProduct>,
    host: ValueId,
) -> Input {
    let (stored, map) = index::through_views(m, host);
    if let Some(s) = split.get(&stored) {
        return Input::Partials {
            stored: s.partials,
            shape: shape_of(m, s.partials),
            map,
            anchor: s.anchor,
        };
    }
    if let Some(x) = ircc_dialects::constant_of(m, stored).and_then(|d| d.splat()) {
        return Input::Splat(x);
    }
    Input::Memory {
        stored,
        shape: shape_of(m, stored),
        map,
    }
}
