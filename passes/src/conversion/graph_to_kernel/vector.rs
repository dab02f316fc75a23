//! Four neighbouring elements of a graph value in one go: the buffers it
//! is computed from (through views and element-wise ops, such as a bias
//! added to a product's result) read four words a load where they lie so
//! in memory, then the value computed a lane at a time as
//! [`KernelBuilder::value_at`] computes it, finding the words it reads
//! already loaded.

use std::collections::HashSet;

use ircc_core::{AffineMap, ValueId};
use ircc_dialects::graph::GraphOp;

use super::lowering::{Input, Ix, KernelBuilder, broadcast_index, tensor_shape};
use super::values::is_pointwise;

type R<T> = Result<T, String>;

/// `idx` stepped `step` along `axis`.
fn stepped(idx: &[Ix], axis: usize, step: i64) -> Vec<Ix> {
    let mut at = idx.to_vec();
    at[axis] = at[axis].clone() + Ix::constant(step);
    at
}

/// The index of an operand of shape `shape`, broadcast to a result of
/// `rank`, that steps with the result's index `axis`: none where the
/// operand is broadcast along it.
fn broadcast_axis(rank: usize, shape: &[i64], axis: usize) -> Option<usize> {
    let a = axis.checked_sub(rank.checked_sub(shape.len())?)?;
    shape.get(a).is_some_and(|&d| d != 1).then_some(a)
}

/// Where stepping index `axis` of a view of map `map` steps exactly one
/// index of its source by one and no other: that index. Not through a
/// view that divides or takes remainders, whose steps vary.
fn view_axis(map: &AffineMap, axis: usize) -> Option<usize> {
    if map.div_mod_count() != 0 {
        return None;
    }
    let rank = map.num_dims as usize;
    let at = |d: Option<usize>| {
        let x: Vec<i64> = (0..rank).map(|i| i64::from(Some(i) == d)).collect();
        map.eval(&x, &[]).ok()
    };
    let (origin, next) = (at(None)?, at(Some(axis))?);
    let moved: Vec<usize> = (0..origin.len())
        .filter(|&d| next[d] != origin[d])
        .collect();
    match moved[..] {
        [d] if next[d] - origin[d] == 1 => Some(d),
        _ => None,
    }
}

/// Where four lanes of a value come from, one level down.
enum Source {
    /// A buffer the kernel reads.
    Buffer,
    /// Values it is computed from: each with its four lanes' indices and
    /// the index they step along.
    Values(Vec<(ValueId, [Vec<Ix>; 4], usize)>),
    /// Neither, or lanes that do not step one source index by one.
    Other,
}

