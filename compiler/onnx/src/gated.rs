//! Newer sequence-model blocks as compositions of graph ops: SwiGLU (a
//! Swish gate times a second input), CausalConvWithState (a depthwise
//! causal convolution over the past state and the input, the state's
//! next value the last steps it saw) and LinearAttention (its recurrence
//! over the steps, unrolled).

use ircc_core::{Attribute, ElemType};
use ircc_dialects::graph::GraphOp;

use crate::attrs::Attrs;
use crate::import::{Importer, Val};
use crate::ops::{attrs, ints_attr};
use crate::proto::NodeProto;
use crate::{ImportError, Result};

/// The most steps LinearAttention's recurrence is unrolled over: each
/// step is a dozen graph ops.
const MAX_LINEAR_ATTENTION_STEPS: i64 = 256;
/// The most query heads LinearAttention takes: each step joins that many
/// copies of a key/value head's state.
const MAX_HEADS: i64 = 4096;

impl Importer<'_> {
    /// SwiGLU: `a * sigmoid(alpha * a) * b`, of two tensors of one shape.
    pub(crate) fn swiglu(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["alpha"])?;
        let (x, gate) = (self.required(n, 0)?, self.required(n, 1)?);
        let (xt, gt) = (self.type_of(&x), self.type_of(&gate));
        if xt != gt || !xt.elem.is_float() {
            return Err(ImportError::invalid(format!(
                "SwiGLU takes two float tensors of one shape and type, not {xt} and {gt}"
            )));
        }
        let swish = self.swish(x, a.f("alpha", 1.0) as f64)?;
        Ok(vec![self.bin(GraphOp::Mul, swish, gate)?])
    }

    /// `x * sigmoid(alpha * x)`.
    fn swish(&mut self, x: Val, alpha: f64) -> Result<Val> {
        let scaled = if alpha == 1.0 {
            x.clone()
        } else {
            let alpha = self.scalar_like(&x, alpha);
            self.bin(GraphOp::Mul, x.clone(), alpha)?
        };
        let sigmoid = self.un(GraphOp::Sigmoid, scaled)?;
        self.bin(GraphOp::Mul, x, sigmoid)
    }

    /// CausalConvWithState: `input` [batch, channels, steps] after
    /// `past_state` [batch, channels, k - 1] (zeros where absent), each
    /// channel convolved with its own `weight` [channels, 1, k] (and
    /// `bias`), through SiLU where `activation` asks; the second result is
    /// the last k - 1 steps of the state and the input together.
    pub(crate) fn causal_conv_with_state(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["activation"])?;
        let x = self.required(n, 0)?;
        let w = self.required(n, 1)?;
        let (xt, wt) = (self.type_of(&x), self.type_of(&w));
        let channels = xt.shape.get(1).copied().unwrap_or(0);
        if xt.rank() != 3 || !xt.elem.is_float() || wt.rank() != 3 || wt.shape[..2] != [channels, 1]
        {
            return Err(ImportError::invalid(format!(
                "CausalConvWithState takes an input [batch, channels, steps] and a weight [channels, 1, k], not {xt} and {wt}"
            )));
        }
        let k = wt.shape[2];
        let (batch, steps) = (xt.shape[0], xt.shape[2]);
        let activation = a.s("activation", "none");
        if !matches!(activation.as_str(), "none" | "silu" | "swish") {
            return Err(ImportError::invalid(format!(
                "activation '{activation}' (none, silu and swish are defined)"
            )));
        }
        let past = match self.input(n, 3)? {
            Some(p) => {
                let pt = self.type_of(&p);
                if pt.shape != [batch, channels, k - 1] || pt.elem != xt.elem {
                    return Err(ImportError::invalid(format!(
                        "past_state is {pt}, where the input and a kernel of {k} take [{batch}, {channels}, {}]",
                        k - 1
                    )));
                }
                Some(p)
            }
            None => None,
        };
        let padded = match past {
            Some(p) if k > 1 => self.concat(vec![p, x], 2)?,
            _ if k > 1 => {
                let at = attrs(vec![("pads", ints_attr(vec![0, 0, k - 1, 0, 0, 0]))]);
                self.emit(GraphOp::Pad, vec![x], at, 1)?.remove(0)
            }
            _ => x,
        };
        let mut operands = vec![padded.clone(), w];
        operands.extend(self.input(n, 2)?);
        let at = attrs(vec![
            ("strides", ints_attr(vec![1])),
            ("dilations", ints_attr(vec![1])),
            ("group", Attribute::i64(channels)),
            ("pads", ints_attr(vec![0, 0])),
        ]);
        let mut y = self.emit(GraphOp::Conv, operands, at, 1)?.remove(0);
        if activation != "none" {
            // ONNX computes the activation of a narrower float in f32,
            // rounding once at the end.
            if xt.elem == ElemType::F64 {
                y = self.swish(y, 1.0)?;
            } else {
                y = self.cast_to(y, ElemType::F32)?;
                y = self.swish(y, 1.0)?;
                y = self.cast_to(y, xt.elem)?;
            }
        }
        let total = steps + k - 1;
        let state = if k == 1 {
            // No state: an empty constant.
            let empty =
                ndarray::ArrayD::zeros(ndarray::IxDyn(&[batch as usize, channels as usize, 0]));
            Val::constant(ircc_core::Tensor::float(xt.elem, empty))
        } else {
            self.slice_axis(&padded, 2, total - (k - 1), total)?
        };
        Ok(vec![y, state])
    }

    /// LinearAttention: for each step t, the state S [B, H_kv, d_k, d_v]
    /// decays by exp(decay_t) (`gated`), takes the key's outer product
    /// with the value (`delta`: with beta_t times the value less what S
    /// already gives for the key), and each query head reads
    /// `scale * q_t S` of its key/value head. Computed in f32, as ONNX
    /// does; the recurrence is unrolled over the steps.
    pub(crate) fn linear_attention(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&[
            "chunk_size",
            "kv_num_heads",
            "q_num_heads",
            "scale",
            "update_rule",
        ])?;
        let rule = a.s("update_rule", "gated_delta");
        let (gated, delta) = match rule.as_str() {
            "linear" => (false, false),
            "gated" => (true, false),
            "delta" => (false, true),
            "gated_delta" => (true, true),
            _ => {
                return Err(ImportError::invalid(format!(
                    "update_rule '{rule}' (linear, gated, delta and gated_delta are defined)"
                )));
            }
        };
        let (q_heads, kv_heads) = (a.i("q_num_heads", 0), a.i("kv_num_heads", 0));
        let [query, key, value] = [0, 1, 2].map(|i| self.required(n, i));
        let (query, key, value) = (query?, key?, value?);
        let [qt, kt, vt] = [&query, &key, &value].map(|v| self.type_of(v));
        let shapes_fit = [&qt, &kt, &vt]
            .iter()
            .all(|t| t.rank() == 3 && t.elem.is_float())
            && kv_heads > 0
            && q_heads > 0
            && q_heads <= qt.shape[2].min(MAX_HEADS)
            && kv_heads <= vt.shape[2]
            && q_heads % kv_heads == 0
            && qt.shape[2] % q_heads == 0
            && vt.shape[2] % kv_heads == 0
            && kt.shape[..2] == qt.shape[..2]
            && vt.shape[..2] == qt.shape[..2]
            && kt.shape[2].checked_mul(q_heads) == qt.shape[2].checked_mul(kv_heads);
        if !shapes_fit {
            return Err(ImportError::invalid(format!(
                "LinearAttention takes query, key and value [B, T, heads * size] of {q_heads} query and {kv_heads} key/value heads, not {qt}, {kt} and {vt}"
            )));
        }
        let (batch, steps) = (qt.shape[0], qt.shape[1]);
        let (dk, dv) = (qt.shape[2] / q_heads, vt.shape[2] / kv_heads);
        if steps > MAX_LINEAR_ATTENTION_STEPS {
            return Err(ImportError::unsupported(format!(
                "LinearAttention over {steps} steps: its recurrence is unrolled, up to {MAX_LINEAR_ATTENTION_STEPS} steps"
            )));
        }
        let (decay, beta, past) = (self.input(n, 4)?, self.input(n, 5)?, self.input(n, 3)?);
        if gated != decay.is_some() || delta != beta.is_some() {
            return Err(ImportError::invalid(format!(
                "update_rule '{rule}' {} decay and {} beta",
                if gated { "needs" } else { "takes no" },
                if delta { "needs" } else { "takes no" }
            )));
        }
        let f32 = ElemType::F32;
        // [B, T, heads * size] as [B, heads, T, size], in f32.
        let heads_first = |imp: &mut Self, v: Val, heads: i64, size: i64| -> Result<Val> {
            let v = imp.cast_to(v, f32)?;
            let v = imp.reshape(v, vec![batch, steps, heads, size])?;
            imp.transpose(v, vec![0, 2, 1, 3])
        };
        let q4 = heads_first(self, query, q_heads, dk)?;
        let k4 = heads_first(self, key, kv_heads, dk)?;
        let v4 = heads_first(self, value, kv_heads, dv)?;
        let per_head = |imp: &mut Self, v: Val, what: &str, widths: &[i64]| -> Result<Val> {
            let t = imp.type_of(&v);
            let width = t.shape.last().copied().unwrap_or(0);
            if t.rank() != 3 || t.shape[..2] != [batch, steps] || !widths.contains(&width) {
                return Err(ImportError::invalid(format!(
                    "LinearAttention's {what} is {t}, where [{batch}, {steps}, one of {widths:?}] is needed"
                )));
            }
            let heads = if width == 1 { 1 } else { kv_heads };
            heads_first(imp, v, heads, width / heads)
        };
        let decay4 = decay
            .map(|d| per_head(self, d, "decay", &[kv_heads, kv_heads * dk]))
            .transpose()?;
        let beta4 = beta
            .map(|b| per_head(self, b, "beta", &[kv_heads, 1]))
            .transpose()?;
        let state_shape = vec![batch, kv_heads, dk, dv];
        let (mut state, state_elem) = match past {
            Some(p) => {
                let pt = self.type_of(&p);
                if pt.shape != state_shape {
                    return Err(ImportError::invalid(format!(
                        "past_state is {pt}, where {state_shape:?} is needed"
                    )));
                }
                (self.cast_to(p, f32)?, pt.elem)
            }
            None => {
                let zero = ircc_core::Tensor::float(f32, ndarray::arr0(0.0).into_dyn());
                (self.splat(&zero, state_shape)?, qt.elem)
            }
        };
        let scale = match a.f("scale", 0.0) {
            0.0 => 1.0 / (dk as f64).sqrt(),
            s => f64::from(s),
        };
        let group = q_heads / kv_heads;
        let mut outputs = Vec::new();
        for t in 0..steps {
            let at = |imp: &mut Self, v: &Val| imp.slice_axis(v, 2, t, t + 1);
            let (q, k) = (at(self, &q4)?, at(self, &k4)?);
            let mut v = at(self, &v4)?;
            if let Some(d) = &decay4 {
                // [B, H, 1, 1 or d_k] as [B, H, 1 or d_k, 1], over d_v.
                let g = at(self, d)?;
                let width = self.type_of(&g).shape[3];
                let g = self.reshape(g, vec![batch, kv_heads, width, 1])?;
                let g = self.un(GraphOp::Exp, g)?;
                state = self.bin(GraphOp::Mul, state, g)?;
            }
            if let Some(b) = &beta4 {
                let retrieved = self.bin(GraphOp::Matmul, k.clone(), state.clone())?;
                let missing = self.bin(GraphOp::Sub, v, retrieved)?;
                let b = at(self, b)?;
                v = self.bin(GraphOp::Mul, b, missing)?;
            }
            let column = self.reshape(k, vec![batch, kv_heads, dk, 1])?;
            let outer = self.bin(GraphOp::Mul, column, v)?;
            state = self.bin(GraphOp::Add, state, outer)?;
            let read = if group == 1 {
                state.clone()
            } else {
                let s = self.reshape(state.clone(), vec![batch, kv_heads, 1, dk, dv])?;
                let copies = self.concat(vec![s; group as usize], 2)?;
                self.reshape(copies, vec![batch, q_heads, dk, dv])?
            };
            let o = self.bin(GraphOp::Matmul, q, read)?;
            let s = self.scalar_like(&o, scale);
            outputs.push(self.bin(GraphOp::Mul, o, s)?);
        }
        let out = self.concat(outputs, 2)?;
        let out = self.transpose(out, vec![0, 2, 1, 3])?;
        let out = self.reshape(out, vec![batch, steps, q_heads * dv])?;
        Ok(vec![
            self.cast_to(out, qt.elem)?,
            self.cast_to(state, state_elem)?,
        ])
    }
}
