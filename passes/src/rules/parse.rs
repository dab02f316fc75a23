//! Rule files: text to [`RuleSet`], every error with its line and column.

use std::collections::HashMap;
use std::sync::Arc;

use ircc_core::limits::MAX_NESTING;
use ircc_core::{Diagnostic, Location, parse_attribute};
use pest::Parser;
use pest::iterators::Pair;

use super::{AttrPattern, Condition, OpPattern, Pattern, Rule as RuleDef, RuleSet};

#[derive(pest_derive::Parser)]
#[grammar = "rules/rules.pest"]
struct RulesGrammar;

/// Parses a rule file; `file` names it in diagnostics.
pub fn parse_rules(text: &str, file: Option<Arc<str>>) -> Result<RuleSet, Diagnostic> {
    let p = RulesParser { text, file };
    p.check_nesting()?;
    let mut pairs = RulesGrammar::parse(Rule::file, text).map_err(|e| p.syntax_error(e))?;
    let file_pair = pairs.next().expect("the grammar's file rule");
    let mut rules: Vec<RuleDef> = Vec::new();
    for pair in file_pair.into_inner() {
        if pair.as_rule() != Rule::rule {
            continue;
        }
        let rule = p.rule(pair)?;
        if let Some(first) = rules.iter().find(|r| r.name == rule.name) {
            return Err(Diagnostic::error(
                rule.loc.clone(),
                format!("a second rule named '{}'", rule.name),
            )
            .with_note(first.loc.clone(), "the first is here"));
        }
        rules.push(rule);
    }
    Ok(RuleSet { rules })
}

/// What a variable stands for.
#[derive(Clone, Copy, PartialEq)]
enum VarKind {
    Value,
    Attribute,
}

struct RulesParser<'s> {
    text: &'s str,
    file: Option<Arc<str>>,
}

