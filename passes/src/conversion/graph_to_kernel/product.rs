//! The matrix product behind each anchor of the tiled matmul template:
//! `C[batch][row, col] = Σ_k A[row, k] · B[k, col]`, with where each
//! operand element and each result element lives in the graph's tensors.
//!
//! Besides matmul and gemm this covers convolution as an implicit GEMM:
//! rows are (image, output position), columns are output channels and K
//! runs over (input channel, kernel offset), so a 1×1 or a patchifying
//! convolution gets the tiled kernel's reuse instead of one invocation per
//! output element walking all of K. A grouped convolution is a batch of
//! such products, one a group, each over its group's channels.

use ircc_core::{ElemType, Module, OpId, Type, ValueId};
use ircc_dialects::graph::shape::Window;
use ircc_dialects::graph::{self, GraphOp};
use ircc_dialects::kernel::ops::BinaryFn;

use super::lowering::{Ix, KernelBuilder, delinearize};
use super::lowering::{broadcast_index, shape_of, tensor_shape};

type R<T> = Result<T, String>;

pub(super) enum Product {
    Matmul {
        a: ValueId,
        b: ValueId,
        sa: Vec<i64>,
        sb: Vec<i64>,
        sc: Vec<i64>,
        /// A batch against one matrix, folded into the rows: a [197, 1, 768]
        /// x [768, 2304] projection would otherwise fill one row of each
        /// 64-row tile.
        fold: bool,
    },
    Gemm {
        op: OpId,
    },
    Conv {
        x: ValueId,
        w: ValueId,
        bias: Option<ValueId>,
        /// Input spatial extents.
        spatial: Vec<i64>,
        /// (image, output position...) and (input channel, kernel offset...).
        rows: Vec<i64>,
        ks: Vec<i64>,
        window: Window,
        /// The output channels of a group: the columns of each product of
        /// the batch, which is the groups (all the channels, and no batch,
        /// for one group).
        columns: i64,
    },
}

/// The product anchor `anchor` computes: `(rows, columns, K, batch
/// shape)`, from its operands' and result's shapes.
pub(super) fn product_dims(m: &Module, anchor: OpId) -> (i64, i64, i64, Vec<i64>) {
    let o = m.op(anchor);
    let shape = |v: ValueId| shape_of(m, v);
    let (sa, sc) = (shape(o.operands[0]), shape(o.results[0]));
    match GraphOp::of(m, anchor) {
        Some(GraphOp::Gemm) => {
            let trans_a = graph::ops::Gemm::new(m, anchor).is_some_and(|g| g.trans_a() != 0);
            (
                sc[0],
                sc[1],
                if trans_a { sa[0] } else { sa[1] },
                Vec::new(),
            )
        }
        Some(GraphOp::Conv) => {
            // Rows are (image, output position), K (input channel, offset),
            // the batch the groups.
            let sw = shape(o.operands[1]);
            let rows = sc[0] * sc[2..].iter().product::<i64>();
            let groups = graph::ops::Conv::new(m, anchor).map_or(1, |c| c.group());
            let batch = if groups > 1 { vec![groups] } else { Vec::new() };
            (rows, sw[0] / groups, sw[1..].iter().product(), batch)
        }
        _ => {
            let sb = shape(o.operands[1]);
            let rank = sc.len();
            if folds_batch(&sa, &sb, &sc) {
                (
                    sc[..rank - 1].iter().product(),
                    sc[rank - 1],
                    sa[rank - 1],
                    Vec::new(),
                )
            } else {
                (
                    sc[rank - 2],
                    sc[rank - 1],
                    sa[sa.len() - 1],
                    sc[..rank - 2].to_vec(),
                )
            }
        }
    }
}

/// The axis of `anchor`'s result its product's columns run along (the
/// last of [`Product::result_index`]'s for matmul and gemm, the channels
/// for a convolution).
pub(super) fn column_axis(m: &Module, anchor: OpId) -> usize {
    match GraphOp::of(m, anchor) {
        Some(GraphOp::Conv) => 1,
        _ => shape_of(m, m.op(anchor).results[0]).len().saturating_sub(1),
    }
}

/// Whether the rows of matrix (or batch of matrices) `x` lie next to each
/// other in memory, as where it is read through a transposing view:
/// stepping its second-to-last index steps its stored offset by one.
pub(super) fn rows_adjacent(m: &Module, x: ValueId) -> bool {
    let (stored, map) = ircc_dialects::index::through_views(m, x);
    let (Some(map), shape) = (map, shape_of(m, x)) else {
        return false;
    };
    if shape.len() < 2 {
        return false;
    }
    let offset = super::address::linearize(&map.results, &shape_of(m, stored));
    let at = vec![0; shape.len()];
    let mut below = at.clone();
    below[shape.len() - 2] = 1;
    matches!(
        (offset.eval(&at, &[]), offset.eval(&below, &[])),
        (Ok(a), Ok(b)) if b - a == 1
    )
}

