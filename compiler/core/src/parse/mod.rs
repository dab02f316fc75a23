//! The parser: pest turns text into a parse tree (`ir.pest`), and this module
//! builds the module from it, resolving SSA names as it goes. Syntax errors,
//! undefined and redefined values, and malformed types, attributes and
//! affine maps are reported here; everything about what an operation means
//! is left to the verifier.

mod attrs;

use std::collections::HashMap;
use std::sync::Arc;

use pest::Parser as _;
use pest::iterators::Pair;

use crate::attr::{Attribute, Attributes};
use crate::builtin::FuncOp;
use crate::builtin::index_ops::IndexOp;
use crate::diag::{Diagnostic, Location};
use crate::ir::{BlockId, Module, OpBuilder, OpId, RegionId, ValueId};
use crate::limits::MAX_NESTING;
use crate::types::Type;

#[derive(pest_derive::Parser)]
#[grammar = "parse/ir.pest"]
struct IrGrammar;

type PResult<T> = Result<T, Diagnostic>;

/// Parses a module. `file` names the source in diagnostics.
pub fn parse_module(source: &str, file: Option<&str>) -> Result<Module, Diagnostic> {
    let file: Option<Arc<str>> = file.map(Arc::from);
    check_nesting(source, file.clone())?;
    let line_starts = line_starts(source);
    let mut pairs = IrGrammar::parse(Rule::file, source)
        .map_err(|e| syntax_error(e, file.clone(), source, &line_starts, 0))?;
    let root = pairs.next().expect("the file rule always produces a pair");
    // An operation takes some 60 bytes of text; reserving by the bytes,
    // not the lines, keeps a file of blank lines from reserving gigabytes.
    let mut module = Module::new();
    module.ops.reserve(source.len() / 64);
    module.values.reserve(source.len() / 64);
    let mut p = Builder {
        file,
        source,
        line_starts,
        module,
        scopes: vec![HashMap::new()],
        attr_aliases: HashMap::new(),
        type_aliases: HashMap::new(),
    };
    let items: Vec<Pair<Rule>> = root
        .into_inner()
        .filter(|x| x.as_rule() != Rule::EOI)
        .collect();
    let ops: Vec<&Pair<Rule>> = items.iter().filter(|x| x.as_rule() == Rule::op).collect();
    let single_module = ops.len() == 1 && is_module_op(ops[0]);
    for item in items.iter().cloned() {
        match item.as_rule() {
            Rule::alias_def => p.alias_def(item)?,
            Rule::op if single_module => p.module_op(item)?,
            Rule::op => {
                if is_module_op(&item) {
                    return Err(p.err(
                        &item,
                        "a module must be the only operation at the top level of a file",
                    ));
                }
                let body = p.module.body;
                p.op(item, body)?;
            }
            _ => unreachable!("file holds only aliases and operations"),
        }
    }
    Ok(p.module)
}

/// Where each line starts; a line ends in `\n`, `\r\n` or a lone `\r`.
fn line_starts(text: &str) -> Vec<usize> {
    let bytes = text.as_bytes();
    std::iter::once(0)
        .chain(bytes.iter().enumerate().filter_map(|(i, &b)| {
            let ends = b == b'\n' || (b == b'\r' && bytes.get(i + 1) != Some(&b'\n'));
            ends.then_some(i + 1)
        }))
        .collect()
}

/// The length of the whitespace and `//` comments `text` starts with.
fn blank_len(text: &str) -> usize {
    let mut rest = text;
    loop {
        let trimmed = rest.trim_start_matches([' ', '\t', '\r', '\n']);
        match trimmed.strip_prefix("//") {
            Some(comment) => rest = comment.trim_start_matches(|c| c != '\n' && c != '\r'),
            None => return text.len() - trimmed.len(),
        }
    }
}