impl KernelBuilder<'_> {
    /// Graph value `v` at `idx` and at the three indices after it along
    /// `axis` (`idx[axis]` a multiple of four), its buffers read four
    /// words a load where [`KernelBuilder::vector_reachable`] finds them
    /// stored so.
    pub fn value4_at(&mut self, v: ValueId, idx: &[Ix], axis: usize) -> R<[ValueId; 4]> {
        let lanes = [0, 1, 2, 3].map(|l| stepped(idx, axis, l));
        self.load_ahead(v, &lanes, axis, &mut HashSet::new())?;
        let mut words = Vec::with_capacity(4);
        for at in &lanes {
            words.push(self.value_at(v, at)?);
        }
        Ok([words[0], words[1], words[2], words[3]])
    }

    /// Whether [`KernelBuilder::value4_at`] may read a buffer of `v` four
    /// words a load along `axis` (it still reads words one by one where
    /// their offset is not known to be a multiple of four).
    pub fn vector_reachable(&self, v: ValueId, axis: usize) -> bool {
        let rank = tensor_shape(self, v).len();
        let dims: Vec<Ix> = (0..rank as u32).map(Ix::dim).collect();
        let lanes = [0, 1, 2, 3].map(|l| stepped(&dims, axis, l));
        self.reaches(v, &lanes, axis, &mut HashSet::new())
    }

    /// [`KernelBuilder::vector_reachable`] below `v`; `seen` holds the
    /// values already walked (each answered no, else the walk is over).
    fn reaches(
        &self,
        v: ValueId,
        lanes: &[Vec<Ix>; 4],
        axis: usize,
        seen: &mut HashSet<ValueId>,
    ) -> bool {
        if !seen.insert(v) {
            return false;
        }
        match self.source(v, lanes, axis) {
            Source::Buffer => self.vector_readable(v, axis),
            Source::Values(values) => values
                .into_iter()
                .any(|(x, at, a)| self.reaches(x, &at, a, seen)),
            Source::Other => false,
        }
    }

    /// Where `v`'s `lanes` (four indices stepping along `axis`) come from,
    /// at the indices [`KernelBuilder::value_at`] asks of each source: a
    /// view's source through its map, an element-wise op's operands
    /// broadcast (those broadcast along `axis` left out).
    fn source(&self, v: ValueId, lanes: &[Vec<Ix>; 4], axis: usize) -> Source {
        match self.inputs.get(&v) {
            Some(Input::Memory { .. }) => return Source::Buffer,
            Some(_) => return Source::Other,
            None => {}
        }
        let Some(op) = self.m().defining_op(v) else {
            return Source::Other;
        };
        if let Some(map) = self.view_map(op) {
            let Some(d) = view_axis(&map, axis) else {
                return Source::Other;
            };
            let through = lanes.clone().map(|at| {
                map.results
                    .iter()
                    .map(|e| e.substitute(&at, &[]))
                    .collect::<Vec<Ix>>()
            });
            return Source::Values(vec![(self.operand(op, 0), through, d)]);
        }
        match GraphOp::of(self.m(), op) {
            Some(GraphOp::Identity) => {
                Source::Values(vec![(self.operand(op, 0), lanes.clone(), axis)])
            }
            Some(kind) if is_pointwise(kind) => {
                let rank = lanes[0].len();
                let operands = self.m().op(op).operands.iter().filter_map(|&x| {
                    let s = tensor_shape(self, x);
                    let a = broadcast_axis(rank, &s, axis)?;
                    Some((x, lanes.clone().map(|at| broadcast_index(&at, &s)), a))
                });
                Source::Values(operands.collect())
            }
            _ => Source::Other,
        }
    }

    /// Loads four words at a time of the buffers `v` is computed from,
    /// recording each word as the value its source has at the index
    /// [`KernelBuilder::value_at`] will ask for: `lanes` are `v`'s four
    /// indices, each the one before stepped along `axis`; `seen`, the
    /// values and first indices already walked.
    fn load_ahead(
        &mut self,
        v: ValueId,
        lanes: &[Vec<Ix>; 4],
        axis: usize,
        seen: &mut HashSet<(ValueId, Vec<Ix>)>,
    ) -> R<()> {
        if self.memo_get(v, &lanes[0]).is_some() || !seen.insert((v, lanes[0].clone())) {
            return Ok(());
        }
        match self.source(v, lanes, axis) {
            // A vector read at an offset not known to be a multiple of
            // four is refused: those words are then read one by one.
            Source::Buffer if self.vector_readable(v, axis) => {
                if let Ok(words) = self.vector_at(v, &lanes[0], axis) {
                    for (at, x) in lanes.iter().zip(words) {
                        self.memo_put(v, at, x);
                    }
                }
            }
            Source::Values(values) => {
                for (x, at, a) in values {
                    self.load_ahead(x, &at, a, seen)?;
                }
            }
            Source::Buffer | Source::Other => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_and_broadcasts_step_one_source_index_or_none() {
        let (d, c) = (Ix::dim, Ix::constant);
        // ViT-B/16's keys, read out of its qkv product:
        // (d0, d1, d2, d3) -> (d2, 0, 768 + (d1 * 64 + d3)).
        let keys = AffineMap::new(4, 0, vec![d(2), c(0), c(768) + (d(1) * c(64) + d(3))]);
        assert_eq!(view_axis(&keys, 3), Some(2));
        assert_eq!(view_axis(&keys, 2), Some(0));
        // A head steps the source by 64, and the batch moves nothing.
        assert_eq!(view_axis(&keys, 1), None);
        assert_eq!(view_axis(&keys, 0), None);
        // Heads merged back: (d0, d1) -> (0, d1 floordiv 64, d0, d1 mod 64).
        let heads = AffineMap::new(
            2,
            0,
            vec![c(0), d(1).floor_div(c(64)), d(0), d(1).modulo(c(64))],
        );
        assert_eq!(view_axis(&heads, 1), None);
        // A bias of 96 added to a product of [20, 1, 96] steps with its
        // last index, and a scalar with none.
        assert_eq!(broadcast_axis(3, &[96], 2), Some(0));
        assert_eq!(broadcast_axis(3, &[96], 1), None);
        assert_eq!(broadcast_axis(3, &[1, 1, 1], 2), None);
        assert_eq!(broadcast_axis(2, &[4, 4, 4], 1), None);
    }
}