/// Whether a batch against one matrix folds into the product's rows.
fn folds_batch(sa: &[i64], sb: &[i64], sc: &[i64]) -> bool {
    sb.len() == 2 && sc.len() > 2 && sa.len() == sc.len()
}

impl Product {
    pub fn of(kb: &KernelBuilder, anchor: OpId) -> R<Product> {
        let o = kb.m().op(anchor);
        let operands = o.operands.clone();
        let c = o.results[0];
        match GraphOp::of(kb.m(), anchor) {
            Some(GraphOp::Gemm) => Ok(Product::Gemm { op: anchor }),
            Some(GraphOp::Conv) => {
                let conv = kb.conv_parts(anchor)?;
                let sy = tensor_shape(kb, c);
                let mut rows = vec![sy[0]];
                rows.extend(&sy[2..]);
                Ok(Product::Conv {
                    x: conv.x,
                    w: conv.w,
                    bias: conv.bias,
                    spatial: conv.sx[2..].to_vec(),
                    rows,
                    ks: conv.sw[1..].to_vec(),
                    window: conv.window,
                    columns: conv.sw[0] / conv.group,
                })
            }
            _ => {
                let (a, b) = (operands[0], operands[1]);
                let (sa, sb, sc) = (
                    tensor_shape(kb, a),
                    tensor_shape(kb, b),
                    tensor_shape(kb, c),
                );
                let fold = folds_batch(&sa, &sb, &sc);
                Ok(Product::Matmul {
                    a,
                    b,
                    sa,
                    sb,
                    sc,
                    fold,
                })
            }
        }
    }

    /// Element `(row, col)` of operand `which` (0: A, 1: B), as f32.
    pub fn operand(
        &self,
        kb: &mut KernelBuilder,
        which: usize,
        batch: &[Ix],
        row: Ix,
        col: Ix,
    ) -> R<ValueId> {
        self.operand_as(kb, which, batch, row, col, ElemType::F32)
    }

    /// [`Product::operand`] as `elem` (no conversion where it is stored so).
    pub fn operand_as(
        &self,
        kb: &mut KernelBuilder,
        which: usize,
        batch: &[Ix],
        row: Ix,
        col: Ix,
        elem: ElemType,
    ) -> R<ValueId> {
        let v = match self {
            Product::Gemm { op } => kb.gemm_operand(*op, which, row, col)?,
            Product::Matmul {
                a, b, sa, sb, fold, ..
            } => {
                let (x, s) = if which == 0 { (*a, sa) } else { (*b, sb) };
                let mut idx = if *fold && which == 0 {
                    delinearize(&row, &s[..s.len() - 1])
                } else {
                    let mut idx = broadcast_index(batch, &s[..s.len() - 2]);
                    idx.push(row);
                    idx
                };
                idx.push(col);
                kb.value_at(x, &idx)?
            }
            Product::Conv {
                x,
                w,
                spatial,
                rows,
                ks,
                window,
                columns,
                ..
            } => {
                // Group g's channels: its output channels (columns) and
                // input channels (K's first part) from g times their count.
                let first = |count: i64| match batch.first() {
                    Some(g) => g.clone() * Ix::constant(count),
                    None => Ix::constant(0),
                };
                if which == 1 {
                    let mut idx = vec![first(*columns) + col];
                    idx.extend(delinearize(&row, ks));
                    kb.value_at(*w, &idx)?
                } else {
                    let image = delinearize(&row, rows);
                    let k = delinearize(&col, ks);
                    let positions: Vec<Ix> = (0..spatial.len())
                        .map(|d| {
                            image[1 + d].clone() * Ix::constant(window.strides[d])
                                + k[1 + d].clone() * Ix::constant(window.dilations[d])
                                - Ix::constant(window.pads[d])
                        })
                        .collect();
                    let mut idx = vec![image[0].clone(), first(ks[0]) + k[0].clone()];
                    idx.extend(positions.iter().cloned());
                    let v = kb.value_at(*x, &idx)?;
                    match kb.in_bounds(&positions, spatial) {
                        Some(inside) => {
                            let zero = kb.ir.constant(0.0, kb.ir.elem(v));
                            kb.ir.select(inside, v, zero)
                        }
                        None => v,
                    }
                }
            }
        };
        Ok(kb.ir.cast(v, Type::Scalar(elem)))
    }

