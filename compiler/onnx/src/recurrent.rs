//! RNN, GRU and LSTM, unrolled over their static sequence. The input's
//! product with W is one gemm for every step at once; each step then adds
//! the hidden state's product with R, applies the gates and carries the
//! new state. Shapes follow ONNX's layout 0: X [seq, batch, input], W
//! [directions, gates * hidden, input], R [directions, gates * hidden,
//! hidden], B [directions, 2 * gates * hidden]; layout 1 puts batch first.

use ircc_core::{Attribute, Tensor};
use ircc_dialects::graph::GraphOp;
use ndarray::{ArrayD, IxDyn};

use crate::attrs::Attrs;
use crate::import::{Importer, Val, i64s};
use crate::ops::{attrs, f32_attr};
use crate::proto::NodeProto;
use crate::{ImportError, Result};

/// Unrolling makes a dozen ops a step: past this many steps the module
/// would be mostly the recurrence.
const MAX_STEPS: i64 = 4096;

#[derive(Clone, Copy, PartialEq)]
enum Cell {
    Rnn,
    Gru { linear_before_reset: bool },
    Lstm { input_forget: bool },
}

impl Cell {
    /// How many gates W and R stack, in ONNX's order: RNN's one; GRU's
    /// update, reset and hidden (z, r, h); LSTM's input, output, forget
    /// and cell (i, o, f, c).
    fn gates(self) -> i64 {
        match self {
            Cell::Rnn => 1,
            Cell::Gru { .. } => 3,
            Cell::Lstm { .. } => 4,
        }
    }

