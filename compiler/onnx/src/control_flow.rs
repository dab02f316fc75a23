//! If, Loop and Scan, imported by inlining their bodies: If's branch on a
//! known condition, Loop's body once per iteration while its trip count
//! and condition are known, Scan's body once per element of its sequence.
//! Each inlined body sees the enclosing values and its own, which vanish
//! when it ends, so an unrolled body defines its names afresh each time.

use ircc_core::{ElemType, Tensor};
use ndarray::arr0;

use crate::attrs::Attrs;
use crate::import::{Importer, Val, scalar_i64};
use crate::ops::rank_axis;
use crate::proto::{GraphProto, NodeProto};
use crate::{ImportError, Result};

/// The most iterations a Loop or Scan is unrolled to.
const MAX_ITERATIONS: i64 = 4096;

/// The most nodes the unrolled bodies of one model may add, so that
/// nested loops cannot multiply into a hang.
const MAX_INLINED_NODES: usize = 1 << 20;

fn body<'a>(a: &Attrs<'a>, name: &str) -> Result<&'a GraphProto> {
    a.graph(name)
        .ok_or_else(|| ImportError::invalid(format!("attribute '{name}' (a graph) is missing")))
}

impl Importer<'_> {
    /// If: the branch its condition picks, which must be known.
    pub(crate) fn if_then_else(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["then_branch", "else_branch"])?;
        let cond = self
            .constant_input(n, 0, "cond")?
            .ok_or_else(|| ImportError::invalid("If needs its condition"))?;
        if cond.elem != ElemType::I1 {
            return Err(ImportError::invalid(format!(
                "If's condition must be a bool, not {}",
                cond.elem
            )));
        }
        let taken = match cond.to_i64().iter().collect::<Vec<_>>()[..] {
            [&c] => c != 0,
            _ => return Err(ImportError::invalid("If's condition must hold one value")),
        };
        let branch = if taken { "then_branch" } else { "else_branch" };
        let g = body(a, branch)?;
        if g.output.len() != n.output.len() {
            return Err(ImportError::invalid(format!(
                "If's {branch} has {} outputs for the node's {}",
                g.output.len(),
                n.output.len()
            )));
        }
        self.inline(g, Vec::new())
            .map_err(|e| e.context(format!("If's {branch}")))
    }

    /// Loop: the body unrolled while the iteration is below the trip count
    /// and the condition holds; both must be known at import. Returns the
    /// final loop-carried values, then each scan output stacked.
    pub(crate) fn unrolled_loop(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&["body"])?;
        let g = body(a, "body")?;
        let trips = match self.constant_input(n, 0, "M")? {
            Some(m) if m.elem != ElemType::I64 => {
                return Err(ImportError::invalid(format!(
                    "Loop's M must be an int64, not {}",
                    m.elem
                )));
            }
            Some(m) => Some(scalar_i64(&m, "M")?),
            None => None,
        };
        let has_cond = self.input(n, 1)?.is_some();
        let mut going = match self.constant_input(n, 1, "cond")? {
            Some(c) if c.elem != ElemType::I1 => {
                return Err(ImportError::invalid(format!(
                    "Loop's cond must be a bool, not {}",
                    c.elem
                )));
            }
            Some(c) => scalar_i64(&c, "cond")? != 0,
            None => true,
        };
        let mut carried: Vec<Val> = (2..n.input.len())
            .map(|i| self.required(n, i))
            .collect::<Result<_>>()?;
        let formal = formal_inputs(g).len();
        if formal != 2 + carried.len() {
            return Err(ImportError::invalid(format!(
                "Loop's body takes {formal} inputs; the iteration, the condition and {} carried values make {}",
                carried.len(),
                2 + carried.len()
            )));
        }
        let scans = g
            .output
            .len()
            .checked_sub(1 + carried.len())
            .ok_or_else(|| {
                ImportError::invalid(format!(
                    "Loop's body has {} outputs, fewer than its condition and {} carried values",
                    g.output.len(),
                    carried.len()
                ))
            })?;
        let mut stacked: Vec<Vec<Val>> = vec![Vec::new(); scans];
        let mut i = 0;
        while going && trips.is_none_or(|m| i < m) {
            if i >= MAX_ITERATIONS {
                return Err(ImportError::unsupported(format!(
                    "a Loop of more than {MAX_ITERATIONS} iterations is not unrolled"
                )));
            }
            let mut inputs = vec![
                Val::constant(Tensor::int(ElemType::I64, arr0(i).into_dyn())),
                Val::constant(Tensor::bool(arr0(going).into_dyn())),
            ];
            inputs.append(&mut carried);
            let mut outs = self
                .inline(g, inputs)
                .map_err(|e| e.context(format!("Loop's body, iteration {i}")))?;
            let cond = outs.remove(0);
            let elements = outs.split_off(outs.len() - scans);
            carried = outs;
            for (k, v) in elements.into_iter().enumerate() {
                stacked[k].push(v);
            }
            if has_cond {
                let c = self
                    .known_constant_for(&cond, "Loop's condition")
                    .ok_or_else(|| {
                        ImportError::unsupported(
                            "a Loop whose condition depends on the model's inputs is not unrolled",
                        )
                    })?;
                going = scalar_i64(&c, "the body's condition")? != 0;
            }
            i += 1;
        }
        let mut out = carried;
        for elements in stacked {
            out.push(self.stack(elements, 0, false, "Loop")?);
        }
        Ok(out)
    }

    /// Scan (opset 9 on): the body once per index of the scan inputs' axes,
    /// carrying its state; each scan output stacked along its axis.
    pub(crate) fn unrolled_scan(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        a.only(&[
            "body",
            "num_scan_inputs",
            "scan_input_axes",
            "scan_input_directions",
            "scan_output_axes",
            "scan_output_directions",
        ])?;
        if self.opset < 9 {
            return Err(ImportError::unsupported(
                "Scan before opset 9 (with a batch axis and sequence_lens) is not supported",
            ));
        }
        let g = body(a, "body")?;
        let inputs: Vec<Val> = (0..n.input.len())
            .map(|i| self.required(n, i))
            .collect::<Result<_>>()?;
        let m = a.i("num_scan_inputs", 0);
        if !(1..=inputs.len() as i64).contains(&m) {
            return Err(ImportError::invalid(format!(
                "num_scan_inputs {m} is not between 1 and the {} inputs",
                inputs.len()
            )));
        }
        let (mut state, sequences) = {
            let mut v = inputs;
            let seq = v.split_off(v.len() - m as usize);
            (v, seq)
        };
        let per = |name: &str, count: usize| -> Result<Vec<i64>> {
            let v = a.ints(name).unwrap_or_else(|| vec![0; count]);
            if v.len() != count {
                return Err(ImportError::invalid(format!(
                    "{name} lists {} values for {count}",
                    v.len()
                )));
            }
            Ok(v)
        };
        let in_axes = per("scan_input_axes", sequences.len())?;
        let in_dirs = per("scan_input_directions", sequences.len())?;
        if formal_inputs(g).len() != state.len() + sequences.len() {
            return Err(ImportError::invalid(format!(
                "Scan's body takes {} inputs for {} states and {} scanned inputs",
                formal_inputs(g).len(),
                state.len(),
                sequences.len()
            )));
        }
        let scans = g
            .output
            .len()
            .checked_sub(state.len())
            .ok_or_else(|| ImportError::invalid("Scan's body has fewer outputs than states"))?;
        let out_axes = per("scan_output_axes", scans)?;
        let out_dirs = per("scan_output_directions", scans)?;
        if let Some(d) = in_dirs.iter().chain(&out_dirs).find(|&&d| d != 0 && d != 1) {
            return Err(ImportError::invalid(format!(
                "a scan direction is 0 (forward) or 1 (reverse), not {d}"
            )));
        }
        let mut axes = Vec::new();
        let mut length = None;
        for (s, &ax) in sequences.iter().zip(&in_axes) {
            let t = self.type_of(s);
            let ax = rank_axis(ax, t.rank())?;
            if *length.get_or_insert(t.shape[ax]) != t.shape[ax] {
                return Err(ImportError::invalid(
                    "Scan's inputs differ in the length of their scanned axes",
                ));
            }
            axes.push(ax);
        }
        let length = length.unwrap_or(0);
        if length > MAX_ITERATIONS {
            return Err(ImportError::unsupported(format!(
                "a Scan of more than {MAX_ITERATIONS} steps is not unrolled"
            )));
        }
        let mut stacked: Vec<Vec<Val>> = vec![Vec::new(); scans];
        for t in 0..length {
            let mut args = std::mem::take(&mut state);
            for ((s, &ax), &dir) in sequences.iter().zip(&axes).zip(&in_dirs) {
                let at = if dir != 0 { length - 1 - t } else { t };
                let slice = self.slice_axis(s, ax as i64, at, at + 1)?;
                let mut shape = self.type_of(&slice).shape;
                shape.remove(ax);
                args.push(self.reshape(slice, shape)?);
            }
            let mut outs = self
                .inline(g, args)
                .map_err(|e| e.context(format!("Scan's body, step {t}")))?;
            let rest = outs.split_off(outs.len() - scans);
            state = outs;
            for (k, v) in rest.into_iter().enumerate() {
                stacked[k].push(v);
            }
        }
        let mut out = state;
        for ((elements, &ax), &dir) in stacked.into_iter().zip(&out_axes).zip(&out_dirs) {
            out.push(self.stack(elements, ax, dir != 0, "Scan")?);
        }
        Ok(out)
    }

    /// The values stacked along a new axis `axis` (in reverse if asked).
    fn stack(&mut self, mut elements: Vec<Val>, axis: i64, reverse: bool, op: &str) -> Result<Val> {
        let Some(first) = elements.first() else {
            return Err(ImportError::unsupported(format!(
                "a {op} that runs no iteration has scan outputs of unknown shape"
            )));
        };
        let rank = self.type_of(first).rank();
        let ax = rank_axis(axis, rank + 1)?;
        if reverse {
            elements.reverse();
        }
        let mut parts = Vec::new();
        for e in elements {
            let mut shape = self.type_of(&e).shape;
            shape.insert(ax, 1);
            parts.push(self.reshape(e, shape)?);
        }
        self.concat(parts, ax as i64)
    }
}