impl RulesParser<'_> {
    fn loc_at(&self, offset: usize) -> Location {
        let before = &self.text[..offset.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        Location::new(self.file.clone(), line as u32, col as u32)
    }

    fn loc(&self, pair: &Pair<Rule>) -> Location {
        self.loc_at(pair.as_span().start())
    }

    fn error(&self, pair: &Pair<Rule>, message: impl Into<String>) -> Diagnostic {
        Diagnostic::error(self.loc(pair), message)
    }

    /// Refuses brackets nested deeper than the IR's parser takes, before
    /// the recursive descent sees them.
    fn check_nesting(&self) -> Result<(), Diagnostic> {
        let mut depth = 0usize;
        let mut comment = false;
        for (i, c) in self.text.char_indices() {
            match c {
                '\n' => comment = false,
                ';' => comment = true,
                '(' | '[' | '{' | '<' if !comment => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return Err(Diagnostic::error(
                            self.loc_at(i),
                            format!("brackets nest deeper than {MAX_NESTING} levels"),
                        ));
                    }
                }
                ')' | ']' | '}' | '>' if !comment => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        Ok(())
    }

    fn syntax_error(&self, e: pest::error::Error<Rule>) -> Diagnostic {
        let offset = match e.location {
            pest::error::InputLocation::Pos(p) | pest::error::InputLocation::Span((p, _)) => p,
        };
        let message = match &e.variant {
            pest::error::ErrorVariant::ParsingError { positives, .. } if !positives.is_empty() => {
                let mut wanted: Vec<&str> = positives.iter().map(describe).collect();
                wanted.dedup();
                format!("syntax error: expected {}", wanted.join(" or "))
            }
            _ => "syntax error: unexpected input".to_string(),
        };
        Diagnostic::error(self.loc_at(offset), message)
    }

    fn rule(&self, pair: Pair<Rule>) -> Result<RuleDef, Diagnostic> {
        let loc = self.loc(&pair);
        let mut inner = pair.into_inner();
        inner.next(); // `rule`
        let name = inner.next().expect("a rule name").as_str().to_string();
        let mut vars = HashMap::new();
        let pattern = self.term(inner.next().expect("a pattern"), &mut vars, true)?;
        if !matches!(pattern, Pattern::Op(_)) {
            return Err(Diagnostic::error(
                pattern.loc().clone(),
                format!("rule '{name}': a pattern's root must be an op"),
            ));
        }
        let mut conditions = Vec::new();
        let mut replacement = None;
        for p in inner {
            match p.as_rule() {
                Rule::guard => {
                    for c in p.into_inner().filter(|c| c.as_rule() == Rule::condition) {
                        conditions.push(self.condition(c, &vars)?);
                    }
                }
                Rule::arrow => {}
                _ => replacement = Some(self.term(p, &mut vars, false)?),
            }
        }
        Ok(RuleDef {
            name,
            loc,
            pattern,
            conditions,
            replacement: replacement.expect("the grammar requires a replacement"),
        })
    }

    /// A term; `binding` in the pattern, where variables are bound, and
    /// not in the replacement, where they must already be.
    fn term(
        &self,
        pair: Pair<Rule>,
        vars: &mut HashMap<String, VarKind>,
        binding: bool,
    ) -> Result<Pattern, Diagnostic> {
        let loc = self.loc(&pair);
        match pair.as_rule() {
            Rule::var => {
                let name = pair.as_str().to_string();
                self.use_var(&pair, &name, VarKind::Value, vars, binding)?;
                Ok(Pattern::Var(name, loc))
            }
            Rule::number => {
                let x: f64 = pair
                    .as_str()
                    .parse()
                    .map_err(|_| self.error(&pair, "not a number"))?;
                if !x.is_finite() {
                    return Err(self.error(&pair, "a number must be finite"));
                }
                Ok(Pattern::Number(x, loc))
            }
            _ => {
                let mut inner = pair.into_inner();
                let name = inner.next().expect("an op name").as_str().to_string();
                let mut operands = Vec::new();
                let mut attrs: Vec<(String, AttrPattern)> = Vec::new();
                for p in inner {
                    if p.as_rule() != Rule::attrs {
                        operands.push(self.term(p, vars, binding)?);
                        continue;
                    }
                    for a in p.into_inner() {
                        let mut kv = a.into_inner();
                        let key = kv.next().expect("an attribute name");
                        let value = kv.next().expect("an attribute value");
                        if attrs.iter().any(|(k, _)| k == key.as_str()) {
                            return Err(self.error(
                                &key,
                                format!("attribute '{}' is given twice", key.as_str()),
                            ));
                        }
                        let value = if value.as_rule() == Rule::var {
                            let n = value.as_str().to_string();
                            self.use_var(&value, &n, VarKind::Attribute, vars, binding)?;
                            AttrPattern::Var(n)
                        } else {
                            let parsed = parse_attribute(value.as_str().trim()).map_err(|d| {
                                self.error(
                                    &value,
                                    format!(
                                        "attribute '{}': '{}' is not an attribute ({})",
                                        key.as_str(),
                                        value.as_str().trim(),
                                        d.message
                                    ),
                                )
                            })?;
                            AttrPattern::Value(parsed)
                        };
                        attrs.push((key.as_str().to_string(), value));
                    }
                }
                Ok(Pattern::Op(OpPattern {
                    name,
                    loc,
                    operands,
                    attrs,
                }))
            }
        }
    }

    fn use_var(
        &self,
        pair: &Pair<Rule>,
        name: &str,
        kind: VarKind,
        vars: &mut HashMap<String, VarKind>,
        binding: bool,
    ) -> Result<(), Diagnostic> {
        let what = |k: VarKind| match k {
            VarKind::Value => "a value",
            VarKind::Attribute => "an attribute",
        };
        match vars.get(name) {
            Some(&k) if k != kind => Err(self.error(
                pair,
                format!(
                    "{name} is {} here but {} where it is bound",
                    what(kind),
                    what(k)
                ),
            )),
            Some(_) => Ok(()),
            None if binding => {
                vars.insert(name.to_string(), kind);
                Ok(())
            }
            None => Err(self.error(pair, format!("{name} is not bound by the rule's pattern"))),
        }
    }

    fn condition(
        &self,
        pair: Pair<Rule>,
        vars: &HashMap<String, VarKind>,
    ) -> Result<Condition, Diagnostic> {
        let whole = pair.clone();
        let mut inner = pair.into_inner();
        let name = inner.next().expect("a condition name");
        let args: Vec<Pair<Rule>> = inner.collect();
        let value_var = |i: usize| -> Result<String, Diagnostic> {
            let a = &args[i];
            if a.as_rule() != Rule::var {
                return Err(self.error(a, "expected a variable"));
            }
            match vars.get(a.as_str()) {
                Some(VarKind::Value) => Ok(a.as_str().to_string()),
                Some(VarKind::Attribute) => {
                    Err(self.error(a, format!("{} is an attribute, not a value", a.as_str())))
                }
                None => Err(self.error(
                    a,
                    format!("{} is not bound by the rule's pattern", a.as_str()),
                )),
            }
        };
        let arity = |n: usize| -> Result<(), Diagnostic> {
            if args.len() == n {
                Ok(())
            } else {
                Err(self.error(
                    &whole,
                    format!(
                        "({}) takes {n} argument{}, not {}",
                        name.as_str(),
                        if n == 1 { "" } else { "s" },
                        args.len()
                    ),
                ))
            }
        };
        Ok(match name.as_str() {
            "scalar" => {
                arity(1)?;
                Condition::Scalar(value_var(0)?)
            }
            "constant" => {
                arity(1)?;
                Condition::Constant(value_var(0)?)
            }
            "same-shape" => {
                arity(2)?;
                Condition::SameShape(value_var(0)?, value_var(1)?)
            }
            "rank" => {
                arity(2)?;
                let n = &args[1];
                let rank = (n.as_rule() == Rule::int)
                    .then(|| n.as_str().parse::<i64>().ok())
                    .flatten()
                    .ok_or_else(|| self.error(n, "expected a rank (an integer)"))?;
                Condition::Rank(value_var(0)?, rank)
            }
            other => {
                return Err(self.error(
                    &name,
                    format!(
                        "unknown condition '{other}' (known: scalar, constant, same-shape, rank)"
                    ),
                ));
            }
        })
    }
}

fn describe(r: &Rule) -> &'static str {
    match r {
        Rule::rule => "'(rule NAME PATTERN => REPLACEMENT)'",
        Rule::kw_rule => "'rule'",
        Rule::kw_if => "'=>' before the replacement, or '(if ...)'",
        Rule::rule_name => "a name",
        Rule::arrow => "'=>'",
        Rule::guard => "'(if ...)'",
        Rule::condition => "a condition",
        Rule::var => "a variable ('?x')",
        Rule::number => "a number",
        Rule::int => "an integer",
        Rule::op => "an op ('(dialect.op ...)')",
        Rule::op_name => "an op name ('dialect.op')",
        Rule::attrs | Rule::attr => "attributes ('{name = value}')",
        Rule::attr_name => "an attribute name",
        Rule::attr_text => "an attribute value",
        Rule::EOI => "end of file",
        _ => "more input",
    }
}
