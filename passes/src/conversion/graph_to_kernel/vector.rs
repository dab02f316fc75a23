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

/// The dimension that stands for a lane (0 to 3) in [`lane_step`].
const LANE: u32 = u32::MAX;

/// Whether `offset` (over the indices as dimensions) gives four
/// neighbouring words, the first a multiple of four, for indices whose
/// `axis` goes from a multiple of four through the next three (every
/// other index anything): the lanes step it by one, and lane 0's offset
/// is a multiple of four whatever the indices. Through a floordiv or mod
/// by a multiple of four, which such lanes leave still or step by one.
pub(super) fn four_words(offset: &Ix, axis: usize) -> bool {
    let Ok(axis) = u32::try_from(axis) else {
        return false;
    };
    let lanes = substitute_dim(
        offset,
        axis,
        &(Ix::dim(axis) * Ix::constant(4) + Ix::dim(LANE)),
    );
    lane_step(&lanes) == Some(1) && at_lane_zero(&lanes).known_divisor() % 4 == 0
}

/// `e` with dimension `d` replaced by `by`.
fn substitute_dim(e: &Ix, d: u32, by: &Ix) -> Ix {
    use ircc_core::AffineExpr as E;
    let sub = |x: &Ix| Box::new(substitute_dim(x, d, by));
    match e {
        E::Dim(x) if *x == d => by.clone(),
        E::Dim(_) | E::Sym(_) | E::Const(_) => e.clone(),
        E::Add(a, b) => E::Add(sub(a), sub(b)),
        E::Mul(a, b) => E::Mul(sub(a), sub(b)),
        E::FloorDiv(a, b) => E::FloorDiv(sub(a), sub(b)),
        E::CeilDiv(a, b) => E::CeilDiv(sub(a), sub(b)),
        E::Mod(a, b) => E::Mod(sub(a), sub(b)),
    }
}

/// `e` at lane 0.
fn at_lane_zero(e: &Ix) -> Ix {
    substitute_dim(e, LANE, &Ix::constant(0))
}

/// How `e` moves from lane 0 to lane j (j < 4, lane 0 a multiple of four
/// along the lanes' index): by j times the result, the same for every
/// lane; `None` where the lanes do not move it so. A floordiv or mod by a
/// positive multiple of four of what is a multiple of four at lane 0 and
/// steps by one holds still or steps by one.
fn lane_step(e: &Ix) -> Option<i64> {
    use ircc_core::AffineExpr as E;
    if !e.uses_dim(LANE) {
        return Some(0);
    }
    let whole = |a: &Ix, c: &Ix| {
        // A positive divisor: floor division by a negative one steps
        // where a positive one holds still.
        matches!(c, E::Const(c) if *c > 0 && c % 4 == 0)
            && lane_step(a) == Some(1)
            && at_lane_zero(a).known_divisor() % 4 == 0
    };
    match e {
        E::Dim(_) => Some(1),
        E::Add(a, b) => lane_step(a)?.checked_add(lane_step(b)?),
        E::Mul(a, b) => match (a.as_ref(), b.as_ref()) {
            (x, E::Const(c)) | (E::Const(c), x) => lane_step(x)?.checked_mul(*c),
            _ => None,
        },
        E::FloorDiv(a, c) if whole(a, c) => Some(0),
        E::Mod(a, c) if whole(a, c) => Some(1),
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
        // Stored as [12, 197, 64], read as [197, 768]: four lanes from a
        // multiple of four along K are neighbouring words (a head's 64
        // hold four whole), along the rows they are not.
        let shape = [1, 12, 197, 64];
        let offset = |map: &AffineMap| {
            let dims = [d(0), d(1)];
            let at: Vec<Ix> = map
                .results
                .iter()
                .map(|e| e.substitute(&dims, &[]))
                .collect();
            super::super::address::linearize(&at, &shape)
        };
        assert!(four_words(&offset(&heads), 1));
        assert!(!four_words(&offset(&heads), 0));
        // Heads of 6: lanes from a multiple of four may cross one.
        let sixes = AffineMap::new(
            2,
            0,
            vec![c(0), d(1).floor_div(c(6)), d(0), d(1).modulo(c(6))],
        );
        assert!(!four_words(
            &super::super::address::linearize(
                &sixes
                    .results
                    .iter()
                    .map(|e| e.substitute(&[d(0), d(1)], &[]))
                    .collect::<Vec<_>>(),
                &[1, 128, 197, 6],
            ),
            1
        ));
        // A row offset by one word: lane 0 is no multiple of four.
        let shifted = offset(&heads) + c(1);
        assert!(!four_words(&shifted, 1));
        // A negative divisor: (d1 mod -8) goes 0, -7, -6, -5 from 8.
        let negative = d(0) * c(12) + d(1).modulo(c(-8)) + c(8);
        assert!(!four_words(&negative, 1));
        // A head's start two before the lanes': they cross it at 60.
        let crossing = (d(1) + c(2)).floor_div(c(64)) * c(64) + d(1).modulo(c(64));
        assert!(!four_words(&crossing, 1));
        // Every accepted offset, evaluated: the four lanes from each
        // multiple of four (negative ones too) are neighbouring words,
        // the first a multiple of four.
        for e in [
            offset(&heads),
            d(0) * c(8) + d(1).modulo(c(8)) + d(1).floor_div(c(8)) * c(64),
        ] {
            assert!(four_words(&e, 1), "{e}");
            let map = AffineMap::new(2, 0, vec![e.clone()]);
            for row in -3..3 {
                for base in (-96..96).step_by(4) {
                    let at = |j: i64| map.eval(&[row, base + j], &[]).unwrap()[0];
                    assert_eq!(at(0) % 4, 0, "{e} at ({row}, {base})");
                    for j in 1..4 {
                        assert_eq!(at(j), at(0) + j, "{e} at ({row}, {base} + {j})");
                    }
                }
            }
        }
        // A bias of 96 added to a product of [20, 1, 96] steps with its
        // last index, and a scalar with none.
        assert_eq!(broadcast_axis(3, &[96], 2), Some(0));
        assert_eq!(broadcast_axis(3, &[96], 1), None);
        assert_eq!(broadcast_axis(3, &[1, 1, 1], 2), None);
        assert_eq!(broadcast_axis(2, &[4, 4, 4], 1), None);
    }
}
