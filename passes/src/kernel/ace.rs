//! `kernel.ace`: common address-calculation elimination (Romou §4.1,
//! Algorithm 1). Within each kernel.func, the address expressions of the
//! loads and stores (the results of their affine maps over index values)
//! are read as sums of terms; the largest subexpression that occurs more
//! than once, or that a loop recomputes although none of its values change
//! in that loop, becomes a `kernel.apply` computed once, and is replaced
//! everywhere it occurs; then the next largest, until none is left. Each
//! new value is placed just before its first use in the innermost block
//! that holds all its uses, and out of every loop whose body it does not
//! depend on. The printers of every language print what this leaves, so
//! WGSL and OpenCL C both get named addresses and no repeated ones.
//!
//! Sums are compared as multisets of terms with their coefficients, so
//! `a + b + 16` and `b + (a + 32)` share `a + b`. Then every index
//! computation and constant leaves the loops it does not depend on, and
//! one that repeats an earlier one is replaced by it. The address counts
//! before the pass go on each kernel as `ace.before` (divmod, addr_ops,
//! and both as executed per invocation), for `ircc stats`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use ircc_core::ir::ValueDef;
use ircc_core::pass::{Pass, PassContext};
use ircc_core::{
    AffineExpr, AffineMap, Attribute, BlockId, Module, OpBuilder, OpId, Type, ValueId,
};
use ircc_dialects::kernel::KernelOp;
use ircc_dialects::kernel::address::{address_counts, index_operands};

use crate::decl::KernelAceOptions;

/// The discardable attribute with a kernel's address counts before the
/// pass: `[divmod, addr_ops, divmod_executed, addr_ops_executed]`.
pub const BEFORE: &str = "ace.before";

/// How many subexpressions one kernel may name.
const MAX_NAMED: usize = 256;

/// The candidate subexpressions one kernel's rounds may look at in all:
/// each round looks at every address again, so a kernel of very many
/// addresses gets fewer rounds (the largest common subexpressions still
/// go first), and the pass stays linear in the kernel's size.
const MAX_WORK: usize = 1_000_000;

pub struct Ace;

impl Pass for Ace {
    fn name(&self) -> &str {
        KernelAceOptions::NAME
    }

    fn run(&mut self, module: &mut Module, _: &PassContext) -> ircc_core::pass::PassResult {
        let kernels: Vec<OpId> = module.blocks[module.body]
            .ops
            .iter()
            .copied()
            .filter(|&op| KernelOp::of(module, op) == Some(KernelOp::Func))
            .collect();
        for k in kernels {
            if module.op(k).attr(BEFORE).is_none() {
                let c = address_counts(module, k);
                let before = [c.divmod, c.addr_ops, c.divmod_executed, c.addr_ops_executed];
                module.op_mut(k).attrs.insert(
                    BEFORE.into(),
                    Attribute::DenseI64Array(before.iter().map(|&x| x as i64).collect()),
                );
            }
            eliminate(module, k);
        }
        Ok(())
    }
}

/// A term's factor: an index value, a named subexpression, or an
/// operation that is not a sum.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Atom {
    Value(ValueId),
    Named(usize),
    Div(Div, Box<Sum>, Box<Sum>),
    Mul(Box<Sum>, Box<Sum>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Div {
    Floor,
    Ceil,
    Mod,
}

/// `constant + Σ coefficient · atom`, the terms sorted by atom and none
/// with a zero coefficient: equal sums are equal values.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Sum {
    terms: BTreeMap<Atom, i64>,
    constant: i64,
}

impl Sum {
    fn atom(a: Atom) -> Sum {
        Sum {
            terms: BTreeMap::from([(a, 1)]),
            constant: 0,
        }
    }

    /// The sum of two sums; `None` where a coefficient overflows.
    fn add(mut self, o: Sum) -> Option<Sum> {
        for (a, c) in o.terms {
            let e = self.terms.entry(a).or_insert(0);
            *e = e.checked_add(c)?;
        }
        self.terms.retain(|_, c| *c != 0);
        self.constant = self.constant.checked_add(o.constant)?;
        Some(self)
    }

    /// `k` times the sum; `None` where a coefficient overflows.
    fn scale(mut self, k: i64) -> Option<Sum> {
        if k == 0 {
            return Some(Sum::default());
        }
        for c in self.terms.values_mut() {
            *c = c.checked_mul(k)?;
        }
        self.constant = self.constant.checked_mul(k)?;
        Some(self)
    }

