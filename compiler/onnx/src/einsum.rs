//! Einsum, imported as a broadcast product and a sum: every operand is
//! transposed to one order of all the equation's letters (sizes of one
//! for letters it lacks), the operands are multiplied, a letter repeated
//! within one operand (a diagonal) is matched by an identity mask, and the
//! letters the output lacks are summed. The product has every letter's
//! size at once, so it is refused past `MAX_PRODUCT` elements.

use std::collections::HashMap;

use ircc_core::{Attribute, Attributes, Tensor};
use ircc_dialects::graph::GraphOp;
use ndarray::{ArrayD, IxDyn};

use crate::attrs::Attrs;
use crate::import::{Importer, Val};
use crate::ops::{attrs, ints_attr};
use crate::proto::NodeProto;
use crate::{ImportError, Result};

/// The most elements the broadcast product may have.
const MAX_PRODUCT: i64 = 1 << 26;

/// An equation's terms with `...` spelt out as letters of their own
/// (uppercase, which ONNX leaves to the ellipsis) and the output
/// explicit.
struct Equation {
    inputs: Vec<Vec<char>>,
    output: Vec<char>,
}

fn parse(equation: &str, ranks: &[usize]) -> Result<Equation> {
    let bad = |why: &str| ImportError::invalid(format!("Einsum equation '{equation}': {why}"));
    let text: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match text.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (text.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ranks.len() {
        return Err(bad(&format!(
            "{} terms for {} inputs",
            terms.len(),
            ranks.len()
        )));
    }
    let letters = |term: &str| -> Result<(Vec<char>, bool)> {
        let ellipsis = term.contains("...");
        let rest = term.replacen("...", "", 1);
        if rest.chars().any(|c| !c.is_ascii_lowercase()) {
            return Err(bad("terms hold lowercase letters and at most one '...'"));
        }
        Ok((term.chars().filter(|c| *c != '.').collect(), ellipsis))
    };
    // Each operand's ellipsis covers its axes the letters do not; they
    // align to the right, as numpy broadcasts.
    let mut covered = Vec::new();
    for (term, &rank) in terms.iter().zip(ranks) {
        let (named, ellipsis) = letters(term)?;
        let extra = rank
            .checked_sub(named.len())
            .ok_or_else(|| bad("a term longer than its input"))?;
        if extra > 0 && !ellipsis {
            return Err(bad("a term shorter than its input"));
        }
        covered.push(if ellipsis { extra } else { 0 });
    }
    let widest = covered.iter().copied().max().unwrap_or(0);
    if widest > 26 {
        return Err(bad("an ellipsis of more than 26 axes"));
    }
    let broadcast: Vec<char> = (0..widest).map(|i| (b'A' + i as u8) as char).collect();
    let spell = |term: &str, n: usize| -> String {
        let own: String = broadcast[widest - n..].iter().collect();
        term.replacen("...", &own, 1)
    };
    let inputs: Vec<Vec<char>> = terms
        .iter()
        .zip(&covered)
        .map(|(t, &n)| spell(t, n).chars().collect())
        .collect();
    let output: Vec<char> = match rhs {
        Some(r) => {
            if r.replacen("...", "", 1)
                .chars()
                .any(|c| !c.is_ascii_lowercase())
            {
                return Err(bad(
                    "the output holds lowercase letters and at most one '...'",
                ));
            }
            spell(r, widest).chars().collect()
        }
        // Implicit: the ellipsis, then the letters that occur once, sorted.
        None => {
            let mut once: Vec<char> = ('a'..='z')
                .filter(|c| inputs.iter().flatten().filter(|x| *x == c).count() == 1)
                .collect();
            let mut out = broadcast.clone();
            out.append(&mut once);
            out
        }
    };
    for (i, c) in output.iter().enumerate() {
        if output[..i].contains(c) || !inputs.iter().flatten().any(|x| x == c) {
            return Err(bad(&format!(
                "output letter '{c}' is repeated or in no input"
            )));
        }
    }
    Ok(Equation { inputs, output })
}

impl Importer<'_> {
    pub(crate) fn einsum(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["equation"])?;
        let operands = (0..n.input.len())
            .map(|i| self.required(n, i))
            .collect::<Result<Vec<_>>>()?;
        let types: Vec<_> = operands.iter().map(|v| self.type_of(v)).collect();
        let ranks: Vec<usize> = types.iter().map(|t| t.rank()).collect();
        let eq = parse(&a.s("equation", ""), &ranks)?;

        // A letter's second occurrence in one operand becomes a fresh
        // letter, tied to the first by an identity mask.
        let mut fresh = ('a'..='z')
            .chain('A'..='Z')
            .filter(|c| !eq.inputs.iter().flatten().any(|x| x == c) && !eq.output.contains(c));
        let mut ties: Vec<(char, char)> = Vec::new();
        let mut terms = Vec::new();
        for term in &eq.inputs {
            let mut unique: Vec<char> = Vec::new();
            for &c in term {
                if unique.contains(&c) {
                    let f = fresh
                        .next()
                        .ok_or_else(|| ImportError::unsupported("Einsum with too many letters"))?;
                    ties.push((c, f));
                    unique.push(f);
                } else {
                    unique.push(c);
                }
            }
            terms.push(unique);
        }
        let mut order: Vec<char> = Vec::new();
        let mut size: HashMap<char, i64> = HashMap::new();
        for (term, ty) in terms.iter().zip(&types) {
            for (&c, &d) in term.iter().zip(&ty.shape) {
                if !order.contains(&c) {
                    order.push(c);
                }
                let s = size.entry(c).or_insert(d);
                if *s != d && *s != 1 && d != 1 {
                    return Err(ImportError::invalid(format!(
                        "Einsum letter '{c}' has sizes {s} and {d}"
                    )));
                }
                *s = (*s).max(d);
            }
        }
        let fits = order
            .iter()
            .try_fold(1i64, |n, c| n.checked_mul(size[c]))
            .is_some_and(|n| n <= MAX_PRODUCT);
        if !fits {
            return Err(ImportError::unsupported(format!(
                "Einsum whose broadcast product has more than {MAX_PRODUCT} elements"
            )));
        }

        // Each operand in the common order, with ones for letters it lacks.
        let mut product: Option<Val> = None;
        for ((term, x), ty) in terms.iter().zip(operands).zip(&types) {
            let mine: Vec<char> = order.iter().copied().filter(|c| term.contains(c)).collect();
            let perm: Vec<i64> = mine
                .iter()
                .map(|c| term.iter().position(|x| x == c).unwrap_or(0) as i64)
                .collect();
            let mut x = x;
            if perm.iter().enumerate().any(|(i, &p)| p != i as i64) {
                let at = attrs(vec![("perm", ints_attr(perm))]);
                x = self.emit(GraphOp::Transpose, vec![x], at, 1)?.remove(0);
            }
            let shape: Vec<i64> = order
                .iter()
                .map(|c| match term.iter().position(|x| x == c) {
                    Some(i) => ty.shape[i],
                    None => 1,
                })
                .collect();
            if shape.len() != ty.rank() {
                x = self.reshape(x, shape)?;
            }
            product = Some(match product {
                None => x,
                Some(p) => self.bin(GraphOp::Mul, p, x)?,
            });
        }
        let mut product = product.ok_or_else(|| ImportError::invalid("Einsum of no inputs"))?;
        for (c, f) in ties {
            let (i, j) = (
                order.iter().position(|x| *x == c).unwrap_or(0),
                order.iter().position(|x| *x == f).unwrap_or(0),
            );
            let mut shape = vec![1; order.len()];
            shape[i] = size[&c] as usize;
            shape[j] = size[&f] as usize;
            let eye = ArrayD::from_shape_fn(IxDyn(&shape), |k| k[i] == k[j]);
            let zero = self.scalar_like(&product, 0.0);
            product = self
                .emit(
                    GraphOp::Where,
                    vec![Val::constant(Tensor::bool(eye)), product, zero],
                    Attributes::new(),
                    1,
                )?
                .remove(0);
        }
        let summed: Vec<i64> = (0..order.len())
            .filter(|&i| !eq.output.contains(&order[i]))
            .map(|i| i as i64)
            .collect();
        if !summed.is_empty() {
            let at = attrs(vec![
                ("axes", ints_attr(summed)),
                ("keepdims", Attribute::i64(0)),
            ]);
            product = self
                .emit(GraphOp::ReduceSum, vec![product], at, 1)?
                .remove(0);
        }
        let kept: Vec<char> = order
            .iter()
            .copied()
            .filter(|c| eq.output.contains(c))
            .collect();
        let perm: Vec<i64> = eq
            .output
            .iter()
            .map(|c| kept.iter().position(|x| x == c).unwrap_or(0) as i64)
            .collect();
        if perm.iter().enumerate().any(|(i, &p)| p != i as i64) {
            let at = attrs(vec![("perm", ints_attr(perm))]);
            product = self
                .emit(GraphOp::Transpose, vec![product], at, 1)?
                .remove(0);
        }
        Ok(vec![product])
    }
}
