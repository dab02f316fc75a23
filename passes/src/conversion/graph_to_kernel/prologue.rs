//! A normalization fused into a product as its prologue (spec/fusion.toml's
//! `[prologues]`, `graph::fusion::row_norm_prologue`): each row of A is one
//! row of a layer_norm. Before walking K, the product's workgroup computes
//! the mean and inverse deviation of the rows of its tile into workgroup
//! memory (two passes over each row, the sum and then the squared
//! distances from the mean, the invocations sharing the rows; an
//! invocation holding at most `HELD_WORDS` of a row reads them once);
//! A's words are then normalized with them as they are staged, where each
//! element would otherwise reduce its whole row.

use ircc_core::{Module, OpId, ValueId};
use ircc_dialects::graph;
use ircc_dialects::kernel::ops::{BinaryFn, CmpPred, UnaryFn};

use super::group::Group;
use super::lowering::{Ix, KernelBuilder, guarded};
use super::product::{Product, rows_adjacent};
use super::values::ACC;

type R<T> = Result<T, String>;

/// Words of a row an invocation holds at most to compute its moments
/// from one read of them, rather than reading them again for the
/// deviations: on the H200, ConvNeXt-T's normalizing products took 24 us
/// less together so (holding up to 128 gained no more).
const HELD_WORDS: i64 = 64;

/// The sum of `words` (each zero where it lies outside its row), or of
/// their squared distances from `centre`.
fn sum_of(
    kb: &mut KernelBuilder,
    words: &[(ValueId, Option<ValueId>)],
    centre: Option<ValueId>,
) -> ValueId {
    let zero = kb.ir.constant(0.0, ACC);
    words.iter().fold(zero, |acc, &word| {
        let x = term(kb, word, centre, zero);
        kb.ir.binary(BinaryFn::Add, acc, x)
    })
}

/// What a row's word `x` adds to its moment: itself, or its squared
/// distance from `centre`; `zero` where `inside` says it lies past the row.
fn term(
    kb: &mut KernelBuilder,
    (x, inside): (ValueId, Option<ValueId>),
    centre: Option<ValueId>,
    zero: ValueId,
) -> ValueId {
    let mut x = x;
    if let Some(c) = centre {
        let d = kb.ir.binary(BinaryFn::Sub, x, c);
        x = kb.ir.binary(BinaryFn::Mul, d, d);
    }
    match inside {
        Some(flag) => kb.ir.select(flag, x, zero),
        None => x,
    }
}

/// The layer_norm fused into `group` as its product's prologue (inside
/// the group, not one the product reads from memory), if there is one.
pub(super) fn normalization(m: &Module, group: &Group) -> Option<OpId> {
    if group.op == group.anchor {
        return None;
    }
    crate::graph::fusion::row_norm_prologue(m, group.anchor)
        .filter(|&norm| m.op(norm).parent == m.op(group.anchor).parent)
}

/// Words of workgroup memory the moments of `rows` rows take, computed by
/// `threads` invocations.
pub(super) fn moments_words(rows: i64, threads: i64) -> i64 {
    2 * rows + threads
}

/// How `values.rs` computes normalization `op` for the operand being read
/// (`KernelBuilder::norm_rows`).
#[derive(Clone, Copy)]
pub(super) enum NormRows {
    /// Its input, unnormalized: what the moments are computed from.
    Input,
    /// Normalized with this mean and inverse deviation.
    Moments(ValueId, ValueId),
}

/// The staged moments of a tile's rows of A.
pub(super) struct RowMoments {
    norm: OpId,
    mean: ValueId,
    inv: ValueId,
}

/// Where the workgroup's tile lies in the product, and who computes it.
pub(super) struct TileRows {
    /// The tile's first row, its rows, and the product's.
    pub first: Ix,
    pub rows: i64,
    pub extent: i64,
    /// The product's K.
    pub k: i64,
    /// This invocation's index in the workgroup, and their number.
    pub tid: Ix,
    pub threads: i64,
}