    /// Operand `which` of a matmul or gemm, the axes of its graph value
    /// that the product's rows and columns run along, and whether its rows
    /// are a folded batch (A of a batch against one matrix, whose row
    /// index is delinearized over every axis but the last). `None` for a
    /// convolution (im2col).
    fn matrix_operand(&self, m: &Module, which: usize) -> Option<(ValueId, [usize; 2], bool)> {
        match self {
            Product::Gemm { op } => {
                let gemm = graph::ops::Gemm::new(m, *op)?;
                let trans = if which == 0 {
                    gemm.trans_a()
                } else {
                    gemm.trans_b()
                } != 0;
                Some((
                    m.op(*op).operands[which],
                    if trans { [1, 0] } else { [0, 1] },
                    false,
                ))
            }
            Product::Matmul {
                a, b, sa, sb, fold, ..
            } => {
                let (x, rank) = if which == 0 {
                    (*a, sa.len())
                } else {
                    (*b, sb.len())
                };
                Some((x, [rank - 2, rank - 1], *fold && which == 0))
            }
            Product::Conv { .. } => None,
        }
    }

    /// Whether [`Product::operand4_as`] reads operand `which` four
    /// elements at a time, down its rows (`along_rows`) or along them; a
    /// folded batch's rows step across its axes, so only along them.
    pub fn vector_operand(&self, kb: &KernelBuilder, which: usize, along_rows: bool) -> bool {
        self.matrix_operand(kb.m(), which)
            .is_some_and(|(x, axes, folded)| {
                !(folded && along_rows) && kb.vector_readable(x, axes[usize::from(!along_rows)])
            })
    }

    /// Elements `(row + j, col)` (`along_rows`) or `(row, col + j)`, j < 4,
    /// of operand `which` as `elem`, in one load: the operand must be
    /// [`Product::vector_operand`] so, and the index stepped a multiple of
    /// four.
    pub fn operand4_as(
        &self,
        kb: &mut KernelBuilder,
        which: usize,
        batch: &[Ix],
        (row, col): (Ix, Ix),
        along_rows: bool,
        elem: ElemType,
    ) -> R<[ValueId; 4]> {
        let (x, axes, folded) = self
            .matrix_operand(kb.m(), which)
            .ok_or("a vector read of a convolution's operand")?;
        let shape = tensor_shape(kb, x);
        let idx = if folded {
            let mut idx = delinearize(&row, &shape[..shape.len() - 1]);
            idx.push(col);
            idx
        } else {
            let mut idx = broadcast_index(batch, &shape[..shape.len() - 2]);
            idx.extend([Ix::constant(0), Ix::constant(0)]);
            idx[axes[0]] = row;
            idx[axes[1]] = col;
            idx
        };
        let lanes = kb.vector_at(x, &idx, axes[usize::from(!along_rows)])?;
        Ok(lanes.map(|v| kb.ir.cast(v, Type::Scalar(elem))))
    }

    /// Whether operand `which`'s elements along its rows (M for A, K for
    /// B) lie next to each other in memory, where that is known: a gemm's
    /// transposed operand, a convolution's weights (along K) and its input
    /// at unit stride (along the output positions), a matmul operand read
    /// through a transposing view. A template staging the operand then
    /// has neighbouring invocations walk its rows, so their loads coalesce.
    pub fn rows_adjacent(&self, m: &Module, which: usize) -> bool {
        match self {
            Product::Gemm { op } => graph::ops::Gemm::new(m, *op)
                .is_some_and(|g| if which == 0 { g.trans_a() } else { g.trans_b() } != 0),
            Product::Conv { window, .. } => {
                which == 1 || window.strides.last().is_some_and(|&s| s == 1)
            }
            Product::Matmul { a, b, fold, .. } => {
                if *fold && which == 0 {
                    return false;
                }
                rows_adjacent(m, if which == 0 { *a } else { *b })
            }
        }
    }

    /// The index of result element `(row, col)` in the anchor's result.
    pub fn result_index(&self, batch: &[Ix], row: Ix, col: Ix) -> Vec<Ix> {
        match self {
            Product::Matmul { sc, fold: true, .. } => {
                let mut idx = delinearize(&row, &sc[..sc.len() - 1]);
                idx.push(col);
                idx
            }
            Product::Matmul { .. } | Product::Gemm { .. } => {
                let mut idx = batch.to_vec();
                idx.push(row);
                idx.push(col);
                idx
            }
            Product::Conv { rows, columns, .. } => {
                let image = delinearize(&row, rows);
                let channel = match batch.first() {
                    Some(g) => g.clone() * Ix::constant(*columns) + col,
                    None => col,
                };
                let mut idx = vec![image[0].clone(), channel];
                idx.extend(image[1..].iter().cloned());
                idx
            }
        }
    }

    /// The anchor's result from the product at `idx`: gemm's alpha and
    /// beta, the convolution's bias.
    pub fn epilogue(&self, kb: &mut KernelBuilder, y: ValueId, idx: &[Ix]) -> R<ValueId> {
        match self {
            Product::Gemm { op } => kb.gemm_epilogue(*op, y, idx),
            Product::Conv { bias: Some(b), .. } => {
                let b = kb.value_at(*b, &idx[1..2])?;
                Ok(kb.ir.binary(BinaryFn::Add, y, b))
            }
            _ => Ok(y),
        }
    }
}