    fn as_const(&self) -> Option<i64> {
        self.terms.is_empty().then_some(self.constant)
    }

    fn from_expr(e: &AffineExpr, operands: &[ValueId]) -> Option<Sum> {
        use AffineExpr as E;
        let sub = |x: &E| Sum::from_expr(x, operands);
        Some(match e {
            E::Dim(i) => Sum::atom(Atom::Value(*operands.get(*i as usize)?)),
            E::Sym(_) => return None,
            E::Const(c) => Sum {
                terms: BTreeMap::new(),
                constant: *c,
            },
            E::Add(a, b) => sub(a)?.add(sub(b)?)?,
            E::Mul(a, b) => {
                let (a, b) = (sub(a)?, sub(b)?);
                match (a.as_const(), b.as_const()) {
                    (_, Some(k)) => a.scale(k)?,
                    (Some(k), _) => b.scale(k)?,
                    _ => Sum::atom(Atom::Mul(Box::new(a), Box::new(b))),
                }
            }
            E::FloorDiv(a, b) => {
                Sum::atom(Atom::Div(Div::Floor, Box::new(sub(a)?), Box::new(sub(b)?)))
            }
            E::CeilDiv(a, b) => {
                Sum::atom(Atom::Div(Div::Ceil, Box::new(sub(a)?), Box::new(sub(b)?)))
            }
            E::Mod(a, b) => Sum::atom(Atom::Div(Div::Mod, Box::new(sub(a)?), Box::new(sub(b)?))),
        })
    }

    /// Operations this sum prints as.
    fn size(&self) -> usize {
        let terms: usize = self
            .terms
            .iter()
            .map(|(a, &c)| a.size() + usize::from(c != 1))
            .sum();
        let parts = self.terms.len() + usize::from(self.constant != 0);
        terms + parts.saturating_sub(1)
    }

    /// The sum without its constant.
    fn variable_part(&self) -> Sum {
        Sum {
            terms: self.terms.clone(),
            constant: 0,
        }
    }

    /// Whether `part` (no constant) is in this sum: its terms are this
    /// sum's with the same coefficients or, for a single atom, any.
    fn contains(&self, part: &Sum) -> bool {
        if let Some((a, _)) = single(part) {
            return self.terms.contains_key(a);
        }
        part.terms.iter().all(|(a, c)| self.terms.get(a) == Some(c))
    }

    /// Replaces `part` by `Named(k)` here and in every atom inside;
    /// returns how many times it occurred.
    fn replace(&mut self, part: &Sum, k: usize) -> usize {
        let mut n = 0;
        if !part.terms.is_empty() && self.contains(part) {
            // The coefficient `Named(k)` takes: the atom's own, or one.
            let c = single(part).map_or(1, |(a, _)| self.terms[a]);
            let merged = self
                .terms
                .get(&Atom::Named(k))
                .map_or(Some(c), |&old| old.checked_add(c));
            // An overflowing coefficient leaves this occurrence as it is.
            if let Some(merged) = merged {
                n += 1;
                for a in part.terms.keys() {
                    self.terms.remove(a);
                }
                self.terms.insert(Atom::Named(k), merged);
            }
        }
        let atoms: Vec<Atom> = self.terms.keys().cloned().collect();
        for a in atoms {
            let mut b = a.clone();
            let inner = match &mut b {
                Atom::Div(_, x, y) | Atom::Mul(x, y) => x.replace(part, k) + y.replace(part, k),
                Atom::Value(_) | Atom::Named(_) => 0,
            };
            if inner > 0 {
                let c = self.terms.remove(&a).unwrap_or(0);
                match self
                    .terms
                    .get(&b)
                    .map_or(Some(c), |&old| old.checked_add(c))
                {
                    Some(merged) => {
                        self.terms.insert(b, merged);
                    }
                    // Two atoms became one whose coefficients overflow:
                    // keep the original.
                    None => {
                        self.terms.insert(a, c);
                        continue;
                    }
                }
                n += inner;
            }
        }
        self.terms.retain(|_, c| *c != 0);
        n
    }

