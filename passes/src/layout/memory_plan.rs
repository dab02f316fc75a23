//! `memory.plan`: what the intermediates of a host function need at most
//! at once. A stored tensor lives from the kernel that writes it to the
//! last kernel that reads it (through views and texture reads); buffers
//! are pooled first-fit in one arena, textures by format and extent (a
//! texture is reused only whole). The figures go on the function:
//! `memory.intermediate_bytes` (every intermediate, unpooled),
//! `memory.peak_bytes` (the most live at once: what any pooling needs),
//! `memory.pooled_bytes` (what this pooling allocates) and
//! `memory.copy_bytes` (the most bytes of extra layout copies live at once,
//! SmartMem's redundant copies).

use std::collections::HashMap;

use ircc_core::builtin::FuncOp;
use ircc_core::diag::Diagnostics;
use ircc_core::pass::{Pass, PassContext};
use ircc_core::{Attribute, BlockId, ElemType, Module, OpId, Type, ValueId};
use ircc_dialects::graph::GraphOp;
use ircc_dialects::texture::{TextureOp, TextureType};
use ircc_dialects::{index, is_data};

use super::LAYOUTS;
use crate::decl::MemoryPlanOptions;

pub const INTERMEDIATE_BYTES: &str = "memory.intermediate_bytes";
pub const PEAK_BYTES: &str = "memory.peak_bytes";
pub const POOLED_BYTES: &str = "memory.pooled_bytes";
pub const COPY_BYTES: &str = "memory.copy_bytes";

pub struct MemoryPlan;

/// One stored intermediate.
struct Item {
    bytes: i64,
    /// `Some` for a texture: pooled by type.
    texture: Option<TextureType>,
    first: usize,
    last: usize,
    copy: bool,
}

#[derive(Default, Debug, PartialEq, Eq)]
pub struct Figures {
    pub intermediate: i64,
    pub peak: i64,
    pub pooled: i64,
    pub copies: i64,
}

/// The last position (in `position`) that reads `v`, looking through
/// views and texture reads.
fn last_read(m: &Module, position: &HashMap<OpId, usize>, v: ValueId) -> Option<usize> {
    let mut last = None;
    let mut stack = vec![v];
    while let Some(x) = stack.pop() {
        for u in &m.value(x).uses {
            let through =
                index::is_view(m, u.op) || TextureOp::of(m, u.op) == Some(TextureOp::Read);
            if through {
                stack.extend(m.op(u.op).results.iter().copied());
            } else if let Some(&p) = position.get(&u.op) {
                last = last.max(Some(p));
            }
        }
    }
    last
}

pub fn figures(m: &Module, block: BlockId) -> Figures {
    let ops = &m.blocks[block].ops;
    let position: HashMap<OpId, usize> = ops.iter().enumerate().map(|(i, &o)| (o, i)).collect();
    let mut items = Vec::new();
    for (i, &op) in ops.iter().enumerate() {
        let o = m.op(op);
        let placed = TextureOp::of(m, op) == Some(TextureOp::Place);
        let computes = GraphOp::of(m, op).is_some() && !is_data(m, op);
        if !placed && !computes {
            continue;
        }
        let copy = GraphOp::of(m, op) == Some(GraphOp::Identity) && o.attr(LAYOUTS).is_some();
        for &r in &o.results {
            let uses = &m.value(r).uses;
            let returned = uses
                .iter()
                .any(|u| FuncOp::of(m, u.op) == Some(FuncOp::Return));
            // A tensor a kernel writes straight into its texture has no buffer.
            let in_texture = uses
                .iter()
                .all(|u| TextureOp::of(m, u.op) == Some(TextureOp::Place))
                && !uses.is_empty();
            if returned || in_texture {
                continue;
            }
            let (bytes, texture) = match m.value_type(r) {
                Type::Tensor(t) => (t.byte_size(), None),
                ty => match TextureType::of(ty) {
                    Ok(t) => (t.bytes(), Some(t)),
                    Err(_) => continue,
                },
            };
            let Some(last) = last_read(m, &position, r) else {
                continue;
            };
            items.push(Item {
                bytes,
                texture,
                first: i,
                last,
                copy: copy || (placed && defined_by_copy(m, o.operands[0])),
            });
        }
    }
    plan(&items)
}

