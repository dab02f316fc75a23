//! `index.lower-layout-ops`: reshape, flatten, squeeze, unsqueeze,
//! transpose, slice, expand, tile, depth_to_space, space_to_depth and
//! gathers of constant indices that are an affine function of their
//! position become `index.view`s; a view of a view becomes one view with
//! the composed map.
//!
//! Left as ops: concat and pad (their maps are piecewise, which affine maps
//! cannot say) and gathers of data-dependent or irregular indices.

use ircc_core::diag::Diagnostics;
use ircc_core::ir::{BlockId, OpBuilder};
use ircc_core::pass::{FunctionPass, Pass, PassContext, PassResult};
use ircc_core::{AffineMap, Attribute, Module, OpId, Tensor, Type};
use ircc_dialects::graph::ops::DepthToSpaceMode;
use ircc_dialects::graph::{self, GraphOp};
use ircc_dialects::index::{self, IndexOp, is_view};

use super::maps;

pub struct LowerLayoutOps;

fn tensor_shape(m: &Module, v: ircc_core::ValueId) -> Option<Vec<i64>> {
    m.value_type(v).as_tensor().map(|t| t.shape.clone())
}

/// The map of a layout op, from its result index to its source index.
pub(crate) fn layout_map(m: &Module, ctx: &PassContext, op: OpId) -> Option<AffineMap> {
    let o = m.op(op);
    let view = ctx.registry.view(m, op)?;
    let from = tensor_shape(m, *o.operands.first()?)?;
    let to = tensor_shape(m, *o.results.first()?)?;
    use GraphOp as G;
    match GraphOp::of(m, op)? {
        G::Reshape | G::Flatten | G::Squeeze | G::Unsqueeze => maps::reshape(&from, &to),
        G::Transpose => Some(maps::transpose(
            &ircc_dialects::graph::shape::perm(&view, from.len()).ok()?,
        )),
        G::Slice => {
            let spec = ircc_dialects::graph::shape::slice_spec(&view, &from).ok()?;
            Some(maps::slice(&spec.start, &spec.step))
        }
        G::Expand => Some(maps::repeat(&from, &to, false)),
        G::Tile => Some(maps::repeat(&from, &to, true)),
        G::DepthToSpace => {
            let d2s = graph::ops::DepthToSpace::new(m, op)?;
            Some(maps::depth_to_space(
                d2s.blocksize(),
                to[1],
                d2s.mode() == DepthToSpaceMode::CRD,
            ))
        }
        G::SpaceToDepth => Some(maps::space_to_depth(
            graph::ops::SpaceToDepth::new(m, op)?.blocksize(),
            from[1],
        )),
        G::Gather => {
            let axis =
                ircc_dialects::graph::shape::axis(view.i64("axis").ok()?, from.len()).ok()?;
            let idx = Tensor::from_dense(ircc_dialects::constant_of(m, o.operands[1])?);
            let values: Vec<i64> = idx
                .to_i64()
                .iter()
                .map(|&i| if i < 0 { i + from[axis] } else { i })
                .collect();
            // An index out of range stays a gather, for the interpreter to report.
            if values.iter().any(|&i| i < 0 || i >= from[axis]) {
                return None;
            }
            let (first, strides) = maps::affine_indices(&values, idx.shape())?;
            Some(maps::affine_pick(from.len(), axis, first, &strides))
        }
        _ => None,
    }
}

/// Replaces one layout op by a view (composed with a view it reads);
/// returns false, changing nothing, for an op that has no map.
pub fn lower_to_view(module: &mut Module, ctx: &PassContext, op: OpId) -> bool {
    let Some(map) = layout_map(module, ctx, op) else {
        return false;
    };
    let source = module.op(op).operands[0];
    // A view of a view reads the first view's source directly.
    let inner = module
        .defining_op(source)
        .and_then(|p| index::ops::View::new(module, p));
    let (source, map) = match inner.map(|v| (v.source(), v.map().compose(&map))) {
        Some((inner_source, Ok(composed))) => (inner_source, composed),
        _ => (source, map),
    };
    let result = module.op(op).results[0];
    let ty: Type = module.value_type(result).clone();
    let loc = module.op(op).loc.clone();
    let view = module.create_op(
        OpBuilder::new(IndexOp::View.name())
            .operands([source])
            .results([ty])
            .attr("map", Attribute::AffineMap(map))
            .loc(loc),
    );
    module.insert_before(op, view);
    let new = module.op(view).results[0];
    module.values[new].name = module.value(result).name.clone();
    module.replace_all_uses(result, new);
    module.erase_op(op);
    true
}

/// Erases the views of `body` that nothing reads any more (their reader
/// became a view).
pub fn remove_dead_views(module: &mut Module, body: BlockId) {
    for op in module.blocks[body].ops.clone().into_iter().rev() {
        if is_view(module, op)
            && module
                .op(op)
                .results
                .iter()
                .all(|&r| module.value(r).uses.is_empty())
        {
            module.erase_op(op);
        }
    }
}

impl FunctionPass for LowerLayoutOps {
    fn name(&self) -> &str {
        crate::decl::IndexLowerLayoutOpsOptions::NAME
    }

    fn run_on_body(&mut self, module: &mut Module, body: BlockId, ctx: &PassContext) -> PassResult {
        let mut ops = Vec::new();
        module.walk_block(body, &mut |op| ops.push(op));
        for op in ops {
            lower_to_view(module, ctx, op);
        }
        remove_dead_views(module, body);
        Ok(())
    }
}

/// `index.annotate-dependencies`: records on every view the SmartMem
/// dependency kind of each source axis (identity, split, merge, ...), a
/// debugging aid that shows in the printed IR.
pub struct AnnotateDependencies;

impl Pass for AnnotateDependencies {
    fn name(&self) -> &str {
        crate::decl::IndexAnnotateDependenciesOptions::NAME
    }

    fn run(&mut self, module: &mut Module, _ctx: &PassContext) -> Result<(), Diagnostics> {
        for op in super::views(module) {
            let Some(Attribute::AffineMap(m)) = module.op(op).attr("map").cloned() else {
                continue;
            };
            let kinds = m
                .results
                .iter()
                .map(|e| Attribute::String(maps::dependency(e).to_string()))
                .collect();
            module
                .op_mut(op)
                .attrs
                .insert("index.dependencies".into(), Attribute::Array(kinds));
        }
        Ok(())
    }
}
