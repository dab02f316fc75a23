//! `texture.map`: each tensor whose chosen layout is a texture is placed
//! in one (`texture.place`) and its readers read it back through the same
//! map (`texture.read`), so the texture level is explicit in the IR and
//! the interpreter checks it. A tensor stays in a buffer, with a remark,
//! where the device has no rgba32f textures or the layout exceeds its
//! extent. A tensor whose kernel cannot write its layout (a reduction's,
//! a tiled product's with lanes along another axis than its columns, a
//! softmax's or layer norm's with lanes along another axis than its row) is
//! copied into its texture by a `graph.identity`, as the cost model
//! counted.

use std::collections::HashMap;

use ircc_core::builtin::FuncOp;
use ircc_core::diag::{Diagnostic, Diagnostics};
use ircc_core::ir::OpBuilder;
use ircc_core::pass::{Pass, PassContext};
use ircc_core::{Attribute, Module, OpId};
use ircc_dialects::graph::GraphOp;
use ircc_dialects::kernel::{SCHEDULE_ATTR, Schedule};
use ircc_dialects::texture::{TextureLayout, TextureOp};

use super::cost::{CostModel, LayoutSpec};
use super::problem::Choice;
use super::{LAYOUTS, choice_attr, layouts_of, profile, require_schedules, writer_of};
use crate::decl::TextureMapOptions;

pub struct TextureMap;

impl Pass for TextureMap {
    fn name(&self) -> &str {
        TextureMapOptions::NAME
    }

    fn run(&mut self, m: &mut Module, ctx: &PassContext) -> Result<(), Diagnostics> {
        let device = profile(self.name(), m)?;
        let model = CostModel::new(&device, &LayoutSpec::load());
        for f in m.functions() {
            let Some(block) = m.entry_block(f) else {
                continue;
            };
            require_schedules(m, block, self.name())?;
            let ops = m.blocks[block].ops.clone();
            let mut inserts: HashMap<OpId, Vec<OpId>> = HashMap::new();
            for (pos, &op) in ops.iter().enumerate() {
                let Some(layouts) = layouts_of(m, op) else {
                    continue;
                };
                let layouts = layouts.map_err(|e| {
                    Diagnostics(vec![Diagnostic::error(
                        m.op(op).loc.clone(),
                        format!("{}: {e}", self.name()),
                    )])
                })?;
                let Some(&next) = ops.get(pos + 1) else {
                    continue;
                };
                for (k, choice) in layouts.into_iter().enumerate() {
                    let placed = self.place(m, ctx, &model, op, k, choice)?;
                    inserts.entry(next).or_default().extend(placed);
                }
            }
            m.sweep_block(block, &inserts);
        }
        Ok(())
    }
}

impl TextureMap {
    /// The ops that place result `k` of `op` in the texture of `choice`
    /// (none where it stays in a buffer).
    fn place(
        &self,
        m: &mut Module,
        ctx: &PassContext,
        model: &CostModel,
        op: OpId,
        k: usize,
        choice: Choice,
    ) -> Result<Vec<OpId>, Diagnostics> {
        let Choice::Texture { lanes, contiguous } = choice else {
            return Ok(Vec::new());
        };
        let r = m.op(op).results[k];
        let loc = m.op(op).loc.clone();
        let Some(t) = m.value_type(r).as_tensor().cloned() else {
            return Ok(Vec::new());
        };
        if lanes >= t.rank() || contiguous >= t.rank() {
            return Err(Diagnostics(vec![Diagnostic::error(
                loc,
                format!(
                    "{}: result #{k} is {t}, which has no axis {}",
                    self.name(),
                    lanes.max(contiguous)
                ),
            )]));
        }
        // Placed already (by an earlier run): directly, or through its copy
        // into this layout (layout.select's extra copies have others).
        let copy_attr = Attribute::Array(vec![choice_attr(choice)]);
        let placed = m.value(r).uses.iter().any(|u| {
            TextureOp::of(m, u.op) == Some(TextureOp::Place)
                || (GraphOp::of(m, u.op) == Some(GraphOp::Identity)
                    && m.op(u.op).attr(LAYOUTS) == Some(&copy_attr))
        });
        if placed {
            return Ok(Vec::new());
        }
        let returned = m
            .value(r)
            .uses
            .iter()
            .any(|u| FuncOp::of(m, u.op) == Some(FuncOp::Return));
        let why_not = if returned {
            Some("it is a function result, which the host reads from a buffer".to_string())
        } else if !t.elem.is_float() {
            Some(format!("textures hold floats, not {}", t.elem))
        } else if model.format.is_none() {
            Some(format!("device '{}' has no rgba32f textures", model.device))
        } else {
            None
        };
        let layout = TextureLayout::new(&t.shape, lanes, contiguous, model.max_extent);
        let (layout, format) = match (why_not, layout, model.format) {
            (None, Some(l), Some(f)) => (l, f),
            (why, _, _) => {
                let why = why.unwrap_or_else(|| {
                    format!(
                        "lanes = {lanes}, x = {contiguous} of {} does not fit the device's {} texels a side",
                        t,
                        model.max_extent
                    )
                });
                ctx.remark(
                    loc,
                    format!("{}: result #{k} stays in a buffer: {why}", self.name()),
                );
                return Ok(Vec::new());
            }
        };
        let mut new = Vec::new();
        let mut source = r;
        if !writer_of(m, op, k).writes(choice) {
            let copy = m.create_op(
                OpBuilder::new(GraphOp::Identity.name())
                    .operands([r])
                    .results([ircc_core::Type::Tensor(t.clone())])
                    .attr(LAYOUTS, Attribute::Array(vec![choice_attr(choice)]))
                    .attr(SCHEDULE_ATTR, Schedule::Elementwise.to_attr())
                    .loc(loc.clone()),
            );
            new.push(copy);
            source = m.op(copy).results[0];
        }
        let map = Attribute::AffineMap(layout.map());
        let texture = layout.texture_type(format).to_type();
        let place = m.create_op(
            OpBuilder::new(TextureOp::Place.name())
                .operands([source])
                .results([texture])
                .attr("layout", map.clone())
                .loc(loc.clone()),
        );
        let read = m.create_op(
            OpBuilder::new(TextureOp::Read.name())
                .operands([m.op(place).results[0]])
                .results([ircc_core::Type::Tensor(t)])
                .attr("layout", map)
                .loc(loc),
        );
        let value = m.op(read).results[0];
        m.replace_all_uses(source, value);
        m.set_operand(place, 0, source);
        if source != r {
            m.replace_all_uses(r, value);
            m.set_operand(new[0], 0, r);
        }
        new.extend([place, read]);
        Ok(new)
    }
}
