//! `graph.attention`: scaled dot-product attention of each query head over
//! the key/value head of its group, with its shape rules and its
//! interpretation (in f64, rounded to the element type at the end).
//!
//! For query `i` of head `h` the score of key `j` is
//! `softcap(scale · q[h, i] · k[h / group, j])` (the soft cap
//! `c · tanh(s / c)` where `softcap` is positive), plus the float mask's
//! value. Query `i` stands at key position `p = i + offset`. A key is
//! masked where a boolean mask is false, a float mask is `-inf`, the key
//! lies past the mask's last axis, `causal` is set and `j > p`, or it lies
//! outside the window `[p - window_left, p + window_right]` (a negative
//! bound leaves that side open). The result is the softmax of the scores of the
//! keys that are not masked times their values; a query whose keys are all
//! masked gets zeros (as ONNX's Attention defines).

use ircc_core::interp::Env;
use ircc_core::registry::OpView;
use ircc_core::{ElemType, Tensor};
use ndarray::{ArrayD, IxDyn};

use super::eval_elementwise::Eval;
use super::ops;
use super::shape::Infer;

/// Which keys each query may see by position: causal and window bounds
/// around the query's key position.
#[derive(Clone, Copy, Debug)]
pub struct Frontier {
    pub causal: bool,
    pub window_left: i64,
    pub window_right: i64,
    pub offset: i64,
}

impl Frontier {
    pub fn of(a: &ops::Attention) -> Frontier {
        Frontier {
            causal: a.causal() != 0,
            window_left: a.window_left(),
            window_right: a.window_right(),
            offset: a.offset(),
        }
    }

    /// The most keys after the query's position it may see (`None`:
    /// unbounded), and the most before it.
    pub fn bounds(&self) -> (Option<i64>, Option<i64>) {
        let ahead = if self.causal {
            Some(0)
        } else {
            (self.window_right >= 0).then_some(self.window_right)
        };
        let behind = (self.window_left >= 0).then_some(self.window_left);
        (ahead, behind)
    }

    pub fn allows(&self, i: i64, j: i64) -> bool {
        let (ahead, behind) = self.bounds();
        let d = j - (i + self.offset);
        ahead.is_none_or(|a| d <= a) && behind.is_none_or(|b| -d <= b)
    }
}

/// The scale: the attribute, else `1 / sqrt(head size)`.
pub fn scale(a: &ops::Attention, head_size: i64) -> f64 {
    a.scale()
        .unwrap_or_else(|| 1.0 / (head_size.max(1) as f64).sqrt())
}

pub fn infer(v: &OpView) -> Infer {
    let (q, k, val) = (v.tensor(0)?, v.tensor(1)?, v.tensor(2)?);
    for t in [q, k, val] {
        if t.rank() != 4 {
            return Err(format!(
                "q, k and v are [batch, heads, sequence, head size], not {t}"
            ));
        }
        if !t.elem.is_float() || t.elem != q.elem {
            return Err(format!("q, k and v must be floats of one type, not {t}"));
        }
    }
    let (batch, heads, queries, size) = (q.shape[0], q.shape[1], q.shape[2], q.shape[3]);
    let (kv_heads, keys) = (k.shape[1], k.shape[2]);
    if k.shape[0] != batch || val.shape[0] != batch {
        return Err(format!(
            "q, k and v have different batches: {q}, {k}, {val}"
        ));
    }
    if k.shape[3] != size {
        return Err(format!("q and k have different head sizes: {q}, {k}"));
    }
    if val.shape[1] != kv_heads || val.shape[2] != keys {
        return Err(format!("k and v have different heads or keys: {k}, {val}"));
    }
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(format!(
            "{heads} query heads do not form groups over {kv_heads} key/value heads"
        ));
    }
    if v.num_operands() > 3 {
        let mask = v.tensor(3)?;
        if mask.elem != ElemType::I1 && mask.elem != q.elem {
            return Err(format!("the mask is boolean or of q's type, not {mask}"));
        }
        let full = [batch, heads, queries, keys];
        if mask.rank() > 4 {
            return Err(format!("the mask has more than four axes: {mask}"));
        }
        let offset = 4 - mask.rank();
        for (a, &d) in mask.shape.iter().enumerate() {
            let want = full[offset + a];
            let last = offset + a == 3;
            // A last axis shorter than the keys masks the rest; an empty
            // one would mask every key by reading nothing.
            if !(d == 1 || d == want || (last && 0 < d && d < want)) {
                return Err(format!(
                    "the mask {mask} does not broadcast to [{batch}, {heads}, {queries}, {keys}]"
                ));
            }
        }
    }
    Ok(vec![ircc_core::Type::tensor(
        vec![batch, heads, queries, val.shape[3]],
        q.elem,
    )])
}

