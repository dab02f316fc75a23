//! ONNX's Attention (opsets 23 and 24) as `graph.attention` over heads of
//! four axes: three-axis inputs are split into heads (a reshape and a
//! transpose, which layout elimination turns into views) and the result is
//! merged back, the past key and value go before the current ones (and are
//! the `present_key` and `present_value` outputs), and a causal mask starts
//! its frontier after the past.

use ircc_core::Attribute;
use ircc_dialects::graph::GraphOp;

use crate::attrs::Attrs;
use crate::import::{Importer, Val};
use crate::ops::{attrs, f32_attr, ints_attr};
use crate::proto::NodeProto;
use crate::{ImportError, Result};

impl Importer<'_> {
    pub(crate) fn attention(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&[
            "is_causal",
            "kv_num_heads",
            "left_window_size",
            "right_window_size",
            "q_num_heads",
            "qk_matmul_output_mode",
            "scale",
            "softcap",
            "softmax_precision",
        ])?;
        if n.output.get(3).is_some_and(|o| !o.is_empty()) {
            return Err(ImportError::unsupported(
                "Attention's qk_matmul_output is not supported",
            ));
        }
        if self.input(n, 6)?.is_some() {
            return Err(ImportError::unsupported(
                "Attention's nonpad_kv_seqlen is not supported",
            ));
        }
        let (mut q, mut k, mut v) = (
            self.required(n, 0)?,
            self.required(n, 1)?,
            self.required(n, 2)?,
        );
        let rank = self.type_of(&q).shape.len();
        if self.type_of(&k).shape.len() != rank || self.type_of(&v).shape.len() != rank {
            return Err(ImportError::invalid("Q, K and V must have the same rank"));
        }
        match rank {
            3 => {
                let heads = |name: &str| match a.i(name, 0) {
                    h if h > 0 => Ok(h),
                    _ => Err(ImportError::invalid(format!(
                        "three-axis Attention needs a positive {name}"
                    ))),
                };
                let (q_heads, kv_heads) = (heads("q_num_heads")?, heads("kv_num_heads")?);
                q = self.split_heads(q, q_heads)?;
                k = self.split_heads(k, kv_heads)?;
                v = self.split_heads(v, kv_heads)?;
            }
            4 => {}
            _ => {
                return Err(ImportError::invalid(format!(
                    "Attention takes Q, K and V of three or four axes, not {rank}"
                )));
            }
        }
        let past = match (self.input(n, 4)?, self.input(n, 5)?) {
            (Some(past_key), Some(past_value)) => {
                let past = self.type_of(&past_key).shape.get(2).copied().unwrap_or(0);
                k = self.concat_keys(past_key, k)?;
                v = self.concat_keys(past_value, v)?;
                past
            }
            (None, None) => 0,
            _ => {
                return Err(ImportError::invalid(
                    "past_key and past_value are given together",
                ));
            }
        };
        let mut at = attrs(vec![
            ("causal", Attribute::i64(a.i("is_causal", 0))),
            ("window_left", Attribute::i64(a.i("left_window_size", -1))),
            ("window_right", Attribute::i64(a.i("right_window_size", -1))),
            ("offset", Attribute::i64(past)),
            ("softcap", f32_attr(a.f("softcap", 0.0) as f64)),
        ]);
        if a.has("scale") {
            at.insert("scale".into(), f32_attr(a.f("scale", 1.0) as f64));
        }
        let mut operands = vec![q, k.clone(), v.clone()];
        operands.extend(self.input(n, 3)?);
        let mut y = self.emit(GraphOp::Attention, operands, at, 1)?.remove(0);
        if rank == 3 {
            y = self.merge_heads(y)?;
        }
        Ok(vec![y, k, v])
    }

    /// `[batch, sequence, heads · size]` as `[batch, heads, sequence, size]`.
    fn split_heads(&mut self, x: Val, heads: i64) -> Result<Val> {
        let shape = self.type_of(&x).shape;
        if shape[2] % heads != 0 {
            return Err(ImportError::invalid(format!(
                "a hidden size of {} does not split into {heads} heads",
                shape[2]
            )));
        }
        let split = vec![shape[0], shape[1], heads, shape[2] / heads];
        let x = self
            .emit(
                GraphOp::Reshape,
                vec![x],
                attrs(vec![("shape", ints_attr(split))]),
                1,
            )?
            .remove(0);
        self.swap_heads(x)
    }

    /// `[batch, heads, sequence, size]` as `[batch, sequence, heads · size]`.
    fn merge_heads(&mut self, y: Val) -> Result<Val> {
        let y = self.swap_heads(y)?;
        let s = self.type_of(&y).shape;
        self.emit(
            GraphOp::Reshape,
            vec![y],
            attrs(vec![("shape", ints_attr(vec![s[0], s[1], s[2] * s[3]]))]),
            1,
        )
        .map(|mut r| r.remove(0))
    }

    fn swap_heads(&mut self, x: Val) -> Result<Val> {
        self.emit(
            GraphOp::Transpose,
            vec![x],
            attrs(vec![("perm", ints_attr(vec![0, 2, 1, 3]))]),
            1,
        )
        .map(|mut r| r.remove(0))
    }

    /// The cached keys (or values) followed by the new ones.
    fn concat_keys(&mut self, past: Val, new: Val) -> Result<Val> {
        self.emit(
            GraphOp::Concat,
            vec![past, new],
            attrs(vec![("axis", Attribute::i64(2))]),
            1,
        )
        .map(|mut r| r.remove(0))
    }
}
