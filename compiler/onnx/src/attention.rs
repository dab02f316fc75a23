//! ONNX's Attention (opsets 23 and 24) as `graph.attention` over heads of
//! four axes: three-axis inputs are split into heads (a reshape and a
//! transpose, which layout elimination turns into views) and the result is
//! merged back, the past key and value go before the current ones (and are
//! the `present_key` and `present_value` outputs), and a causal mask starts
//! its frontier after the past.
//!
//! With `nonpad_kv_seqlen` (known when the model is compiled: a constant or
//! an input bound to its value), each batch sees only its first keys and,
//! without a past, its causal frontier and window end at its own last key;
//! that per-batch frontier becomes a boolean mask, combined with the
//! model's. `qk_matmul_output` is computed beside the fused op, from the
//! unfused product, soft cap, mask and softmax, only where it is asked for.

use ircc_core::{Attribute, ElemType, Tensor};
use ircc_dialects::graph::GraphOp;
use ndarray::{ArrayD, IxDyn};

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
        let nonpad = self.constant_input(n, 6, "nonpad_kv_seqlen")?;
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
        let shape = |imp: &Self, v: &Val| imp.type_of(v).shape;
        let (sq, sk) = (shape(self, &q), shape(self, &k));
        let frontier = Frontier {
            causal: a.i("is_causal", 0) != 0,
            left: a.i("left_window_size", -1),
            right: a.i("right_window_size", -1),
            batch: sq[0],
            queries: sq[2],
            keys: sk[2],
        };
        let user_mask = self.input(n, 3)?;
        let mut at = attrs(vec![
            ("causal", Attribute::i64(i64::from(frontier.causal))),
            ("window_left", Attribute::i64(frontier.left)),
            ("window_right", Attribute::i64(frontier.right)),
            ("offset", Attribute::i64(past)),
            ("softcap", f32_attr(a.f("softcap", 0.0) as f64)),
        ]);
        if a.has("scale") {
            at.insert("scale".into(), f32_attr(a.f("scale", 1.0) as f64));
        }
        // Each batch's valid keys: the frontier becomes a mask.
        let lengths = nonpad.map(|t| frontier.lengths(&t)).transpose()?;
        let mut mask = user_mask.clone();
        if let Some(lengths) = &lengths {
            let visible = Val::constant(frontier.visible(Some(lengths), past)?);
            mask = Some(self.mask_and(mask, visible, frontier.keys)?);
            for (name, off) in [("causal", 0), ("window_left", -1), ("window_right", -1)] {
                at.insert(name.into(), Attribute::i64(off));
            }
            at.insert("offset".into(), Attribute::i64(0));
        }
        let mut operands = vec![q.clone(), k.clone(), v.clone()];
        operands.extend(mask);
        let mut y = self.emit(GraphOp::Attention, operands, at, 1)?.remove(0);
        if rank == 3 {
            y = self.merge_heads(y)?;
        }
        let mut outputs = vec![y, k.clone(), v];
        if n.output.get(3).is_some_and(|o| !o.is_empty()) {
            let mode = a.i("qk_matmul_output_mode", 0);
            let scores = Scores {
                mode,
                scale: a.has("scale").then(|| a.f("scale", 1.0) as f64),
                softcap: a.f("softcap", 0.0) as f64,
            };
            let visible =
                (frontier.causal || frontier.left >= 0 || frontier.right >= 0 || lengths.is_some())
                    .then(|| frontier.visible(lengths.as_deref(), past))
                    .transpose()?;
            outputs.push(self.qk_matmul_output(
                &scores,
                q,
                k,
                user_mask,
                visible,
                frontier.keys,
            )?);
        }
        Ok(outputs)
    }

    /// `mask` (boolean or float, its last axis padded to `keys` as masked)
    /// where `visible` holds, else masked.
    fn mask_and(&mut self, mask: Option<Val>, visible: Val, keys: i64) -> Result<Val> {
        let Some(mask) = mask else {
            return Ok(visible);
        };
        let mask = self.pad_keys(mask, keys)?;
        let ty = self.type_of(&mask);
        let masked = if ty.elem == ElemType::I1 {
            Tensor::bool(ArrayD::from_elem(IxDyn(&[]), false))
        } else {
            Tensor::float(ty.elem, ArrayD::from_elem(IxDyn(&[]), f64::NEG_INFINITY))
        };
        self.emit(
            GraphOp::Where,
            vec![visible, mask, Val::constant(masked)],
            attrs(vec![]),
            1,
        )
        .map(|mut r| r.remove(0))
    }

    /// A mask whose last axis is shorter than the keys, padded with masked
    /// entries (false, or -inf).
    fn pad_keys(&mut self, mask: Val, keys: i64) -> Result<Val> {
        let ty = self.type_of(&mask);
        let last = ty.shape.last().copied().unwrap_or(1);
        if last == 1 || last >= keys {
            return Ok(mask);
        }
        let rank = ty.shape.len();
        let mut pads = vec![0; 2 * rank];
        pads[2 * rank - 1] = keys - last;
        let value = if ty.elem == ElemType::I1 {
            0.0
        } else {
            f64::NEG_INFINITY
        };
        self.emit(
            GraphOp::Pad,
            vec![mask],
            attrs(vec![
                ("pads", ints_attr(pads)),
                (
                    "value",
                    Attribute::Float(value, ircc_core::Type::Scalar(ElemType::F64)),
                ),
            ]),
            1,
        )
        .map(|mut r| r.remove(0))
    }

    /// ONNX's `qk_matmul_output`: the scaled product of the queries and
    /// the (grouped) keys, soft-capped (modes 0 and 1), plus the mask
    /// (mode 2), or its softmax (mode 3; zeros where every key is masked).
    fn qk_matmul_output(
        &mut self,
        s: &Scores,
        q: Val,
        k: Val,
        mask: Option<Val>,
        visible: Option<Tensor>,
        keys: i64,
    ) -> Result<Val> {
        if !(0..=3).contains(&s.mode) {
            return Err(ImportError::invalid(format!(
                "qk_matmul_output_mode is 0, 1, 2 or 3, not {}",
                s.mode
            )));
        }
        let (sq, sk) = (self.type_of(&q).shape, self.type_of(&k).shape);
        let elem = self.type_of(&q).elem;
        let scalar = |x: f64| Val::constant(Tensor::float(elem, ArrayD::from_elem(IxDyn(&[]), x)));
        let mut k = k;
        if sq[1] != sk[1] {
            // Each key/value head serves `group` query heads in turn.
            let group = sq[1] / sk[1].max(1);
            let split = vec![sk[0], sk[1], 1, sk[2], sk[3]];
            let wide = vec![sk[0], sk[1], group, sk[2], sk[3]];
            k = self.op1(GraphOp::Reshape, vec![k], vec![("shape", ints_attr(split))])?;
            k = self.op1(GraphOp::Expand, vec![k], vec![("shape", ints_attr(wide))])?;
            let merged = vec![sk[0], sq[1], sk[2], sk[3]];
            k = self.op1(
                GraphOp::Reshape,
                vec![k],
                vec![("shape", ints_attr(merged))],
            )?;
        }
        let kt = self.op1(
            GraphOp::Transpose,
            vec![k],
            vec![("perm", ints_attr(vec![0, 1, 3, 2]))],
        )?;
        let product = self.op1(GraphOp::Matmul, vec![q, kt], vec![])?;
        let scale = s.scale.unwrap_or(1.0 / (sq[3].max(1) as f64).sqrt());
        let mut scores = self.op1(GraphOp::Mul, vec![product, scalar(scale)], vec![])?;
        if s.softcap > 0.0 {
            let t = self.op1(GraphOp::Div, vec![scores, scalar(s.softcap)], vec![])?;
            let t = self.op1(GraphOp::Tanh, vec![t], vec![])?;
            scores = self.op1(GraphOp::Mul, vec![t, scalar(s.softcap)], vec![])?;
        }
        if s.mode < 2 {
            return Ok(scores);
        }
        let mut terms = Vec::new();
        if let Some(mask) = mask {
            let mask = self.pad_keys(mask, keys)?;
            terms.push(if self.type_of(&mask).elem == ElemType::I1 {
                self.op1(
                    GraphOp::Where,
                    vec![mask, scalar(0.0), scalar(f64::NEG_INFINITY)],
                    vec![],
                )?
            } else {
                mask
            });
        }
        if let Some(visible) = visible {
            let bias = visible
                .to_f64()
                .mapv(|v| if v != 0.0 { 0.0 } else { f64::NEG_INFINITY });
            terms.push(Val::constant(Tensor::float(elem, bias)));
        }
        for t in terms {
            scores = self.op1(GraphOp::Add, vec![scores, t], vec![])?;
        }
        if s.mode == 2 {
            return Ok(scores);
        }
        let weights = self.op1(
            GraphOp::Softmax,
            vec![scores.clone()],
            vec![("axis", Attribute::i64(-1))],
        )?;
        let most = self.op1(
            GraphOp::ReduceMax,
            vec![scores],
            vec![
                ("axes", ints_attr(vec![-1])),
                ("keepdims", Attribute::i64(1)),
            ],
        )?;
        let any = self.op1(
            GraphOp::Greater,
            vec![most, scalar(f64::NEG_INFINITY)],
            vec![],
        )?;
        self.op1(GraphOp::Where, vec![any, weights, scalar(0.0)], vec![])
    }

    fn op1(&mut self, op: GraphOp, operands: Vec<Val>, at: Vec<(&str, Attribute)>) -> Result<Val> {
        self.emit(op, operands, attrs(at), 1)
            .map(|mut r| r.remove(0))
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

/// What `qk_matmul_output` holds.
struct Scores {
    mode: i64,
    scale: Option<f64>,
    softcap: f64,
}

/// The attention's shape and position rules, for frontiers made masks.
struct Frontier {
    causal: bool,
    left: i64,
    right: i64,
    batch: i64,
    queries: i64,
    keys: i64,
}

/// The most elements a frontier mask made at import may have.
const MAX_FRONTIER_ELEMENTS: i64 = 1 << 24;

impl Frontier {
    /// `nonpad_kv_seqlen`: each batch's count of valid keys.
    fn lengths(&self, t: &Tensor) -> Result<Vec<i64>> {
        let lengths: Vec<i64> = t.to_i64().iter().copied().collect();
        if lengths.len() as i64 != self.batch {
            return Err(ImportError::invalid(format!(
                "nonpad_kv_seqlen has {} values for a batch of {}",
                lengths.len(),
                self.batch
            )));
        }
        if let Some(bad) = lengths.iter().find(|&&l| l < 0 || l > self.keys) {
            return Err(ImportError::invalid(format!(
                "nonpad_kv_seqlen holds {bad}, outside [0, {}] keys",
                self.keys
            )));
        }
        Ok(lengths)
    }

    /// Whether query `i` of batch `b` sees key `j`, as a boolean
    /// `[batch or 1, 1, queries, keys]` constant. The frontier is the
    /// query's position: after the past where there is one, else (with
    /// `lengths`) after its batch's valid keys less the queries.
    fn visible(&self, lengths: Option<&[i64]>, past: i64) -> Result<Tensor> {
        let batches = if lengths.is_some() { self.batch } else { 1 };
        let elements = batches
            .checked_mul(self.queries)
            .and_then(|n| n.checked_mul(self.keys));
        if elements.is_none_or(|n| n > MAX_FRONTIER_ELEMENTS) {
            return Err(ImportError::unsupported(format!(
                "an attention frontier of {batches}x{}x{} exceeds {MAX_FRONTIER_ELEMENTS} elements",
                self.queries, self.keys
            )));
        }
        let shape = [
            batches as usize,
            1,
            self.queries as usize,
            self.keys as usize,
        ];
        Ok(Tensor::bool(ArrayD::from_shape_fn(IxDyn(&shape), |at| {
            let (b, i, j) = (at[0], at[2] as i64, at[3] as i64);
            let valid = lengths.map_or(self.keys, |l| l[b]);
            let offset = match lengths {
                Some(l) if past == 0 => l[b] - self.queries,
                _ => past,
            };
            let d = j - (i + offset);
            j < valid
                && (!self.causal || d <= 0)
                && (self.right < 0 || d <= self.right)
                && (self.left < 0 || -d <= self.left)
        })))
    }
}