/// Refuses brackets nested deeper than [`MAX_NESTING`] before the
/// recursive descent sees them, naming the bracket that goes too deep.
/// Strings and comments are skipped; `->` is an arrow, not a bracket. A
/// closer ends the innermost bracket of its kind and those opened inside
/// it; one with no opener of its kind (a `>` in a location's free text)
/// closes nothing, so stray closers cannot hide depth.
fn check_nesting(source: &str, file: Option<Arc<str>>) -> PResult<()> {
    let bytes = source.as_bytes();
    let mut open: Vec<u8> = Vec::new();
    let mut i = 0usize;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            // Inside `<...>` (an opaque body: `#x.y<http://a>`) `//` is text.
            b'/' if bytes.get(i + 1) == Some(&b'/') && open.last() != Some(&b'<') => {
                while i < bytes.len() && bytes[i] != b'\n' && bytes[i] != b'\r' {
                    i += 1;
                }
            }
            b'(' | b'[' | b'{' | b'<' => {
                open.push(bytes[i]);
                if open.len() > MAX_NESTING {
                    return Err(Diagnostic::error(
                        location(file, source, &line_starts(source), i),
                        format!("brackets nest deeper than {MAX_NESTING} levels"),
                    ));
                }
            }
            b'>' if i > 0 && bytes[i - 1] == b'-' => {}
            closer @ (b')' | b']' | b'}' | b'>') => {
                let opener = match closer {
                    b')' => b'(',
                    b']' => b'[',
                    b'}' => b'{',
                    _ => b'<',
                };
                if let Some(k) = open.iter().rposition(|&o| o == opener) {
                    open.truncate(k);
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

fn is_module_op(op: &Pair<Rule>) -> bool {
    op.clone().into_inner().any(|x| {
        x.as_rule() == Rule::module_op
            || (x.as_rule() == Rule::generic_op
                && x.clone()
                    .into_inner()
                    .next()
                    .map(|s| attrs::unquote_raw(&s) == "builtin.module")
                    .unwrap_or(false))
    })
}

fn rule_description(rule: &Rule) -> String {
    match rule {
        Rule::op | Rule::region_item => "an operation",
        Rule::op_name => "an operation name",
        Rule::value_use | Rule::value_uses | Rule::value_name => "an SSA value (%name)",
        Rule::type_value | Rule::type_list | Rule::pretty_types => "a type",
        Rule::attr_value => "an attribute value",
        Rule::attr_dict => "an attribute dictionary",
        Rule::named_attr => "an attribute name",
        Rule::function_type => "a function type",
        Rule::region | Rule::region_list => "a region",
        Rule::string_lit => "a string",
        Rule::affine_expr | Rule::affine_term | Rule::affine_factor | Rule::affine_atom => {
            "an affine expression"
        }
        Rule::add_op | Rule::mul_op => "an affine operator",
        Rule::scalar_type => "an element type",
        Rule::dim => "a dimension",
        Rule::number | Rule::int_lit | Rule::float_lit => "a number",
        Rule::symbol_name => "a symbol (@name)",
        Rule::colon => "':'",
        Rule::arrow => "'->'",
        Rule::rbrace => "'}'",
        Rule::caret_id | Rule::block_label => "a block label (^bb0)",
        Rule::EOI => "end of input",
        other => return format!("{other:?}"),
    }
    .to_string()
}

/// The line and column of byte `offset`, by the line index (pest's own
/// `line_col` knows only `\n` and rescans the input from its start).
fn location(file: Option<Arc<str>>, source: &str, starts: &[usize], offset: usize) -> Location {
    let line = starts.partition_point(|&s| s <= offset) - 1;
    let col = source
        .get(starts[line]..offset)
        .map_or(offset - starts[line], |s| s.chars().count());
    Location::new(file, line as u32 + 1, col as u32 + 1)
}

/// A pest error as a diagnostic; pest parsed a slice of `source` starting
/// at byte `base`.
fn syntax_error(
    e: pest::error::Error<Rule>,
    file: Option<Arc<str>>,
    source: &str,
    starts: &[usize],
    base: usize,
) -> Diagnostic {
    let offset = base
        + match e.location {
            pest::error::InputLocation::Pos(p) => p,
            pest::error::InputLocation::Span((p, _)) => p,
        };
    let message = match &e.variant {
        pest::error::ErrorVariant::ParsingError { positives, .. } if !positives.is_empty() => {
            let mut wanted: Vec<String> = positives.iter().map(rule_description).collect();
            wanted.dedup();
            format!("syntax error: expected {}", wanted.join(" or "))
        }
        pest::error::ErrorVariant::ParsingError { .. } => {
            "syntax error: unexpected input".to_string()
        }
        pest::error::ErrorVariant::CustomError { message } => message.clone(),
    };
    Diagnostic::error(location(file, source, starts, offset), message)
}

struct Builder<'s> {
    file: Option<Arc<str>>,
    /// The whole text; region bodies are parsed from slices of it.
    source: &'s str,
    /// Byte offset of the start of every line.
    line_starts: Vec<usize>,
    module: Module,
    /// SSA names visible at this point, innermost region last. A name maps
    /// to its result group (`%0:2` defines two values).
    scopes: Vec<HashMap<SsaName, (ResultGroup, Location)>>,
    attr_aliases: HashMap<String, Attribute>,
    type_aliases: HashMap<String, Type>,
}

/// An SSA name as a scope keys it: `%123` as its number, so that a
/// function of 10^6 numbered values holds no string per value.
#[derive(PartialEq, Eq, Hash)]
enum SsaName {
    Number(u64),
    Text(Box<str>),
}

impl SsaName {
    fn of(name: &str) -> SsaName {
        let bare = &name[1..];
        match bare.parse() {
            // `%007` and `%7` are different names.
            Ok(n) if !bare.starts_with('0') || bare == "0" => SsaName::Number(n),
            _ => SsaName::Text(bare.into()),
        }
    }
}

/// The values a name defines: one, or a group (`%0:2`).
enum ResultGroup {
    One(ValueId),
    Many(Vec<ValueId>),
}

impl ResultGroup {
    fn as_slice(&self) -> &[ValueId] {
        match self {
            ResultGroup::One(v) => std::slice::from_ref(v),
            ResultGroup::Many(vs) => vs,
        }
    }
}

/// Strips the `%` of a value name; numeric names carry no name hint.
fn name_hint(name: &str) -> Option<String> {
    let bare = name.trim_start_matches('%');
    if bare.chars().all(|c| c.is_ascii_digit()) {
        None
    } else {
        Some(bare.to_string())
    }
}

impl Builder<'_> {
    /// pest's own `line_col` rescans the input from its start, which makes
    /// parsing quadratic; the line index answers in O(log lines).
    fn loc(&self, pair: &Pair<Rule>) -> Location {
        let offset = self.offset_of(pair.get_input()) + pair.as_span().start();
        location(self.file.clone(), self.source, &self.line_starts, offset)
    }

    /// Where `slice` (a slice of the source, as every parsed input is)
    /// starts in the source.
    fn offset_of(&self, slice: &str) -> usize {
        let offset = (slice.as_ptr() as usize).wrapping_sub(self.source.as_ptr() as usize);
        debug_assert!(offset <= self.source.len(), "a slice of another text");
        offset
    }

    /// Parses the block labels and operations of a region body one at a
    /// time, handing each to `visit` before parsing the next, so a large
    /// region never has more than one operation's parse tree alive.
    fn region_items(
        &mut self,
        body: &Pair<Rule>,
        mut visit: impl FnMut(&mut Self, Pair<Rule>) -> PResult<()>,
    ) -> PResult<()> {
        let text = body.as_str();
        let mut pos = 0;
        loop {
            pos += blank_len(&text[pos..]);
            if pos >= text.len() {
                return Ok(());
            }
            let rest = &text[pos..];
            let mut pairs = IrGrammar::parse(Rule::region_item, rest).map_err(|e| {
                let at = self.offset_of(rest);
                syntax_error(e, self.file.clone(), self.source, &self.line_starts, at)
            })?;
            let item = pairs.next().expect("region_item produces a pair");
            pos += item.as_span().end();
            visit(
                self,
                item.into_inner().next().expect("a label or an operation"),
            )?;
        }
    }

    fn err(&self, pair: &Pair<Rule>, message: impl Into<String>) -> Diagnostic {
        Diagnostic::error(self.loc(pair), message)
    }

    fn alias_def(&mut self, pair: Pair<Rule>) -> PResult<()> {
        let mut it = pair.into_inner();
        let name = it.next().expect("alias name");
        let value = it.next().expect("alias value");
        let key = name.as_str()[1..].to_string();
        match (name.as_rule(), value.as_rule()) {
            (Rule::type_alias_name, Rule::type_value) => {
                let ty = self.type_value(value)?;
                self.type_aliases.insert(key, ty);
            }
            (Rule::attr_alias_name, Rule::attr_value) => {
                let attr = self.attr_value(value)?;
                self.attr_aliases.insert(key, attr);
            }
            (Rule::attr_alias_name, Rule::type_value) => {
                let ty = self.type_value(value)?;
                self.attr_aliases.insert(key, Attribute::Type(ty));
            }
            _ => return Err(self.err(&name, "a type alias (!name) must be defined as a type")),
        }
        Ok(())
    }

    fn define(&mut self, name_pair: &Pair<Rule>, values: Vec<ValueId>) -> PResult<()> {
        let name = name_pair.as_str();
        let key = SsaName::of(name);
        let loc = self.loc(name_pair);
        for scope in &self.scopes {
            if let Some((_, prev)) = scope.get(&key) {
                return Err(
                    Diagnostic::error(loc, format!("redefinition of SSA value '{name}'"))
                        .with_note(prev.clone(), "previously defined here"),
                );
            }
        }
        if let Some(&first) = values.first() {
            self.module.values[first].name = name_hint(name);
        }
        let group = match values.as_slice() {
            [one] => ResultGroup::One(*one),
            _ => ResultGroup::Many(values),
        };
        self.scopes
            .last_mut()
            .expect("a scope is open")
            .insert(key, (group, loc));
        Ok(())
    }

    fn resolve(&self, use_pair: &Pair<Rule>) -> PResult<ValueId> {
        let mut it = use_pair.clone().into_inner();
        let name = it.next().expect("value name").as_str();
        let index: usize = match it.next() {
            Some(c) => c
                .as_str()
                .parse()
                .map_err(|_| self.err(use_pair, "result index is too large"))?,
            None => 0,
        };
        let key = SsaName::of(name);
        for scope in self.scopes.iter().rev() {
            if let Some((group, _)) = scope.get(&key) {
                let group = group.as_slice();
                return group.get(index).copied().ok_or_else(|| {
                    self.err(
                        use_pair,
                        format!(
                            "'{name}' has {} results, so '#{index}' does not exist",
                            group.len()
                        ),
                    )
                });
            }
        }
        Err(self.err(use_pair, format!("use of undefined value '{name}'")))
    }

    fn value_uses<'i>(
        &self,
        pair: Option<Pair<'i, Rule>>,
    ) -> PResult<Vec<(ValueId, Pair<'i, Rule>)>> {
        match pair {
            None => Ok(Vec::new()),
            Some(p) => p.into_inner().map(|u| Ok((self.resolve(&u)?, u))).collect(),
        }
    }

    /// Checks that the types written for operands match their definitions.
    fn check_operand_types(
        &self,
        operands: &[(ValueId, Pair<Rule>)],
        types: &[Type],
        at: &Pair<Rule>,
    ) -> PResult<()> {
        if operands.len() != types.len() {
            return Err(self.err(
                at,
                format!(
                    "{} operands but {} operand types",
                    operands.len(),
                    types.len()
                ),
            ));
        }
        for ((v, p), ty) in operands.iter().zip(types) {
            let actual = self.module.value_type(*v);
            if actual != ty {
                return Err(self.err(
                    p,
                    format!(
                        "use of value '{}' expects type {ty} but it was defined as {actual}",
                        p.as_str()
                    ),
                ));
            }
        }
        Ok(())
    }

    fn op(&mut self, pair: Pair<Rule>, block: BlockId) -> PResult<OpId> {
        let mut inner = pair.into_inner().peekable();
        let results = match inner.peek().map(|p| p.as_rule()) {
            Some(Rule::op_results) => Some(inner.next().expect("peeked")),
            _ => None,
        };
        let body = inner.next().expect("an op body");
        let op = match body.as_rule() {
            Rule::generic_op => self.generic_op(body)?,
            Rule::pretty_op => self.pretty_op(body)?,
            Rule::func_op => self.func_op(body)?,
            Rule::return_op => self.return_op(body)?,
            Rule::view_op => self.view_op(body)?,
            Rule::module_op => {
                return Err(self.err(&body, "a module can only appear at the top level"));
            }
            r => unreachable!("unexpected op body {r:?}"),
        };
        self.module.append_op(block, op);
        self.bind_results(op, results)?;
        Ok(op)
    }

    fn bind_results(&mut self, op: OpId, results: Option<Pair<Rule>>) -> PResult<()> {
        let values = self.module.op(op).results.clone();
        let Some(results) = results else {
            if values.is_empty() {
                return Ok(());
            }
            let loc = self.module.op(op).loc.clone();
            return Err(Diagnostic::error(
                loc,
                format!(
                    "operation has {} results but no names for them",
                    values.len()
                ),
            ));
        };
        let mut next = 0;
        let groups: Vec<Pair<Rule>> = results.clone().into_inner().collect();
        for g in groups {
            let mut gi = g.clone().into_inner();
            let name = gi.next().expect("result name");
            let n: usize = match gi.next() {
                Some(c) => c
                    .as_str()
                    .parse()
                    .map_err(|_| self.err(&g, "result count is too large"))?,
                None => 1,
            };
            if next + n > values.len() {
                return Err(self.err(
                    &results,
                    format!(
                        "more result names than the {} results of the operation",
                        values.len()
                    ),
                ));
            }
            self.define(&name, values[next..next + n].to_vec())?;
            next += n;
        }
        if next != values.len() {
            return Err(self.err(
                &results,
                format!(
                    "{next} result names for an operation with {} results",
                    values.len()
                ),
            ));
        }
        Ok(())
    }

    /// The attributes of a `<{properties}>` or `{dictionary}`; both end up
    /// in the op's one dictionary.
    fn dictionary(&self, p: Pair<Rule>) -> PResult<Attributes> {
        let dict = if p.as_rule() == Rule::properties {
            p.into_inner().next().expect("dict")
        } else {
            p
        };
        self.attr_dict(dict)
    }

    /// Builds the regions of a just-created op from their parse trees.
    fn regions(&mut self, op: OpId, regions: Vec<Pair<Rule>>) -> PResult<()> {
        for (i, r) in regions.into_iter().enumerate() {
            let region = self.module.op(op).regions[i];
            self.region(r, region, None)?;
        }
        Ok(())
    }

    fn generic_op(&mut self, pair: Pair<Rule>) -> PResult<OpId> {
        let loc = self.loc(&pair);
        let mut name = String::new();
        let mut operands = Vec::new();
        let mut attrs = Attributes::new();
        let mut regions = Vec::new();
        let mut fty = None;
        for p in pair.into_inner() {
            match p.as_rule() {
                Rule::string_lit => name = attrs::unquote(&p).map_err(|m| self.err(&p, m))?,
                Rule::value_uses => operands = self.value_uses(Some(p))?,
                Rule::properties | Rule::attr_dict => attrs.extend(self.dictionary(p)?),
                Rule::region_list => regions = p.into_inner().collect(),
                Rule::function_type => fty = Some(p),
                Rule::trailing_loc | Rule::colon => {}
                r => unreachable!("unexpected {r:?} in generic op"),
            }
        }
        let fty_pair = fty.expect("generic op has a function type");
        let (inputs, outputs) = match self.function_type(fty_pair.clone())? {
            Type::Function { inputs, results } => (inputs, results),
            _ => unreachable!("function_type builds a function type"),
        };
        self.check_operand_types(&operands, &inputs, &fty_pair)?;
        let op = self.module.create_op(
            OpBuilder::new(name)
                .operands(operands.into_iter().map(|(v, _)| v))
                .results(outputs)
                .attrs(attrs)
                .regions(regions.len())
                .loc(loc),
        );
        self.regions(op, regions)?;
        Ok(op)
    }

    fn pretty_op(&mut self, pair: Pair<Rule>) -> PResult<OpId> {
        let mut name = String::new();
        let mut loc = self.loc(&pair);
        let mut operands = Vec::new();
        let mut attrs = Attributes::new();
        let mut regions = Vec::new();
        let mut types = Vec::new();
        for p in pair.into_inner() {
            match p.as_rule() {
                Rule::op_name => {
                    loc = self.loc(&p);
                    name = p.as_str().to_string();
                }
                Rule::value_uses => operands = self.value_uses(Some(p))?,
                Rule::properties | Rule::attr_dict => attrs.extend(self.dictionary(p)?),
                Rule::region_list => regions = p.into_inner().collect(),
                Rule::pretty_types => types.push(p),
                Rule::colon | Rule::arrow => {}
                r => unreachable!("unexpected {r:?} in pretty op"),
            }
        }
        let result_types = self.pretty_types(types.pop().expect("result types"))?;
        let operand_pair = types.pop().expect("operand types");
        let operand_types = self.pretty_types(operand_pair.clone())?;
        self.check_operand_types(&operands, &operand_types, &operand_pair)?;
        let op = self.module.create_op(
            OpBuilder::new(name)
                .operands(operands.into_iter().map(|(v, _)| v))
                .results(result_types)
                .attrs(attrs)
                .regions(regions.len())
                .loc(loc),
        );
        self.regions(op, regions)?;
        Ok(op)
    }

    fn pretty_types(&self, pair: Pair<Rule>) -> PResult<Vec<Type>> {
        match pair.into_inner().next() {
            None => Ok(Vec::new()),
            Some(list) => self.type_list(list),
        }
    }

    fn return_op(&mut self, pair: Pair<Rule>) -> PResult<OpId> {
        let loc = self.loc(&pair);
        let mut operands = Vec::new();
        let mut types = Vec::new();
        let mut types_pair = None;
        for p in pair.into_inner() {
            match p.as_rule() {
                Rule::value_uses => operands = self.value_uses(Some(p))?,
                Rule::type_list => {
                    types = self.type_list(p.clone())?;
                    types_pair = Some(p);
                }
                Rule::kw_return => {}
                r => unreachable!("unexpected {r:?} in return"),
            }
        }
        if let Some(tp) = types_pair {
            self.check_operand_types(&operands, &types, &tp)?;
        }
        Ok(self.module.create_op(
            OpBuilder::new(FuncOp::Return.name())
                .operands(operands.into_iter().map(|(v, _)| v))
                .loc(loc),
        ))
    }

    fn view_op(&mut self, pair: Pair<Rule>) -> PResult<OpId> {
        let loc = self.loc(&pair);
        let mut it = pair
            .into_inner()
            .filter(|p| !matches!(p.as_rule(), Rule::kw_by | Rule::kw_to | Rule::colon));
        let source = it.next().expect("source");
        let v = self.resolve(&source)?;
        let map_pair = it.next().expect("map");
        let map = self.affine_map(map_pair.into_inner().next().expect("map body"))?;
        let from_pair = it.next().expect("source type");
        let from = self.type_value(from_pair.clone())?;
        let to = self.type_value(it.next().expect("result type"))?;
        self.check_operand_types(&[(v, source)], &[from], &from_pair)?;
        Ok(self.module.create_op(
            OpBuilder::new(IndexOp::View.name())
                .operands([v])
                .results([to])
                .attr("map", Attribute::AffineMap(map))
                .loc(loc),
        ))
    }

    fn func_op(&mut self, pair: Pair<Rule>) -> PResult<OpId> {
        let loc = self.loc(&pair);
        let mut sym = String::new();
        let mut visibility = None;
        let mut args: Vec<(Pair<Rule>, Type, Attributes)> = Vec::new();
        let mut results: Vec<(Type, Attributes)> = Vec::new();
        let mut extra = Attributes::new();
        let mut body = None;
        for p in pair.into_inner() {
            match p.as_rule() {
                Rule::visibility => visibility = Some(p.as_str().to_string()),
                Rule::symbol_name => sym = self.symbol_name(&p)?,
                Rule::func_args => {
                    for a in p.into_inner() {
                        let mut ai = a.into_inner();
                        let name = ai.next().expect("arg name");
                        let ty = self.type_value(ai.next().expect("arg type"))?;
                        let attrs = match ai.next() {
                            Some(d) => self.attr_dict(d)?,
                            None => Attributes::new(),
                        };
                        args.push((name, ty, attrs));
                    }
                }
                Rule::func_results => {
                    for r in p.into_inner() {
                        if r.as_rule() == Rule::type_value {
                            results.push((self.type_value(r)?, Attributes::new()));
                            continue;
                        }
                        let mut ri = r.into_inner();
                        let ty = self.type_value(ri.next().expect("result type"))?;
                        let attrs = match ri.next() {
                            Some(d) => self.attr_dict(d)?,
                            None => Attributes::new(),
                        };
                        results.push((ty, attrs));
                    }
                }
                Rule::attr_dict => extra = self.attr_dict(p)?,
                Rule::region => body = Some(p),
                Rule::kw_attributes => {}
                r => unreachable!("unexpected {r:?} in func"),
            }
        }
        let fty = Type::Function {
            inputs: args.iter().map(|a| a.1.clone()).collect(),
            results: results.iter().map(|r| r.0.clone()).collect(),
        };
        let mut attrs = Attributes::new();
        attrs.insert("sym_name".into(), Attribute::String(sym));
        attrs.insert("function_type".into(), Attribute::Type(fty));
        if let Some(v) = visibility {
            attrs.insert("sym_visibility".into(), Attribute::String(v));
        }
        if args.iter().any(|a| !a.2.is_empty()) {
            attrs.insert(
                "arg_attrs".into(),
                Attribute::Array(args.iter().map(|a| Attribute::Dict(a.2.clone())).collect()),
            );
        }
        if results.iter().any(|r| !r.1.is_empty()) {
            attrs.insert(
                "res_attrs".into(),
                Attribute::Array(
                    results
                        .iter()
                        .map(|r| Attribute::Dict(r.1.clone()))
                        .collect(),
                ),
            );
        }
        attrs.extend(extra);
        let op = self.module.create_op(
            OpBuilder::new(FuncOp::Func.name())
                .attrs(attrs)
                .regions(1)
                .loc(loc),
        );
        if let Some(body) = body {
            let region = self.module.op(op).regions[0];
            self.region(body, region, Some(args))?;
        }
        Ok(op)
    }

    fn module_op(&mut self, pair: Pair<Rule>) -> PResult<()> {
        let body_pair = pair.into_inner().next().expect("op body");
        self.module.loc = self.loc(&body_pair);
        let region = match body_pair.as_rule() {
            Rule::module_op => {
                let mut region = None;
                for p in body_pair.into_inner() {
                    match p.as_rule() {
                        Rule::symbol_name => self.module.name = Some(self.symbol_name(&p)?),
                        Rule::attr_dict => self.module.attrs = self.attr_dict(p)?,
                        Rule::region => region = Some(p),
                        _ => {}
                    }
                }
                region.expect("module has a region")
            }
            _ => {
                // "builtin.module"() ({...}) {attrs} : () -> ()
                let mut region = None;
                for p in body_pair.clone().into_inner() {
                    match p.as_rule() {
                        Rule::properties | Rule::attr_dict => {
                            for (k, v) in self.dictionary(p)? {
                                match (k.as_str(), v) {
                                    ("sym_name", Attribute::String(s)) => {
                                        self.module.name = Some(s)
                                    }
                                    (_, v) => {
                                        self.module.attrs.insert(k, v);
                                    }
                                }
                            }
                        }
                        Rule::region_list => {
                            let mut rs = p.clone().into_inner();
                            region = rs.next();
                            if rs.next().is_some() {
                                return Err(self.err(&p, "'builtin.module' has exactly one region"));
                            }
                        }
                        Rule::value_uses => {
                            return Err(self.err(&p, "'builtin.module' takes no operands"));
                        }
                        _ => {}
                    }
                }
                region.ok_or_else(|| self.err(&body_pair, "'builtin.module' needs a region"))?
            }
        };
        // The body is one block; mlir-opt labels it (`^bb0:`) when it is empty.
        let body_block = self.module.body;
        let mut seen_op = false;
        let mut seen_label = false;
        let body = region.into_inner().next().expect("region body");
        self.region_items(&body, |p, item| {
            if item.as_rule() == Rule::block_label {
                if seen_op || seen_label {
                    return Err(p.err(&item, "a module body is a single block"));
                }
                if item
                    .clone()
                    .into_inner()
                    .any(|a| a.as_rule() == Rule::block_arg)
                {
                    return Err(p.err(&item, "a module body takes no arguments"));
                }
                seen_label = true;
                return Ok(());
            }
            if is_module_op(&item) {
                return Err(p.err(&item, "nested modules are not supported"));
            }
            seen_op = true;
            p.op(item, body_block).map(|_| ())
        })
    }

    /// Builds a region. `entry_args` are the arguments of a function written
    /// in the pretty form, which become the entry block's arguments.
    fn region(
        &mut self,
        pair: Pair<Rule>,
        region: RegionId,
        entry_args: Option<Vec<(Pair<Rule>, Type, Attributes)>>,
    ) -> PResult<()> {
        self.scopes.push(HashMap::new());
        let result = self.region_inner(pair, region, entry_args);
        self.scopes.pop();
        result
    }

    fn region_inner(
        &mut self,
        pair: Pair<Rule>,
        region: RegionId,
        entry_args: Option<Vec<(Pair<Rule>, Type, Attributes)>>,
    ) -> PResult<()> {
        let body = pair.into_inner().next().expect("region body");
        // The block operations go to: the entry block, made at once for a
        // function's named arguments, else at the first unlabelled op.
        let mut block: Option<BlockId> = None;
        let mut named_entry = None;
        if let Some(args) = entry_args {
            let b = self
                .module
                .add_block(region, args.iter().map(|a| a.1.clone()).collect());
            for (i, (name, _, _)) in args.iter().enumerate() {
                let v = self.module.blocks[b].args[i];
                self.define(name, vec![v])?;
            }
            block = Some(b);
            named_entry = Some(b);
        }
        self.region_items(&body, |p, item| {
            if item.as_rule() == Rule::op {
                let b = match block {
                    Some(b) => b,
                    None => *block.insert(p.module.add_block(region, Vec::new())),
                };
                return p.op(item, b).map(|_| ());
            }
            if named_entry.is_some_and(|e| block == Some(e) && p.module.blocks[e].ops.is_empty()) {
                return Err(p.err(
                    &item,
                    "a function written with named arguments has an unlabelled entry block",
                ));
            }
            let mut arg_pairs = Vec::new();
            for a in item.into_inner().filter(|x| x.as_rule() == Rule::block_arg) {
                let mut ai = a.into_inner();
                let name = ai.next().expect("arg name");
                let ty = p.type_value(ai.next().expect("arg type"))?;
                arg_pairs.push((name, ty));
            }
            let b = p
                .module
                .add_block(region, arg_pairs.iter().map(|a| a.1.clone()).collect());
            for (i, (name, _)) in arg_pairs.iter().enumerate() {
                let v = p.module.blocks[b].args[i];
                p.define(name, vec![v])?;
            }
            block = Some(b);
            Ok(())
        })
    }

    fn symbol_name(&self, pair: &Pair<Rule>) -> PResult<String> {
        let inner = pair.clone().into_inner().next().expect("symbol body");
        match inner.as_rule() {
            Rule::string_lit => attrs::unquote(&inner).map_err(|m| self.err(&inner, m)),
            _ => Ok(inner.as_str().to_string()),
        }
    }
}