/// Element `[b, h, i, j]` of a mask broadcast from the right: `None` past
/// its last axis (the key is masked), else the value.
fn mask_at(mask: &ArrayD<f64>, at: [usize; 4]) -> Option<f64> {
    let shape = mask.shape();
    let last = shape.last().copied().unwrap_or(1);
    if last != 1 && at[3] >= last {
        return None;
    }
    let offset = 4 - shape.len();
    let idx: Vec<usize> = shape
        .iter()
        .enumerate()
        .map(|(a, &d)| if d == 1 { 0 } else { at[offset + a] })
        .collect();
    Some(mask[IxDyn(&idx)])
}

pub fn attention(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Eval {
    let float = |t: &Tensor| t.to_f64();
    let (q, k, val) = (float(&args[0]), float(&args[1]), float(&args[2]));
    let mask = args.get(3).map(|m| (float(m), m.elem == ElemType::I1));
    let [batch, heads, queries, size] = [0, 1, 2, 3].map(|a| q.shape()[a]);
    let (kv_heads, keys, value_size) = (k.shape()[1], k.shape()[2], val.shape()[3]);
    let group = heads / kv_heads.max(1);
    let a = ops::Attention::new(v.module, v.op).ok_or("not a graph.attention")?;
    let (scale, softcap) = (scale(&a, size as i64), a.softcap());
    let frontier = Frontier::of(&a);
    let mut y = ArrayD::<f64>::zeros(IxDyn(&[batch, heads, queries, value_size]));
    let mut scores = vec![None; keys];
    for b in 0..batch {
        for h in 0..heads {
            let g = h / group;
            for i in 0..queries {
                for (j, score) in scores.iter_mut().enumerate() {
                    let mut s: f64 = (0..size)
                        .map(|d| q[[b, h, i, d]] * k[[b, g, j, d]])
                        .sum::<f64>()
                        * scale;
                    if softcap > 0.0 {
                        s = softcap * (s / softcap).tanh();
                    }
                    let allowed = frontier.allows(i as i64, j as i64);
                    *score = match &mask {
                        _ if !allowed => None,
                        None => Some(s),
                        Some((m, boolean)) => match mask_at(m, [b, h, i, j]) {
                            None => None,
                            Some(x) if *boolean => (x != 0.0).then_some(s),
                            Some(x) if x == f64::NEG_INFINITY => None,
                            Some(x) => Some(s + x),
                        },
                    };
                }
                let max = scores
                    .iter()
                    .flatten()
                    .fold(f64::NEG_INFINITY, |m, &s| m.max(s));
                if max == f64::NEG_INFINITY {
                    continue; // every key masked: zeros
                }
                let weights: Vec<f64> = scores
                    .iter()
                    .map(|s| s.map_or(0.0, |s| (s - max).exp()))
                    .collect();
                let total: f64 = weights.iter().sum();
                for e in 0..value_size {
                    let acc: f64 = (0..keys).map(|j| weights[j] * val[[b, g, j, e]]).sum();
                    y[[b, h, i, e]] = acc / total;
                }
            }
        }
    }
    Ok(vec![Tensor::float(args[0].elem, y)])
}
