//! RotaryEmbedding, the position encoding of LLM decoders, imported as
//! slices of each head rotated by the cos and sin caches.

use ircc_core::Attribute;
use ircc_dialects::graph::GraphOp;

use crate::attrs::Attrs;
use crate::import::{Importer, Val};
use crate::ops::{attrs, ints_attr};
use crate::proto::NodeProto;
use crate::{ImportError, Result};

impl Importer<'_> {
    /// RotaryEmbedding (opset 23): the first `rotary_embedding_dim` of each
    /// head's elements, as pairs (the two halves, or `interleaved`
    /// neighbours), rotated by the angle whose cos and sin the caches hold
    /// for the position (`position_ids` picks the caches' rows); the rest
    /// pass. Computed on [batch, sequence, heads, head size].
    pub(crate) fn rotary_embedding(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["interleaved", "num_heads", "rotary_embedding_dim"])?;
        let x = self.required(n, 0)?;
        let (mut cos, mut sin) = (self.required(n, 1)?, self.required(n, 2)?);
        let ty = self.type_of(&x);
        let four = match ty.shape[..] {
            [b, h, s, d] => {
                let at = attrs(vec![("perm", ints_attr(vec![0, 2, 1, 3]))]);
                let t = self.emit(GraphOp::Transpose, vec![x], at, 1)?.remove(0);
                (t, [b, s, h, d])
            }
            [b, s, hidden] => {
                let heads = a.i("num_heads", 0);
                if heads <= 0 || hidden % heads != 0 {
                    return Err(ImportError::invalid(
                        "RotaryEmbedding of a 3-D input needs num_heads dividing its last axis",
                    ));
                }
                let shape = vec![b, s, heads, hidden / heads];
                let r = self.reshape(x, shape.clone())?;
                (r, [b, s, heads, hidden / heads])
            }
            _ => {
                return Err(ImportError::invalid(
                    "RotaryEmbedding's input must have 3 or 4 axes",
                ));
            }
        };
        let (x, [b, s, h, d]) = four;
        let dim = match a.i("rotary_embedding_dim", 0) {
            0 => d,
            r => r,
        };
        if dim % 2 != 0 || dim > d || dim <= 0 {
            return Err(ImportError::invalid(format!(
                "RotaryEmbedding's rotary_embedding_dim {dim} is not an even size up to the head's {d}"
            )));
        }
        let half = dim / 2;
        if let Some(positions) = self.input(n, 3)? {
            let at = attrs(vec![("axis", Attribute::i64(0))]);
            cos = self
                .emit(GraphOp::Gather, vec![cos, positions.clone()], at.clone(), 1)?
                .remove(0);
            sin = self
                .emit(GraphOp::Gather, vec![sin, positions], at, 1)?
                .remove(0);
        }
        for cache in [&cos, &sin] {
            if self.type_of(cache).shape != [b, s, half] {
                return Err(ImportError::invalid(format!(
                    "RotaryEmbedding's caches must give [{b}, {s}, {half}] for the positions, not {}",
                    self.type_of(cache)
                )));
            }
        }
        let cos = self.reshape(cos, vec![b, s, 1, half])?;
        let sin = self.reshape(sin, vec![b, s, 1, half])?;
        let (first, second) = if a.i("interleaved", 0) != 0 {
            (
                self.last_axis(&x, 0, dim, 2)?,
                self.last_axis(&x, 1, dim, 2)?,
            )
        } else {
            (
                self.last_axis(&x, 0, half, 1)?,
                self.last_axis(&x, half, dim, 1)?,
            )
        };
        let product = |me: &mut Self, p: &Val, q: &Val| me.bin(GraphOp::Mul, p.clone(), q.clone());
        let (c1, s2) = (product(self, &cos, &first)?, product(self, &sin, &second)?);
        let real = self.bin(GraphOp::Sub, c1, s2)?;
        let (s1, c2) = (product(self, &sin, &first)?, product(self, &cos, &second)?);
        let imag = self.bin(GraphOp::Add, s1, c2)?;
        let mut rotated = if a.i("interleaved", 0) != 0 {
            let real = self.reshape(real, vec![b, s, h, half, 1])?;
            let imag = self.reshape(imag, vec![b, s, h, half, 1])?;
            let pairs = self.concat(vec![real, imag], 4)?;
            self.reshape(pairs, vec![b, s, h, dim])?
        } else {
            self.concat(vec![real, imag], 3)?
        };
        if dim < d {
            let rest = self.last_axis(&x, dim, d, 1)?;
            rotated = self.concat(vec![rotated, rest], 3)?;
        }
        Ok(vec![match ty.rank() {
            4 => {
                let at = attrs(vec![("perm", ints_attr(vec![0, 2, 1, 3]))]);
                self.emit(GraphOp::Transpose, vec![rotated], at, 1)?
                    .remove(0)
            }
            _ => self.reshape(rotated, ty.shape.clone())?,
        }])
    }
}