    /// Every subexpression worth naming: the variable part of this sum
    /// and of the sums inside, and every division and product.
    fn candidates(&self, out: &mut Vec<Sum>) {
        let part = self.variable_part();
        let lone = single(&part).is_some();
        if part.size() > 0 {
            out.push(part);
        }
        for a in self.terms.keys() {
            if let Atom::Div(_, x, y) | Atom::Mul(x, y) = a {
                // A lone atom is the variable part already pushed.
                if !lone {
                    out.push(Sum::atom(a.clone()));
                }
                x.candidates(out);
                y.candidates(out);
            }
        }
    }

    /// The index values and named subexpressions this sum reads.
    fn leaves(&self, out: &mut BTreeSet<Atom>) {
        for a in self.terms.keys() {
            match a {
                Atom::Value(_) | Atom::Named(_) => {
                    out.insert(a.clone());
                }
                Atom::Div(_, x, y) | Atom::Mul(x, y) => {
                    x.leaves(out);
                    y.leaves(out);
                }
            }
        }
    }

    /// The expression over dimensions `dims` (extended as leaves appear).
    fn to_expr(&self, dims: &mut Vec<Atom>) -> AffineExpr {
        let mut e: Option<AffineExpr> = None;
        for (a, &c) in &self.terms {
            let t = a.to_expr(dims);
            let t = if c == 1 {
                t
            } else {
                t * AffineExpr::constant(c)
            };
            e = Some(match e {
                Some(e) => AffineExpr::Add(Box::new(e), Box::new(t)),
                None => t,
            });
        }
        match e {
            None => AffineExpr::constant(self.constant),
            Some(e) if self.constant == 0 => e,
            Some(e) => AffineExpr::Add(Box::new(e), Box::new(AffineExpr::constant(self.constant))),
        }
    }
}

fn single(s: &Sum) -> Option<(&Atom, &i64)> {
    (s.terms.len() == 1 && s.constant == 0)
        .then(|| s.terms.iter().next())
        .flatten()
        .filter(|(_, c)| **c == 1)
}

impl Atom {
    fn size(&self) -> usize {
        match self {
            Atom::Value(_) | Atom::Named(_) => 0,
            Atom::Div(_, x, y) | Atom::Mul(x, y) => 1 + x.size() + y.size(),
        }
    }

    fn to_expr(&self, dims: &mut Vec<Atom>) -> AffineExpr {
        let b = |x: &Sum, dims: &mut Vec<Atom>| Box::new(x.to_expr(dims));
        match self {
            Atom::Value(_) | Atom::Named(_) => {
                let i = match dims.iter().position(|d| d == self) {
                    Some(i) => i,
                    None => {
                        dims.push(self.clone());
                        dims.len() - 1
                    }
                };
                AffineExpr::dim(i as u32)
            }
            Atom::Div(kind, x, y) => {
                let (x, y) = (b(x, dims), b(y, dims));
                match kind {
                    Div::Floor => AffineExpr::FloorDiv(x, y),
                    Div::Ceil => AffineExpr::CeilDiv(x, y),
                    Div::Mod => AffineExpr::Mod(x, y),
                }
            }
            Atom::Mul(x, y) => AffineExpr::Mul(b(x, dims), b(y, dims)),
        }
    }
}

/// An op with an address map, read as sums.
struct Site {
    op: OpId,
    first: usize,
    sums: Vec<Sum>,
    /// The innermost kernel.for around the op.
    in_loop: Option<OpId>,
    changed: bool,
}

/// The op that holds `block`, if any.
fn holder(m: &Module, block: BlockId) -> Option<OpId> {
    m.blocks[block].parent.and_then(|r| m.regions[r].parent)
}

fn defining_block(m: &Module, v: ValueId) -> Option<BlockId> {
    match m.value(v).def {
        ValueDef::OpResult { op, .. } => m.op(op).parent,
        ValueDef::BlockArg { block, .. } => Some(block),
    }
}

/// Whether `op` (a block holder) encloses `block`.
fn encloses(m: &Module, op: OpId, mut block: BlockId) -> bool {
    while let Some(h) = holder(m, block) {
        if h == op {
            return true;
        }
        match m.op(h).parent {
            Some(b) => block = b,
            None => return false,
        }
    }
    false
}

fn innermost_loop(m: &Module, op: OpId) -> Option<OpId> {
    let mut block = m.op(op).parent?;
    loop {
        let h = holder(m, block)?;
        if KernelOp::of(m, h) == Some(KernelOp::For) {
            return Some(h);
        }
        block = m.op(h).parent?;
    }
}

