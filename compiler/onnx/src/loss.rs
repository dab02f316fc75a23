//! The loss operators, NegativeLogLikelihoodLoss and
//! SoftmaxCrossEntropyLoss, as the graph ops of their ONNX function bodies:
//! the target class's value gathered per element, weighted, and reduced.

use ircc_core::Attribute;
use ircc_dialects::graph::GraphOp;

use crate::attrs::Attrs;
use crate::import::{Importer, Val};
use crate::ops::{attrs, ints_attr};
use crate::proto::NodeProto;
use crate::{ImportError, Result};

impl Importer<'_> {
    /// NegativeLogLikelihoodLoss, or SoftmaxCrossEntropyLoss (the NLL of
    /// the log-softmax along the class axis, which its second output is).
    pub(crate) fn loss(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["reduction", "ignore_index"])?;
        let x = self.required(n, 0)?;
        let target = self.required(n, 1)?;
        let weight = self.input(n, 2)?;
        let reduction = a.s("reduction", "mean");
        if !matches!(reduction.as_str(), "none" | "sum" | "mean") {
            return Err(ImportError::invalid(format!(
                "reduction must be none, sum or mean, not '{reduction}'"
            )));
        }
        if self.type_of(&x).rank() < 2 {
            return Err(ImportError::invalid(
                "the input needs a batch and a class axis",
            ));
        }
        let log_prob = if n.op_type == "SoftmaxCrossEntropyLoss" {
            let at = attrs(vec![("axis", Attribute::i64(1))]);
            let s = self
                .emit(GraphOp::Softmax, vec![x.clone()], at, 1)?
                .remove(0);
            Some(self.un(GraphOp::Log, s)?)
        } else {
            None
        };
        let input = log_prob.clone().unwrap_or(x);
        let elem = self.type_of(&input).elem;
        let target = if self.type_of(&target).elem != ircc_core::ElemType::I64 {
            self.cast(target, ircc_core::ElemType::I64)?
        } else {
            target
        };
        // Ignored elements read class 0 and weigh nothing.
        let ignored = match a.has("ignore_index") {
            true => {
                let index = self.scalar_like(&target, a.i("ignore_index", 0) as f64);
                Some(self.bin(GraphOp::Equal, target.clone(), index)?)
            }
            false => None,
        };
        let class = match &ignored {
            Some(ign) => {
                let zero = self.scalar_like(&target, 0.0);
                self.select(ign.clone(), zero, target)?
            }
            None => target,
        };
        let axis1 = attrs(vec![("axes", ints_attr(vec![1]))]);
        let index = self
            .emit(GraphOp::Unsqueeze, vec![class.clone()], axis1.clone(), 1)?
            .remove(0);
        let at = attrs(vec![("axis", Attribute::i64(1))]);
        let picked = self
            .emit(GraphOp::GatherElements, vec![input, index], at, 1)?
            .remove(0);
        let picked = self
            .emit(GraphOp::Squeeze, vec![picked], axis1, 1)?
            .remove(0);
        let mut weights = match weight {
            Some(w) => {
                let at = attrs(vec![("axis", Attribute::i64(0))]);
                Some(self.emit(GraphOp::Gather, vec![w, class], at, 1)?.remove(0))
            }
            None => None,
        };
        if let Some(ign) = ignored {
            let zero = Val::constant(crate::fold::scalar(0.0, elem));
            let one = Val::constant(crate::fold::scalar(1.0, elem));
            let w = weights.unwrap_or(one);
            weights = Some(self.select(ign, zero, w)?);
        }
        let weighted = match &weights {
            Some(w) => self.bin(GraphOp::Mul, picked, w.clone())?,
            None => picked,
        };
        let loss = self.un(GraphOp::Neg, weighted)?;
        let all = attrs(vec![("keepdims", Attribute::i64(0))]);
        let loss = match (reduction.as_str(), weights) {
            ("none", _) => loss,
            ("sum", _) => self.emit(GraphOp::ReduceSum, vec![loss], all, 1)?.remove(0),
            (_, None) => self
                .emit(GraphOp::ReduceMean, vec![loss], all, 1)?
                .remove(0),
            (_, Some(w)) => {
                // The mean weighs each element: the sum over the weights'
                // sum (w has the target's shape).
                let total = self
                    .emit(GraphOp::ReduceSum, vec![loss], all.clone(), 1)?
                    .remove(0);
                let norm = self.emit(GraphOp::ReduceSum, vec![w], all, 1)?.remove(0);
                self.bin(GraphOp::Div, total, norm)?
            }
        };
        Ok(match log_prob {
            Some(lp) if n.output.len() > 1 => vec![loss, lp],
            _ => vec![loss],
        })
    }
}
