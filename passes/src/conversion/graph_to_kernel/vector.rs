//! Four neighbouring elements of a graph value in one go: the buffers it
//! is computed from (through views and element-wise ops, such as a bias
//! added to a product's result) read four words a load where they lie so
//! in memory, then the value computed a lane at a time as
//! [`KernelBuilder::value_at`] computes it, finding the words it reads
//! already loaded.

use ircc_core::{AffineMap, ValueId};
use ircc_dialects::graph::GraphOp;
use ircc_dialects::index;

use super::lowering::{Input, Ix, KernelBuilder, broadcast_index, tensor_shape};
use super::values::is_pointwise;

type R<T> = Result<T, String>;

/// `idx` stepped `step` along `axis`.
fn stepped(idx: &[Ix], axis: usize, step: i64) -> Vec<Ix> {
    let mut at = idx.to_vec();
    at[axis] = at[axis].clone() + Ix::constant(step);
    at
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

impl KernelBuilder<'_> {
    /// Graph value `v` at `idx` and at the three indices after it along
    /// `axis` (`idx[axis]` a multiple of four), its buffers read four
    /// words a load wherever [`KernelBuilder::vector_reachable`] finds
    /// them stored so.
    pub fn value4_at(&mut self, v: ValueId, idx: &[Ix], axis: usize) -> R<[ValueId; 4]> {
        let lanes = [0, 1, 2, 3].map(|l| stepped(idx, axis, l));
        self.load_ahead(v, &lanes, axis)?;
        let mut words = Vec::with_capacity(4);
        for at in &lanes {
            words.push(self.value_at(v, at)?);
        }
        Ok([words[0], words[1], words[2], words[3]])
    }

    /// Whether [`KernelBuilder::value4_at`] reads any buffer of `v` four
    /// words a load along `axis`.
    pub fn vector_reachable(&self, v: ValueId, axis: usize) -> bool {
        match self.inputs.get(&v) {
            Some(Input::Memory { .. }) => return self.vector_readable(v, axis),
            Some(_) => return false,
            None => {}
        }
        let Some(op) = self.m().defining_op(v) else {
            return false;
        };
        if let Some(map) = self.view_map(op) {
            return view_axis(&map, axis)
                .is_some_and(|d| self.vector_reachable(self.operand(op, 0), d));
        }
        let rank = tensor_shape(self, v).len();
        GraphOp::of(self.m(), op).is_some_and(is_pointwise)
            && self.m().op(op).operands.iter().any(|&x| {
                let s = tensor_shape(self, x);
                let lead = rank - s.len();
                axis >= lead && s[axis - lead] != 1 && self.vector_reachable(x, axis - lead)
            })
    }

    /// The map of the view `op` is, if it is one (an `index.view`, or a
    /// layout op the group reads through).
    fn view_map(&self, op: ircc_core::OpId) -> Option<AffineMap> {
        match index::ops::View::new(self.m(), op) {
            Some(view) => Some(view.map().clone()),
            None => super::group::layout_map(self.m(), self.ctx, op),
        }
    }

    /// Loads four words at a time of the buffers `v` is computed from,
    /// recording each word as the value its source has at the index
    /// [`KernelBuilder::value_at`] will ask for: `lanes` are `v`'s four
    /// indices, each the one before stepped along `axis`.
    fn load_ahead(&mut self, v: ValueId, lanes: &[Vec<Ix>; 4], axis: usize) -> R<()> {
        if self.memo_get(v, &lanes[0]).is_some() {
            return Ok(());
        }
        match self.inputs.get(&v) {
            Some(Input::Memory { .. }) if self.vector_readable(v, axis) => {
                // A vector read at an offset not known to be a multiple of
                // four is refused: those words are then read one by one.
                if let Ok(words) = self.vector_at(v, &lanes[0], axis) {
                    for (at, x) in lanes.iter().zip(words) {
                        self.memo_put(v, at, x);
                    }
                }
                return Ok(());
            }
            Some(_) => return Ok(()),
            None => {}
        }
        let Some(op) = self.m().defining_op(v) else {
            return Ok(());
        };
        if let Some(map) = self.view_map(op) {
            if let Some(d) = view_axis(&map, axis) {
                let through = lanes.clone().map(|at| {
                    map.results
                        .iter()
                        .map(|e| e.substitute(&at, &[]))
                        .collect::<Vec<Ix>>()
                });
                self.load_ahead(self.operand(op, 0), &through, d)?;
            }
            return Ok(());
        }
        if !GraphOp::of(self.m(), op).is_some_and(is_pointwise) {
            return Ok(());
        }
        let rank = lanes[0].len();
        for x in self.m().op(op).operands.clone() {
            let s = tensor_shape(self, x);
            let lead = rank - s.len();
            if axis >= lead && s[axis - lead] != 1 {
                let at = lanes.clone().map(|at| broadcast_index(&at, &s));
                self.load_ahead(x, &at, axis - lead)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_step_one_source_index_by_one_or_none() {
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
    }
}