fn eliminate(m: &mut Module, kernel: OpId) {
    let Some(body) = m.entry_block(kernel) else {
        return;
    };
    let mut sites = Vec::new();
    let mut ops = Vec::new();
    m.walk_block(body, &mut |op| ops.push(op));
    for op in ops {
        let Some(first) = KernelOp::of(m, op).and_then(index_operands) else {
            continue;
        };
        let Some(Attribute::AffineMap(map)) = m.op(op).attr("map") else {
            continue;
        };
        let operands = &m.op(op).operands[first..];
        let Some(sums) = map
            .results
            .iter()
            .map(|e| Sum::from_expr(e, operands))
            .collect::<Option<Vec<_>>>()
        else {
            continue;
        };
        sites.push(Site {
            op,
            first,
            sums,
            in_loop: innermost_loop(m, op),
            changed: false,
        });
    }
    // The named subexpressions, largest first.
    let mut named: Vec<Sum> = Vec::new();
    let mut work = 0;
    while named.len() < MAX_NAMED && work < MAX_WORK {
        let (best, looked_at) = best_candidate(m, &sites, &named);
        work += looked_at + sites.len();
        let Some(best) = best else {
            break;
        };
        let k = named.len();
        for s in &mut sites {
            for sum in &mut s.sums {
                if sum.replace(&best, k) > 0 {
                    s.changed = true;
                }
            }
        }
        for d in &mut named {
            d.replace(&best, k);
        }
        named.push(best);
    }
    if !named.is_empty() {
        materialize(m, &mut sites, &named);
    }
    hoist_invariants(m, body);
    merge_duplicates(m, body, &mut Vec::new());
}

/// Whether an op computes an index or constant from its operands alone.
fn is_pure_index(m: &Module, op: OpId) -> bool {
    matches!(
        KernelOp::of(m, op),
        Some(KernelOp::Apply | KernelOp::Constant)
    )
}

/// Moves every `kernel.apply` and `kernel.constant` out of each loop whose
/// body none of its operands are defined in (loop-invariant code motion).
fn hoist_invariants(m: &mut Module, body: BlockId) {
    let mut ops = Vec::new();
    m.walk_block(body, &mut |op| {
        if is_pure_index(m, op) {
            ops.push(op)
        }
    });
    for op in ops {
        while let Some(block) = m.op(op).parent
            && let Some(h) = holder(m, block)
            && KernelOp::of(m, h) == Some(KernelOp::For)
            && !m
                .op(op)
                .operands
                .iter()
                .any(|&v| defining_block(m, v).is_some_and(|d| encloses(m, h, d)))
        {
            m.blocks[block].ops.retain(|&o| o != op);
            m.insert_before(h, op);
        }
    }
}

/// Replaces each `kernel.apply` and `kernel.constant` that repeats one
/// before it, in its block or a block around it, by that one, and each
/// apply of the identity map by its operand.
fn merge_duplicates(m: &mut Module, block: BlockId, scopes: &mut Vec<HashMap<String, ValueId>>) {
    scopes.push(HashMap::new());
    for op in m.blocks[block].ops.clone() {
        if is_pure_index(m, op) {
            let o = m.op(op);
            // `apply (d0) -> (d0)` is its operand.
            if let Some(Attribute::AffineMap(map)) = o.attr("map")
                && let ([AffineExpr::Dim(0)], [x]) = (map.results.as_slice(), o.operands.as_slice())
            {
                let (r, x) = (o.results[0], *x);
                m.replace_all_uses(r, x);
                m.erase_op(op);
                continue;
            }
            let key = format!("{} {:?} {:?}", o.name, o.attrs, o.operands);
            let r = o.results[0];
            match scopes.iter().rev().find_map(|s| s.get(&key)) {
                Some(&earlier) => {
                    m.replace_all_uses(r, earlier);
                    m.erase_op(op);
                }
                None => {
                    if let Some(s) = scopes.last_mut() {
                        s.insert(key, r);
                    }
                }
            }
            continue;
        }
        for r in m.op(op).regions.clone() {
            for b in m.regions[r].blocks.clone() {
                merge_duplicates(m, b, scopes);
            }
        }
    }
    scopes.pop();
}