impl RowMoments {
    /// The moments of the tile's rows where `anchor`'s A reads a
    /// normalization fused into its group (none where A is read from
    /// memory, the normalization a kernel of its own). Its workgroup
    /// memory is [`moments_words`].
    pub fn stage(
        kb: &mut KernelBuilder,
        product: &Product,
        anchor: OpId,
        batch: &[Ix],
        tile: &TileRows,
    ) -> R<Option<RowMoments>> {
        let Some(norm) = crate::graph::fusion::row_norm_prologue(kb.m(), anchor) else {
            return Ok(None);
        };
        // A normalization with a kernel of its own is read from memory.
        if kb.inputs.contains_key(&kb.m().op(norm).results[0]) {
            return Ok(None);
        }
        let epsilon = graph::ops::LayerNorm::new(kb.m(), norm)
            .ok_or("a layer_norm")?
            .epsilon();
        // `lanes` invocations share a row; `rows` rows at a time.
        let lanes = (tile.threads / tile.rows).max(1);
        let at_once = tile.threads / lanes;
        let mean = kb.ir.alloc(tile.rows, ACC);
        let inv = kb.ir.alloc(tile.rows, ACC);
        let partial = kb.ir.alloc(tile.threads, ACC);
        let staged = RowMoments { norm, mean, inv };
        // Neighbouring invocations take neighbouring rows where A's rows lie
        // next to each other in memory (ConvNeXt's channels-last view of a
        // convolution's result), else neighbouring words of one row, so
        // that their loads coalesce.
        let input = kb.m().op(norm).operands[0];
        let (r, lane) = if product.rows_adjacent(kb.m(), 0) || rows_adjacent(kb.m(), input) {
            (
                tile.tid.clone().modulo(Ix::constant(at_once)),
                tile.tid.clone().floor_div(Ix::constant(at_once)),
            )
        } else {
            (
                tile.tid.clone().floor_div(Ix::constant(lanes)),
                tile.tid.clone().modulo(Ix::constant(lanes)),
            )
        };
        // Row `r`'s partial sums lie `at_once` apart.
        let slot = lane.clone() * Ix::constant(at_once) + r.clone();
        let count = kb.ir.constant(tile.k as f64, ACC);
        for first in (0..tile.rows).step_by(at_once as usize) {
            let local = r.clone() + Ix::constant(first);
            // Rows past the product's end repeat its last, so every read
            // stays inside A; their results are never stored.
            let row = kb.clamped(&(tile.first.clone() + local.clone()), tile.extent);
            let mut flags = Vec::new();
            if first + at_once > tile.rows {
                flags.push(kb.index_cmp(CmpPred::Lt, &r, tile.rows - first));
            }
            if at_once * lanes < tile.threads {
                flags.push(kb.index_cmp(CmpPred::Lt, &tile.tid, at_once * lanes));
            }
            let busy = (!flags.is_empty()).then(|| kb.ir.all(flags));
            // Where every invocation takes part and its share of the row is
            // short, it reads its words once, all at once, for both passes.
            let words = if busy.is_none() && (tile.k + lanes - 1) / lanes <= HELD_WORDS {
                Some(staged.row_words(kb, product, batch, (&row, &lane, lanes), tile.k)?)
            } else {
                None
            };
            for pass in 0..2 {
                guarded(kb, busy, &mut |kb| {
                    let centre = (pass == 1).then(|| kb.load(mean, &local));
                    let sum = match &words {
                        Some(words) => sum_of(kb, words, centre),
                        None => staged.row_sum(
                            kb,
                            product,
                            batch,
                            (&row, &lane, lanes),
                            tile.k,
                            centre,
                        )?,
                    };
                    kb.store(sum, partial, &slot);
                    Ok(())
                })?;
                kb.ir.barrier();
                guarded(kb, busy, &mut |kb| {
                    let zero = kb.ir.index_const(0);
                    let l = kb.apply(&lane);
                    let leader = kb.ir.cmp(CmpPred::Eq, l, zero);
                    kb.if_then(leader, &mut |kb| {
                        let mut total = kb.ir.constant(0.0, ACC);
                        for j in 0..lanes {
                            let x = kb.load(partial, &(r.clone() + Ix::constant(j * at_once)));
                            total = kb.ir.binary(BinaryFn::Add, total, x);
                        }
                        let moment = kb.ir.binary(BinaryFn::Div, total, count);
                        if pass == 0 {
                            kb.store(moment, mean, &local);
                        } else {
                            let e = kb.ir.constant(epsilon, ACC);
                            let var = kb.ir.binary(BinaryFn::Add, moment, e);
                            let r = kb.ir.unary(UnaryFn::Rsqrt, var);
                            kb.store(r, inv, &local);
                        }
                        Ok(())
                    })
                })?;
                kb.ir.barrier();
            }
        }
        Ok(Some(staged))
    }