    /// The activation functions of one direction: f, then g (GRU, LSTM),
    /// then h (LSTM), each defaulting as the operator specifies.
    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru { .. } => &["Sigmoid", "Tanh"],
            Cell::Lstm { .. } => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// An activation function of a recurrent operator, with its parameters.
#[derive(Clone)]
struct Activation {
    name: String,
    alpha: f64,
    beta: f64,
}

/// The activations of every direction, with `activation_alpha` and
/// `activation_beta` handed in order to those that take them (as
/// onnxruntime reads them).
fn activations(a: &Attrs, cell: Cell, directions: usize) -> Result<Vec<Activation>> {
    let per = cell.default_activations();
    let names: Vec<String> = match a.strings("activations") {
        Some(names) => names,
        None => (0..directions)
            .flat_map(|_| per.iter().map(|s| s.to_string()))
            .collect(),
    };
    if names.len() != per.len() * directions {
        return Err(ImportError::invalid(format!(
            "activations lists {} functions; {} directions of this cell take {}",
            names.len(),
            directions,
            per.len() * directions
        )));
    }
    let mut alphas = a.floats("activation_alpha").unwrap_or_default().into_iter();
    let mut betas = a.floats("activation_beta").unwrap_or_default().into_iter();
    let mut out = Vec::new();
    for name in names {
        // (default alpha, default beta), or None where the function takes neither.
        let defaults = match name.as_str() {
            "Sigmoid" | "Tanh" | "Relu" | "Softsign" | "Softplus" => None,
            "LeakyRelu" => Some((Some(0.01), None)),
            "ThresholdedRelu" | "Elu" => Some((Some(1.0), None)),
            "HardSigmoid" => Some((Some(0.2), Some(0.5))),
            "Affine" | "ScaledTanh" => Some((Some(1.0), Some(0.0))),
            other => {
                return Err(ImportError::unsupported(format!(
                    "activation '{other}' of a recurrent operator is not supported"
                )));
            }
        };
        let (mut alpha, mut beta) = (0.0, 0.0);
        if let Some((da, db)) = defaults {
            if let Some(d) = da {
                alpha = alphas.next().map_or(d, f64::from);
            }
            if let Some(d) = db {
                beta = betas.next().map_or(d, f64::from);
            }
        }
        out.push(Activation { name, alpha, beta });
    }
    Ok(out)
}

/// What one direction's steps compute with: its weights and first state.
struct Direction {
    reverse: bool,
    /// [gates * hidden, hidden]
    r: Val,
    /// X W^T plus the biases that can be added before the step, [seq,
    /// batch, gates * hidden].
    xw: Val,
    /// GRU with `linear_before_reset`: the hidden gate's recurrent bias,
    /// which the reset gate scales.
    hidden_bias: Option<Val>,
    /// LSTM's peepholes: input, output and forget, [hidden] each.
    peepholes: Option<[Val; 3]>,
    activations: Vec<Activation>,
    h: Val,
    c: Option<Val>,
}

impl Importer<'_> {
    /// RNN, GRU and LSTM (opset 7 on; layout from 14).
    pub(crate) fn recurrent(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Val>> {
        let mut known = vec![
            "activation_alpha",
            "activation_beta",
            "activations",
            "clip",
            "direction",
            "hidden_size",
            "layout",
        ];
        let cell = match n.op_type.as_str() {
            "RNN" => Cell::Rnn,
            "GRU" => {
                known.push("linear_before_reset");
                Cell::Gru {
                    linear_before_reset: a.i("linear_before_reset", 0) != 0,
                }
            }
            _ => {
                known.push("input_forget");
                Cell::Lstm {
                    input_forget: a.i("input_forget", 0) != 0,
                }
            }
        };
        a.only(&known)?;
        let x = self.required(n, 0)?;
        let (w, r) = (self.required(n, 1)?, self.required(n, 2)?);
        let batch_first = a.flag("layout", false)?;
        let x = if batch_first {
            self.transpose(x, vec![1, 0, 2])?
        } else {
            x
        };
        let xt = self.type_of(&x);
        let [steps, batch, input] = xt.shape[..] else {
            return Err(ImportError::invalid(format!(
                "X must have 3 axes, not {xt}"
            )));
        };
        if !(1..=MAX_STEPS).contains(&steps) {
            return Err(ImportError::unsupported(format!(
                "a sequence of {steps} steps is not unrolled (1 to {MAX_STEPS} are)"
            )));
        }
        let reversed = match a.s("direction", "forward").as_str() {
            "forward" => vec![false],
            "reverse" => vec![true],
            "bidirectional" => vec![false, true],
            d => return Err(ImportError::invalid(format!("unknown direction '{d}'"))),
        };
        let dirs = reversed.len() as i64;
        let hidden = self.type_of(&r).shape.last().copied().unwrap_or(0);
        if a.has("hidden_size") && a.i("hidden_size", 0) != hidden {
            return Err(ImportError::invalid(format!(
                "hidden_size {} does not match R's last axis, {hidden}",
                a.i("hidden_size", 0)
            )));
        }
        let gh = cell.gates() * hidden;
        let elem = xt.elem;
        let expect = |imp: &Self, v: &Val, what: &str, shape: &[i64]| -> Result<()> {
            let t = imp.type_of(v);
            if t.shape != shape || t.elem != elem {
                return Err(ImportError::invalid(format!(
                    "{what} must be {shape:?} of {elem}, not {t}"
                )));
            }
            Ok(())
        };
        expect(self, &w, "W", &[dirs, gh, input])?;
        expect(self, &r, "R", &[dirs, gh, hidden])?;
        let b = self.input(n, 3)?;
        if let Some(b) = &b {
            expect(self, b, "B", &[dirs, 2 * gh])?;
        }
        let lens = self.input(n, 4)?;
        let state_shape = |batch_first: bool| {
            if batch_first {
                vec![batch, dirs, hidden]
            } else {
                vec![dirs, batch, hidden]
            }
        };
        let mut initial = Vec::new();
        for (i, what) in [(5, "initial_h"), (6, "initial_c")] {
            let v = if i == 6 && !matches!(cell, Cell::Lstm { .. }) {
                None
            } else {
                self.input(n, i)?
            };
            initial.push(match v {
                Some(v) => {
                    expect(self, &v, what, &state_shape(batch_first))?;
                    Some(if batch_first {
                        self.transpose(v, vec![1, 0, 2])?
                    } else {
                        v
                    })
                }
                None => None,
            });
        }
        let peepholes = match cell {
            Cell::Lstm { .. } => self.input(n, 7)?,
            _ => None,
        };
        if let Some(p) = &peepholes {
            expect(self, p, "P", &[dirs, 3 * hidden])?;
        }
        let activations = activations(a, cell, reversed.len())?;
        let per = cell.default_activations().len();
        let clip = a.has("clip").then(|| a.f("clip", 0.0) as f64);
        if let Some(c) = clip.filter(|c| c.is_nan() || *c <= 0.0) {
            return Err(ImportError::invalid(format!(
                "clip must be positive, not {c}"
            )));
        }
        let mask = self.step_mask(lens, steps, batch, &reversed)?;
        let zeros = Val::constant(Tensor::float(
            xt.elem,
            ArrayD::zeros(IxDyn(&[batch as usize, hidden as usize])),
        ));
        let x2 = self.reshape(x, vec![steps * batch, input])?;
        let (mut ys, mut hs, mut cs) = (Vec::new(), Vec::new(), Vec::new());
        for (d, &reverse) in reversed.iter().enumerate() {
            let d = d as i64;
            let w = self.direction_of(&w, d, vec![gh, input])?;
            let r = self.direction_of(&r, d, vec![gh, hidden])?;
            // Every bias but GRU's reset-scaled one is added with X W^T.
            let (bias, hidden_bias) = match &b {
                None => (None, None),
                Some(b) => {
                    let b = self.direction_of(b, d, vec![2 * gh])?;
                    let wb = self.slice_axis(&b, 0, 0, gh)?;
                    let rb = self.slice_axis(&b, 0, gh, 2 * gh)?;
                    match cell {
                        Cell::Gru {
                            linear_before_reset: true,
                        } => {
                            let zr = self.slice_axis(&rb, 0, 0, 2 * hidden)?;
                            let h = self.slice_axis(&rb, 0, 2 * hidden, gh)?;
                            let wzr = self.slice_axis(&wb, 0, 0, 2 * hidden)?;
                            let wh = self.slice_axis(&wb, 0, 2 * hidden, gh)?;
                            let zr = self.bin(GraphOp::Add, wzr, zr)?;
                            (Some(self.concat(vec![zr, wh], 0)?), Some(h))
                        }
                        _ => (Some(self.bin(GraphOp::Add, wb, rb)?), None),
                    }
                }
            };
            let mut operands = vec![x2.clone(), w];
            operands.extend(bias);
            let at = attrs(vec![("trans_b", Attribute::i64(1))]);
            let xw = self.emit(GraphOp::Gemm, operands, at, 1)?.remove(0);
            let xw = self.reshape(xw, vec![steps, batch, gh])?;
            let state = |imp: &mut Self, v: &Option<Val>| match v {
                Some(v) => imp.direction_of(v, d, vec![batch, hidden]),
                None => Ok(zeros.clone()),
            };
            let h = state(self, &initial[0])?;
            let c = match cell {
                Cell::Lstm { .. } => Some(state(self, &initial[1])?),
                _ => None,
            };
            let peepholes = match &peepholes {
                Some(p) => {
                    let p = self.direction_of(p, d, vec![3 * hidden])?;
                    Some([
                        self.slice_axis(&p, 0, 0, hidden)?,
                        self.slice_axis(&p, 0, hidden, 2 * hidden)?,
                        self.slice_axis(&p, 0, 2 * hidden, 3 * hidden)?,
                    ])
                }
                None => None,
            };
            let first = d as usize * per;
            let dir = Direction {
                reverse,
                r,
                xw,
                hidden_bias,
                peepholes,
                activations: activations[first..first + per].to_vec(),
                h,
                c,
            };
            let (y, h, c) = self.unroll(cell, dir, steps, hidden, clip, &mask, n)?;
            ys.extend(y);
            hs.push(self.reshape(h, vec![1, batch, hidden])?);
            if let Some(c) = c {
                cs.push(self.reshape(c, vec![1, batch, hidden])?);
            }
        }
        let mut out = Vec::new();
        let y_h = self.concat(hs, 0)?;
        let y_h = if batch_first {
            self.transpose(y_h, vec![1, 0, 2])?
        } else {
            y_h
        };
        if wanted(n, 0) {
            // Each direction's steps in time order, [seq, 1, batch, hidden].
            let per_dir: Vec<Val> = ys
                .chunks(steps as usize)
                .map(|c| self.concat(c.to_vec(), 0))
                .collect::<Result<_>>()?;
            let y = self.concat(per_dir, 1)?;
            out.push(if batch_first {
                self.transpose(y, vec![2, 0, 1, 3])?
            } else {
                y
            });
        } else {
            // An output nobody reads: a place holder, never defined.
            out.push(y_h.clone());
        }
        out.push(y_h);
        if !cs.is_empty() && wanted(n, 2) {
            let y_c = self.concat(cs, 0)?;
            out.push(if batch_first {
                self.transpose(y_c, vec![1, 0, 2])?
            } else {
                y_c
            });
        }
        Ok(out)
    }

    /// The steps of one direction: each step's output [1, 1, batch,
    /// hidden] in time order (when the node's Y is read), and the last
    /// hidden and cell states.
    #[allow(clippy::too_many_arguments)]
    fn unroll(
        &mut self,
        cell: Cell,
        mut dir: Direction,
        steps: i64,
        hidden: i64,
        clip: Option<f64>,
        mask: &Option<Vec<Val>>,
        n: &NodeProto,
    ) -> Result<(Vec<Val>, Val, Option<Val>)> {
        let batch = self.type_of(&dir.h).shape[0];
        let gh = cell.gates() * hidden;
        let mut ys = vec![None; steps as usize];
        let order: Vec<i64> = if dir.reverse {
            (0..steps).rev().collect()
        } else {
            (0..steps).collect()
        };
        let recur = |imp: &mut Self, h: Val, r: Val| -> Result<Val> {
            let at = attrs(vec![("trans_b", Attribute::i64(1))]);
            Ok(imp.emit(GraphOp::Gemm, vec![h, r], at, 1)?.remove(0))
        };
        for t in order {
            let xw = self.slice_axis(&dir.xw, 0, t, t + 1)?;
            let xw = self.reshape(xw, vec![batch, gh])?;
            let gate = |imp: &mut Self, v: &Val, k: i64| {
                imp.slice_axis(v, 1, k * hidden, (k + 1) * hidden)
            };
            let (h, c) = match cell {
                Cell::Rnn => {
                    let hr = recur(self, dir.h.clone(), dir.r.clone())?;
                    let pre = self.bin(GraphOp::Add, xw, hr)?;
                    (self.activate(&dir.activations[0], pre, clip)?, None)
                }
                Cell::Gru {
                    linear_before_reset,
                } => {
                    let rzr = self.slice_axis(&dir.r, 0, 0, 2 * hidden)?;
                    let rh = self.slice_axis(&dir.r, 0, 2 * hidden, gh)?;
                    let hr = recur(self, dir.h.clone(), rzr)?;
                    let z = gate(self, &xw, 0)?;
                    let hz = gate(self, &hr, 0)?;
                    let z = self.bin(GraphOp::Add, z, hz)?;
                    let z = self.activate(&dir.activations[0], z, clip)?;
                    let rg = gate(self, &xw, 1)?;
                    let hrg = gate(self, &hr, 1)?;
                    let rg = self.bin(GraphOp::Add, rg, hrg)?;
                    let rg = self.activate(&dir.activations[0], rg, clip)?;
                    let recurrent = if linear_before_reset {
                        let mut hh = recur(self, dir.h.clone(), rh)?;
                        if let Some(bias) = &dir.hidden_bias {
                            hh = self.bin(GraphOp::Add, hh, bias.clone())?;
                        }
                        self.bin(GraphOp::Mul, rg, hh)?
                    } else {
                        let reset = self.bin(GraphOp::Mul, rg, dir.h.clone())?;
                        recur(self, reset, rh)?
                    };
                    let xh = gate(self, &xw, 2)?;
                    let pre = self.bin(GraphOp::Add, xh, recurrent)?;
                    let candidate = self.activate(&dir.activations[1], pre, clip)?;
                    // (1 - z) candidate + z h = candidate + z (h - candidate)
                    let keep = self.bin(GraphOp::Sub, dir.h.clone(), candidate.clone())?;
                    let keep = self.bin(GraphOp::Mul, z, keep)?;
                    (self.bin(GraphOp::Add, candidate, keep)?, None)
                }
                Cell::Lstm { input_forget } => {
                    let c_prev = dir.c.clone().expect("an LSTM carries a cell state");
                    let hr = recur(self, dir.h.clone(), dir.r.clone())?;
                    let pre = self.bin(GraphOp::Add, xw, hr)?;
                    let peep = |imp: &mut Self, v: Val, k: usize, c: &Val| match &dir.peepholes {
                        Some(p) => {
                            let pc = imp.bin(GraphOp::Mul, p[k].clone(), c.clone())?;
                            imp.bin(GraphOp::Add, v, pc)
                        }
                        None => Ok(v),
                    };
                    let (f, g, h) = (
                        &dir.activations[0],
                        &dir.activations[1],
                        &dir.activations[2],
                    );
                    let i = gate(self, &pre, 0)?;
                    let i = peep(self, i, 0, &c_prev)?;
                    let i = self.activate(f, i, clip)?;
                    let forget = if input_forget {
                        let one = self.scalar_like(&i, 1.0);
                        self.bin(GraphOp::Sub, one, i.clone())?
                    } else {
                        let fg = gate(self, &pre, 2)?;
                        let fg = peep(self, fg, 2, &c_prev)?;
                        self.activate(f, fg, clip)?
                    };
                    let cand = gate(self, &pre, 3)?;
                    let cand = self.activate(g, cand, clip)?;
                    let kept = self.bin(GraphOp::Mul, forget, c_prev)?;
                    let added = self.bin(GraphOp::Mul, i, cand)?;
                    let c = self.bin(GraphOp::Add, kept, added)?;
                    let o = gate(self, &pre, 1)?;
                    let o = peep(self, o, 1, &c)?;
                    let o = self.activate(f, o, clip)?;
                    let hc = self.activate(h, c.clone(), None)?;
                    (self.bin(GraphOp::Mul, o, hc)?, Some(c))
                }
            };
            // Past a batch entry's sequence length its state stays and its
            // output is zero.
            let (h, y) = match mask {
                Some(masks) => {
                    let m = masks[t as usize].clone();
                    let zero = self.scalar_like(&h, 0.0);
                    let y = self.select(m.clone(), h.clone(), zero)?;
                    dir.c = match (c, dir.c.take()) {
                        (Some(c), Some(prev)) => Some(self.select(m.clone(), c, prev)?),
                        (c, _) => c,
                    };
                    (self.select(m, h, dir.h.clone())?, y)
                }
                None => {
                    if c.is_some() {
                        dir.c = c;
                    }
                    (h.clone(), h)
                }
            };
            dir.h = h;
            if wanted(n, 0) {
                ys[t as usize] = Some(self.reshape(y, vec![1, 1, batch, hidden])?);
            }
        }
        Ok((ys.into_iter().flatten().collect(), dir.h, dir.c))
    }

    /// For each step, which batch entries it is within the sequence of:
    /// [batch, 1] booleans, from `sequence_lens`. None where every entry
    /// runs every step.
    fn step_mask(
        &mut self,
        lens: Option<Val>,
        steps: i64,
        batch: i64,
        reversed: &[bool],
    ) -> Result<Option<Vec<Val>>> {
        let Some(lens) = lens else { return Ok(None) };
        let lt = self.type_of(&lens);
        if lt.shape != [batch] || !lt.elem.is_int() {
            return Err(ImportError::invalid(format!(
                "sequence_lens must be [{batch}] integers, not {lt}"
            )));
        }
        if let Some(known) = self.known_constant_for(&lens, "sequence_lens") {
            let lens = i64s(&known);
            if let Some(l) = lens.iter().find(|&&l| !(0..=steps).contains(&l)) {
                return Err(ImportError::invalid(format!(
                    "sequence length {l} is outside 0..={steps}"
                )));
            }
            if lens.iter().all(|&l| l == steps) {
                return Ok(None);
            }
        }
        // A reverse direction starts each entry at its own last step:
        // shorter entries would need their steps realigned.
        if reversed.contains(&true) {
            return Err(ImportError::unsupported(
                "sequence_lens shorter than the sequence, with a reverse direction",
            ));
        }
        let lens = self.reshape(lens, vec![batch, 1])?;
        (0..steps)
            .map(|t| {
                let t = self.scalar_like(&lens, t as f64);
                self.bin(GraphOp::Less, t, lens.clone())
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// Direction `d` of a per-direction tensor, reshaped to `shape`.
    fn direction_of(&mut self, v: &Val, d: i64, shape: Vec<i64>) -> Result<Val> {
        let s = self.slice_axis(v, 0, d, d + 1)?;
        self.reshape(s, shape)
    }

    /// A recurrent activation of `x`, clipped to ±`clip` first.
    fn activate(&mut self, f: &Activation, x: Val, clip: Option<f64>) -> Result<Val> {
        let x = match clip {
            Some(c) => self.clip(x, (-c, c))?,
            None => x,
        };
        let (alpha, beta) = (f.alpha, f.beta);
        match f.name.as_str() {
            "Sigmoid" => self.un(GraphOp::Sigmoid, x),
            "Tanh" => self.un(GraphOp::Tanh, x),
            "Relu" => self.un(GraphOp::Relu, x),
            "LeakyRelu" => {
                let at = attrs(vec![("alpha", f32_attr(alpha))]);
                Ok(self.emit(GraphOp::LeakyRelu, vec![x], at, 1)?.remove(0))
            }
            "HardSigmoid" => {
                let at = attrs(vec![("alpha", f32_attr(alpha)), ("beta", f32_attr(beta))]);
                Ok(self.emit(GraphOp::HardSigmoid, vec![x], at, 1)?.remove(0))
            }
            "Affine" => {
                let ax = self.bin(GraphOp::Mul, x.clone(), self.scalar_like(&x, alpha))?;
                self.bin(GraphOp::Add, ax, self.scalar_like(&x, beta))
            }
            "ScaledTanh" => {
                let bx = self.bin(GraphOp::Mul, x.clone(), self.scalar_like(&x, beta))?;
                let t = self.un(GraphOp::Tanh, bx)?;
                self.bin(GraphOp::Mul, t, self.scalar_like(&x, alpha))
            }
            "Softsign" => self.softsign(x),
            "Softplus" => self.softplus(x),
            "Elu" => self.elu(x, alpha, 1.0),
            _ => self.thresholded_relu(x, alpha),
        }
    }
}

/// Whether the node's output `i` is read.
fn wanted(n: &NodeProto, i: usize) -> bool {
    n.output.get(i).is_some_and(|s| !s.is_empty())
}