/// Parses one attribute in the textual syntax (`array<i64: 1, 2>`, `1.0 : f32`).
pub fn parse_attribute(text: &str) -> Result<Attribute, Diagnostic> {
    let mut pairs = IrGrammar::parse(Rule::attr_only, text)
        .map_err(|e| syntax_error(e, None, text, &line_starts(text), 0))?;
    let value = pairs
        .next()
        .and_then(|p| p.into_inner().next())
        .expect("attr_only holds an attribute");
    let b = Builder {
        file: None,
        source: text,
        line_starts: line_starts(text),
        module: Module::new(),
        scopes: vec![HashMap::new()],
        attr_aliases: HashMap::new(),
        type_aliases: HashMap::new(),
    };
    b.attr_value(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_bodies_hold_strings_comments_and_opaque_text() {
        let text = r#"func.func @main() {
  // a comment with { and "
  "test.op"() {a = "}{", b = #x.y<http://a{b>, c = affine_map<(d0) -> (d0)>} : () -> () // }
  func.return
}
"#;
        let m = parse_module(text, None).unwrap();
        let printed = crate::print_module(&m, crate::Form::Pretty);
        assert!(printed.contains("#x.y<http://a{b>"), "{printed}");
        assert!(printed.contains(r#"a = "}{""#), "{printed}");
    }

    #[test]
    fn diagnostics_inside_regions_point_at_the_source() {
        let text = "func.func @main() {\r  %0 = \"test.op\"() : () -> (i32)\r  %1 = bogus\r}\r";
        let d = parse_module(text, Some("f.ir")).unwrap_err();
        assert_eq!((d.loc.line, d.loc.col), (3, 8), "{d}");
    }
}