    /// This invocation's share of row `row` (every `lanes`th word from
    /// `lane`), unnormalized, each with whether it lies inside the row.
    fn row_words(
        &self,
        kb: &mut KernelBuilder,
        product: &Product,
        batch: &[Ix],
        (row, lane, lanes): (&Ix, &Ix, i64),
        k: i64,
    ) -> R<Vec<(ValueId, Option<ValueId>)>> {
        let steps = (k + lanes - 1) / lanes;
        kb.forgetting(|kb| {
            (0..steps)
                .map(|s| {
                    let at = lane.clone() + Ix::constant(s * lanes);
                    // Only the last word may lie past the row's end.
                    let ragged = k % lanes != 0 && s == steps - 1;
                    self.row_word(kb, product, batch, row, at, (k, ragged))
                })
                .collect()
        })
    }

    /// This invocation's share of row `row`'s sum over K (every `lanes`th
    /// word from `lane`): of A's unnormalized words, or where `centre` is
    /// given, of their squared distances from it.
    fn row_sum(
        &self,
        kb: &mut KernelBuilder,
        product: &Product,
        batch: &[Ix],
        (row, lane, lanes): (&Ix, &Ix, i64),
        k: i64,
        centre: Option<ValueId>,
    ) -> R<ValueId> {
        let zero = kb.ir.constant(0.0, ACC);
        let steps = (k + lanes - 1) / lanes;
        let sum = kb.for_loop(steps, vec![zero], &mut |kb, s, acc| {
            let at = lane.clone() + s * Ix::constant(lanes);
            let word = self.row_word(kb, product, batch, row, at, (k, k % lanes != 0))?;
            let x = term(kb, word, centre, zero);
            Ok(vec![kb.ir.binary(BinaryFn::Add, acc[0], x)])
        })?;
        Ok(sum[0])
    }

    /// A's unnormalized word at (`row`, `at`) of a row of `k`, with, where
    /// `ragged` (`at` may lie past the row's end), whether it lies inside
    /// it: the read is then clamped into the row.
    fn row_word(
        &self,
        kb: &mut KernelBuilder,
        product: &Product,
        batch: &[Ix],
        row: &Ix,
        at: Ix,
        (k, ragged): (i64, bool),
    ) -> R<(ValueId, Option<ValueId>)> {
        let inside = ragged.then(|| kb.index_cmp(CmpPred::Lt, &at, k));
        let at = if ragged { kb.clamped(&at, k) } else { at };
        kb.norm_rows = Some((self.norm, NormRows::Input));
        let x = product.operand_as(kb, 0, batch, row.clone(), at, ACC);
        kb.norm_rows = None;
        Ok((x?, inside))
    }

    /// A's word at (`row`, `k`) as f32, `row` being row `local` of the
    /// tile, normalized with its staged moments.
    pub fn operand(
        &self,
        kb: &mut KernelBuilder,
        product: &Product,
        batch: &[Ix],
        (row, local): (Ix, &Ix),
        k: Ix,
    ) -> R<ValueId> {
        let mean = kb.load(self.mean, local);
        let inv = kb.load(self.inv, local);
        kb.norm_rows = Some((self.norm, NormRows::Moments(mean, inv)));
        let v = product.operand(kb, 0, batch, row, k);
        kb.norm_rows = None;
        v
    }
}