/// The largest subexpression that occurs twice, or that a loop
/// recomputes with values defined outside it, and how many candidates it
/// looked at.
fn best_candidate(m: &Module, sites: &[Site], named: &[Sum]) -> (Option<Sum>, usize) {
    let mut counts: HashMap<Sum, (usize, bool)> = HashMap::new();
    let mut looked_at = 0;
    let mut seen = Vec::new();
    for s in sites {
        for sum in &s.sums {
            seen.clear();
            sum.candidates(&mut seen);
            // A loop-invariant part of an address inside a loop.
            if let Some(l) = s.in_loop {
                let invariant = Sum {
                    terms: sum
                        .terms
                        .iter()
                        .filter(|(a, _)| invariant_in(m, a, l, named))
                        .map(|(a, c)| (a.clone(), *c))
                        .collect(),
                    constant: 0,
                };
                if invariant.size() > 0 && invariant.terms.len() < sum.terms.len() {
                    seen.push(invariant);
                }
            }
            looked_at += seen.len();
            for c in seen.drain(..) {
                let hoists = s
                    .in_loop
                    .is_some_and(|l| c.terms.keys().all(|a| invariant_in(m, a, l, named)));
                let e = counts.entry(c).or_insert((0, false));
                e.0 += 1;
                e.1 |= hoists;
            }
        }
    }
    for d in named {
        seen.clear();
        d.candidates(&mut seen);
        for c in seen.drain(1..) {
            counts.entry(c).or_insert((0, false)).0 += 1;
        }
    }
    let best = counts
        .into_iter()
        .filter(|(c, (n, hoists))| c.size() > 0 && (*n >= 2 || *hoists))
        .max_by(|(a, _), (b, _)| a.size().cmp(&b.size()).then_with(|| b.cmp(a)))
        .map(|(c, _)| c);
    (best, looked_at)
}

/// Whether no leaf of `a` is defined inside loop `l`.
fn invariant_in(m: &Module, a: &Atom, l: OpId, named: &[Sum]) -> bool {
    let mut leaves = BTreeSet::new();
    Sum::atom(a.clone()).leaves(&mut leaves);
    leaves.iter().all(|leaf| match leaf {
        Atom::Value(v) => defining_block(m, *v).is_none_or(|b| !encloses(m, l, b)),
        Atom::Named(k) => named[*k].terms.keys().all(|a| invariant_in(m, a, l, named)),
        _ => true,
    })
}

/// Creates the `kernel.apply` of every named subexpression, places it,
/// and rewrites the sites that use them.
fn materialize(m: &mut Module, sites: &mut [Site], named: &[Sum]) {
    let index = Type::Index;
    // Smallest (last named) first: a larger one reads the smaller ones.
    let mut values: Vec<Option<ValueId>> = vec![None; named.len()];
    let mut applies: Vec<Option<OpId>> = vec![None; named.len()];
    for k in (0..named.len()).rev() {
        let mut dims = Vec::new();
        let e = named[k].to_expr(&mut dims);
        let operands: Vec<ValueId> = dims.iter().map(|d| leaf_value(d, &values)).collect();
        let op = m.create_op(
            OpBuilder::new(KernelOp::Apply.name())
                .operands(operands)
                .results([index.clone()])
                .attr(
                    "map",
                    Attribute::AffineMap(AffineMap::new(dims.len() as u32, 0, vec![e])),
                ),
        );
        values[k] = Some(m.op(op).results[0]);
        applies[k] = Some(op);
    }
    // Rewrite the sites, then place each apply before its users, the
    // largest (their users' users) first.
    for s in sites.iter_mut().filter(|s| s.changed) {
        // An apply that is exactly a named subexpression is that value.
        if KernelOp::of(m, s.op) == Some(KernelOp::Apply)
            && let [sum] = s.sums.as_slice()
            && let Some((Atom::Named(k), _)) = single(sum)
        {
            let old = m.op(s.op).results[0];
            m.replace_all_uses(old, leaf_value(&Atom::Named(*k), &values));
            m.erase_op(s.op);
            continue;
        }
        let mut dims = Vec::new();
        let results: Vec<AffineExpr> = s.sums.iter().map(|x| x.to_expr(&mut dims)).collect();
        let old = m.op(s.op).clone();
        let mut operands = old.operands[..s.first].to_vec();
        operands.extend(dims.iter().map(|d| leaf_value(d, &values)));
        let mut attrs = old.attrs.clone();
        attrs.insert(
            "map".into(),
            Attribute::AffineMap(AffineMap::new(dims.len() as u32, 0, results)),
        );
        let types: Vec<Type> = old
            .results
            .iter()
            .map(|&r| m.value_type(r).clone())
            .collect();
        let new = m.create_op(
            OpBuilder::new(old.name.clone())
                .operands(operands)
                .results(types)
                .attrs(attrs)
                .loc(old.loc.clone()),
        );
        m.insert_before(s.op, new);
        for (a, b) in old.results.iter().zip(m.op(new).results.clone()) {
            m.replace_all_uses(*a, b);
        }
        m.erase_op(s.op);
        s.op = new;
    }
    // Each apply is placed once every apply that reads it is placed or
    // dropped (an apply that a rewritten site became can make a smaller
    // one read a larger one).
    let mut pending: Vec<usize> = (0..named.len()).collect();
    while !pending.is_empty() {
        let before = pending.len();
        pending.retain(|&k| {
            let (Some(op), Some(v)) = (applies[k], values[k]) else {
                return false;
            };
            let users: Vec<OpId> = m.value(v).uses.iter().map(|u| u.op).collect();
            // Readers outside any block are applies still to place.
            if users.iter().any(|u| m.op(*u).parent.is_none()) {
                return true;
            }
            match placement(m, op, &users) {
                Some(anchor) => m.insert_before(anchor, op),
                // Absorbed entirely by larger subexpressions.
                None => m.erase_op(op),
            }
            false
        });
        if pending.len() == before {
            break;
        }
    }
}