/// A body's inputs: those it lists that are not initializers.
fn formal_inputs(g: &GraphProto) -> Vec<&str> {
    g.input
        .iter()
        .map(|i| i.name.as_str())
        .filter(|name| !g.initializer.iter().any(|t| t.name == *name))
        .collect()
}

impl Importer<'_> {
    /// Imports `g`'s nodes with its inputs bound to `inputs` (beside the
    /// enclosing values), and returns its outputs; the names it defines
    /// are forgotten afterwards.
    pub(crate) fn inline(&mut self, g: &GraphProto, inputs: Vec<Val>) -> Result<Vec<Val>> {
        let formal = formal_inputs(g);
        if formal.len() != inputs.len() {
            return Err(ImportError::invalid(format!(
                "the graph takes {} inputs, but is given {}",
                formal.len(),
                inputs.len()
            )));
        }
        self.inlined_nodes = self.inlined_nodes.saturating_add(g.node.len());
        if self.inlined_nodes > MAX_INLINED_NODES {
            return Err(ImportError::unsupported(format!(
                "unrolling adds more than {MAX_INLINED_NODES} nodes"
            )));
        }
        let saved = self.scope();
        let result = self.inline_in_scope(g, &formal, inputs);
        self.restore_scope(saved);
        result
    }

    fn inline_in_scope(
        &mut self,
        g: &GraphProto,
        formal: &[&str],
        inputs: Vec<Val>,
    ) -> Result<Vec<Val>> {
        for (name, v) in formal.iter().zip(inputs) {
            self.bind_name(name, v);
        }
        for t in &g.initializer {
            let tensor = crate::tensor::to_stored(t, &self.external)
                .map_err(|e| e.context(format!("initializer '{}'", t.name)))?;
            self.bind_name(&t.name, Val::stored(tensor));
        }
        for (i, node) in g.node.iter().enumerate() {
            self.import_node(i, node)?;
        }
        g.output
            .iter()
            .map(|o| self.value(&o.name).map_err(|e| e.context("graph output")))
            .collect()
    }
}
