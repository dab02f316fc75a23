//! Rewrite rules as data: the rule files of `spec/rules.md`, read at run
//! time. A rule is a pattern over ops of any dialect, conditions on the
//! values it binds, and a replacement:
//!
//! ```text
//! (rule exp-product
//!   (graph.mul (graph.exp ?a) (graph.exp ?b))
//!   => (graph.exp (graph.add ?a ?b)))
//! ```
//!
//! Two engines run them. [`apply::ApplyRules`] (the `rules` pass) matches
//! patterns directly on the IR and rewrites where the replacement computes
//! fewer FLOPs, as DNNFusion's rewriting does; `graph.math-rewrite`
//! compiles rules over its algebra to egg rewrites and saturates
//! (`crate::graph::math`). [`check`] finds the rules that can never fire
//! and the ones that overlap.

pub mod apply;
pub mod check;
mod parse;

use std::sync::Arc;

use ircc_core::{Attribute, Diagnostic, Location};

pub use parse::parse_rules;

/// The rules of one file, in the order written.
#[derive(Clone, Debug)]
pub struct RuleSet {
    pub rules: Vec<Rule>,
}

#[derive(Clone, Debug)]
pub struct Rule {
    pub name: String,
    pub loc: Location,
    /// What the rule matches: its root is an op.
    pub pattern: Pattern,
    /// Every condition must hold for a match to be rewritten.
    pub conditions: Vec<Condition>,
    pub replacement: Pattern,
}

#[derive(Clone, Debug)]
pub enum Pattern {
    /// `?a`: any value; a variable bound twice binds the same value.
    Var(String, Location),
    /// `1.0`: a constant whose elements all equal the number (in a
    /// replacement: a scalar constant of the root's element type).
    Number(f64, Location),
    Op(OpPattern),
}

/// `(graph.reduce_sum ?x {keepdims = 0, axes = ?axes})`.
#[derive(Clone, Debug)]
pub struct OpPattern {
    pub name: String,
    pub loc: Location,
    pub operands: Vec<Pattern>,
    pub attrs: Vec<(String, AttrPattern)>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum AttrPattern {
    /// Binds the attribute as the op has it, or its absence.
    Var(String),
    Value(Attribute),
}

/// `(scalar ?s)`, `(constant ?c)`, `(same-shape ?a ?b)`, `(rank ?x 2)`.
#[derive(Clone, Debug, PartialEq)]
pub enum Condition {
    /// The value has one element.
    Scalar(String),
    /// The value is a constant known at compile time.
    Constant(String),
    SameShape(String, String),
    Rank(String, i64),
}

impl Condition {
    /// The variables the condition reads.
    pub fn vars(&self) -> Vec<&str> {
        match self {
            Condition::Scalar(v) | Condition::Constant(v) | Condition::Rank(v, _) => vec![v],
            Condition::SameShape(a, b) => vec![a, b],
        }
    }
}

impl Pattern {
    pub fn loc(&self) -> &Location {
        match self {
            Pattern::Var(_, l) | Pattern::Number(_, l) => l,
            Pattern::Op(o) => &o.loc,
        }
    }

    /// Every op pattern in this one, outermost first.
    pub fn ops(&self) -> Vec<&OpPattern> {
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(p) = stack.pop() {
            if let Pattern::Op(o) = p {
                out.push(o);
                stack.extend(o.operands.iter().rev());
            }
        }
        out
    }
}

/// A rule file's error as a pass's constructor reports it: where, what,
/// and its notes.
pub fn describe(d: &Diagnostic) -> String {
    let mut out = format!("{}: {}", d.loc, d.message);
    for n in &d.notes {
        out.push_str(&format!(" ({}: {})", n.loc, n.message));
    }
    out
}

impl RuleSet {
    /// The rules of the file at `path` (read by `files::read_spec_file`).
    pub fn read(path: &str) -> Result<RuleSet, Diagnostic> {
        let text = ircc_core::files::read_spec_file(path).map_err(Diagnostic::plain)?;
        parse_rules(&text, Some(Arc::from(path)))
    }
}
