//! What a rule file's syntax cannot show: rules that can never fire (an op
//! no dialect declares, an attribute the op does not have, an operand
//! count it never takes, an impossible condition) and rules that overlap,
//! as ISLE reports them.

use std::collections::HashMap;

use ircc_core::registry::kind_accepts;
use ircc_core::{Diagnostic, Registry};

use super::{AttrPattern, Condition, OpPattern, Pattern, Rule, RuleSet};

/// Why `rule` can never fire, if it cannot.
fn never_fires(rule: &Rule, registry: &Registry) -> Option<Diagnostic> {
    let why = |o: &OpPattern, what: String| {
        Some(Diagnostic::warning(
            o.loc.clone(),
            format!("rule '{}' can never fire: {what}", rule.name),
        ))
    };
    for o in rule.pattern.ops().into_iter().chain(rule.replacement.ops()) {
        let Some(def) = registry.get(&o.name) else {
            return why(o, format!("'{}' is not a registered op", o.name));
        };
        let (min, max) = def.spec.operand_range();
        if o.operands.len() < min || max.is_some_and(|m| o.operands.len() > m) {
            return why(
                o,
                format!(
                    "'{}' takes {} operand{}, not {}",
                    o.name,
                    match max {
                        Some(m) if m == min => m.to_string(),
                        Some(m) => format!("{min} to {m}"),
                        None => format!("at least {min}"),
                    },
                    if max == Some(1) { "" } else { "s" },
                    o.operands.len()
                ),
            );
        }
        if def.spec.result_range() != (1, Some(1)) {
            return why(o, format!("'{}' does not have one result", o.name));
        }
        for (name, value) in &o.attrs {
            let Some(spec) = def.spec.attrs.get(name) else {
                return why(o, format!("'{}' has no attribute '{name}'", o.name));
            };
            if let AttrPattern::Value(a) = value
                && !kind_accepts(spec.kind, a)
            {
                return why(
                    o,
                    format!("'{}': {a} is not a value of attribute '{name}'", o.name),
                );
            }
        }
    }
    let mut ranks: HashMap<&str, i64> = HashMap::new();
    for c in &rule.conditions {
        if let Condition::Rank(v, n) = c {
            if *n < 0 {
                return Some(Diagnostic::warning(
                    rule.loc.clone(),
                    format!("rule '{}' can never fire: (rank {v} {n})", rule.name),
                ));
            }
            if let Some(m) = ranks.insert(v, *n).filter(|m| m != n) {
                return Some(Diagnostic::warning(
                    rule.loc.clone(),
                    format!(
                        "rule '{}' can never fire: {v} cannot have rank {m} and {n}",
                        rule.name
                    ),
                ));
            }
        }
    }
    None
}

/// Whether some op could match both patterns: the same op names and
/// operand counts down every branch both spell out, and no attribute both
/// give with different values. (Variables are taken to match anything,
/// so two patterns that differ only in a repeated variable overlap.)
pub fn overlap(a: &Pattern, b: &Pattern) -> bool {
    match (a, b) {
        (Pattern::Var(..), _) | (_, Pattern::Var(..)) => true,
        (Pattern::Number(x, _), Pattern::Number(y, _)) => x == y,
        (Pattern::Op(x), Pattern::Op(y)) => {
            x.name == y.name
                && x.operands.len() == y.operands.len()
                && x.operands
                    .iter()
                    .zip(&y.operands)
                    .all(|(p, q)| overlap(p, q))
                && x.attrs.iter().all(|(k, v)| {
                    match (v, y.attrs.iter().find(|(l, _)| l == k).map(|(_, w)| w)) {
                        (AttrPattern::Value(p), Some(AttrPattern::Value(q))) => p == q,
                        _ => true,
                    }
                })
        }
        _ => false,
    }
}

/// A rule file checked: the rules that can fire, and the warnings — each
/// rule that can never fire, and each pair of rules that can match the
/// same ops.
pub fn check<'r>(rules: &'r RuleSet, registry: &Registry) -> (Vec<&'r Rule>, Vec<Diagnostic>) {
    let mut out: Vec<Diagnostic> = Vec::new();
    let mut live = Vec::new();
    for rule in &rules.rules {
        match never_fires(rule, registry) {
            Some(d) => out.push(d),
            None => live.push(rule),
        }
    }
    // Only rules of one root op can overlap; a file of very many rules
    // of one root is not checked pair by pair.
    let mut by_root: indexmap::IndexMap<&str, Vec<&Rule>> = indexmap::IndexMap::new();
    for &rule in &live {
        if let Pattern::Op(o) = &rule.pattern {
            by_root.entry(o.name.as_str()).or_default().push(rule);
        }
    }
    for (root, rules) in by_root {
        if rules.len() > MAX_OVERLAP_CHECKED {
            out.push(Diagnostic::warning(
                rules[0].loc.clone(),
                format!(
                    "{} rules match '{root}': more than {MAX_OVERLAP_CHECKED}, so they are not checked for overlaps",
                    rules.len()
                ),
            ));
            continue;
        }
        overlaps(&rules, &mut out);
    }
    (live, out)
}

/// The most rules of one root op checked pair by pair for overlaps.
const MAX_OVERLAP_CHECKED: usize = 1000;

/// A warning for each rule that can match the same ops as rules before
/// it: one a rule, naming the first and counting the others, so that a
/// file of many alike rules warns as many times as it has rules, not
/// once a pair (1,000 rules of one root: 1,000 lines, not 500,000).
fn overlaps(live: &[&Rule], out: &mut Vec<Diagnostic>) {
    for (j, b) in live.iter().enumerate() {
        let mut earlier = live[..j].iter().filter(|a| overlap(&a.pattern, &b.pattern));
        let Some(a) = earlier.next() else {
            continue;
        };
        let more = match earlier.count() {
            0 => String::new(),
            1 => format!(" (as can 1 more rule before '{}')", b.name),
            n => format!(" (as can {n} more rules before '{}')", b.name),
        };
        out.push(
            Diagnostic::warning(
                b.loc.clone(),
                format!(
                    "rules '{}' and '{}' can match the same ops{more}: where both do, the one that saves more FLOPs is applied, '{}' on a tie",
                    a.name, b.name, a.name
                ),
            )
            .with_note(a.loc.clone(), format!("'{}' is here", a.name)),
        );
    }
}