fn defined_by_copy(m: &Module, v: ValueId) -> bool {
    m.defining_op(v).is_some_and(|d| {
        GraphOp::of(m, d) == Some(GraphOp::Identity) && m.op(d).attr(LAYOUTS).is_some()
    })
}

fn plan(items: &[Item]) -> Figures {
    let mut f = Figures {
        intermediate: items.iter().map(|x| x.bytes).sum(),
        ..Default::default()
    };
    let end = items.iter().map(|x| x.last).max().unwrap_or(0);
    // Live bytes per position, by a difference array.
    let mut delta = vec![0i64; end + 2];
    let mut copy_delta = vec![0i64; end + 2];
    for x in items {
        delta[x.first] += x.bytes;
        delta[x.last + 1] -= x.bytes;
        if x.copy {
            copy_delta[x.first] += x.bytes;
            copy_delta[x.last + 1] -= x.bytes;
        }
    }
    let (mut live, mut copies) = (0, 0);
    for (d, c) in delta.iter().zip(&copy_delta) {
        live += d;
        copies += c;
        f.peak = f.peak.max(live);
        f.copies = f.copies.max(copies);
    }
    // First fit in one arena for buffers; whole textures of one type reused.
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| (items[i].first, i));
    let mut placed: Vec<(i64, i64, usize)> = Vec::new(); // (offset, bytes, last)
    let mut arena = 0i64;
    let mut pools: HashMap<TextureType, Vec<usize>> = HashMap::new(); // type -> last use of each texture
    let mut texture_bytes = 0i64;
    for i in order {
        let x = &items[i];
        if let Some(t) = x.texture {
            let pool = pools.entry(t).or_default();
            match pool.iter_mut().find(|last| **last < x.first) {
                Some(last) => *last = x.last,
                None => {
                    pool.push(x.last);
                    texture_bytes += x.bytes;
                }
            }
            continue;
        }
        placed.retain(|&(_, _, last)| last >= x.first);
        placed.sort_unstable();
        let mut offset = 0;
        for &(o, b, _) in &placed {
            if o - offset >= x.bytes {
                break;
            }
            offset = offset.max(o + b);
        }
        placed.push((offset, x.bytes, x.last));
        arena = arena.max(offset + x.bytes);
    }
    f.pooled = arena + texture_bytes;
    f
}

impl Pass for MemoryPlan {
    fn name(&self) -> &str {
        MemoryPlanOptions::NAME
    }

    fn run(&mut self, m: &mut Module, _ctx: &PassContext) -> Result<(), Diagnostics> {
        for func in m.functions() {
            let Some(block) = m.entry_block(func) else {
                continue;
            };
            let f = figures(m, block);
            let int = |v: i64| Attribute::Int(v, Type::Scalar(ElemType::I64));
            let attrs = &mut m.op_mut(func).attrs;
            attrs.insert(INTERMEDIATE_BYTES.into(), int(f.intermediate));
            attrs.insert(PEAK_BYTES.into(), int(f.peak));
            attrs.insert(POOLED_BYTES.into(), int(f.pooled));
            attrs.insert(COPY_BYTES.into(), int(f.copies));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(bytes: i64, first: usize, last: usize) -> Item {
        Item {
            bytes,
            texture: None,
            first,
            last,
            copy: false,
        }
    }

    #[test]
    fn pooling_reuses_dead_space_and_whole_textures() {
        // a chain: each buffer dies when the next kernel has read it
        let chain = [buffer(100, 0, 1), buffer(100, 1, 2), buffer(100, 2, 3)];
        let f = plan(&chain);
        assert_eq!((f.intermediate, f.peak, f.pooled), (300, 200, 200));
        let t = TextureType {
            width: 4,
            height: 2,
            format: ircc_dialects::texture::TexelFormat::Rgba32f,
        };
        let tex = |first, last, copy| Item {
            bytes: t.bytes(),
            texture: Some(t),
            first,
            last,
            copy,
        };
        let f = plan(&[tex(0, 1, false), tex(2, 3, true), tex(3, 4, true)]);
        assert_eq!((f.peak, f.pooled, f.copies), (256, 256, 256));
    }
}