fn leaf_value(leaf: &Atom, values: &[Option<ValueId>]) -> ValueId {
    match leaf {
        Atom::Value(v) => *v,
        Atom::Named(k) => values[*k].expect("a named subexpression is created before its users"),
        Atom::Div(..) | Atom::Mul(..) => unreachable!("dimensions are leaves"),
    }
}

/// The op `apply` goes before: in the innermost block holding every user,
/// before the first op there that holds one, then before every loop
/// around it that none of its operands are defined in.
fn placement(m: &Module, apply: OpId, users: &[OpId]) -> Option<OpId> {
    // Each user's chain of (block, op holding the user in that block).
    let chains: Vec<Vec<(BlockId, OpId)>> = users
        .iter()
        .map(|&u| {
            let mut chain = Vec::new();
            let mut op = u;
            while let Some(b) = m.op(op).parent {
                chain.push((b, op));
                match holder(m, b) {
                    Some(h) if KernelOp::of(m, h) != Some(KernelOp::Func) => op = h,
                    _ => break,
                }
            }
            chain.reverse();
            chain
        })
        .collect();
    let first = chains.first()?;
    let mut depth = 0;
    while depth < first.len()
        && chains
            .iter()
            .all(|c| c.get(depth).map(|x| x.0) == Some(first[depth].0))
    {
        depth += 1;
    }
    let level = depth.checked_sub(1)?;
    let block = first[level].0;
    let position = |op: OpId| m.blocks[block].ops.iter().position(|&o| o == op);
    let mut anchor = chains
        .iter()
        .filter_map(|c| c.get(level).map(|x| x.1))
        .min_by_key(|&o| position(o).unwrap_or(usize::MAX))?;
    // Out of the loops around it that it does not depend on, through the
    // applies it reads that are not placed yet.
    let mut operands = Vec::new();
    let mut stack = m.op(apply).operands.clone();
    while let Some(v) = stack.pop() {
        match m.value(v).def {
            ValueDef::OpResult { op, .. } if m.op(op).parent.is_none() => {
                stack.extend(m.op(op).operands.iter().copied());
            }
            _ => operands.push(v),
        }
    }
    let mut at = anchor;
    while let Some(b) = m.op(at).parent {
        let Some(h) = holder(m, b) else { break };
        if KernelOp::of(m, h) == Some(KernelOp::Func)
            || operands
                .iter()
                .any(|&v| defining_block(m, v).is_some_and(|d| encloses(m, h, d)))
        {
            break;
        }
        at = h;
        if KernelOp::of(m, h) == Some(KernelOp::For) {
            anchor = h;
        }
    }
    Some(anchor)
}
