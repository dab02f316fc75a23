//! The printer: ircc's pretty form by default, MLIR's generic form on
//! request. Output depends only on the module, so it is byte-stable.
//!
//! In the generic form, attributes without a dialect prefix are inherent
//! and print as properties (`<{...}>`); prefixed ones (`ircc.class`) are
//! discardable and print in the trailing dictionary, as MLIR expects.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use crate::attr::{Attribute, Attributes, is_bare_id, write_dict, write_string_literal};
use crate::builtin::FuncOp;
use crate::builtin::index_ops::IndexOp;
use crate::ir::{BlockId, Module, OpId, RegionId, ValueId};
use crate::types::Type;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Form {
    #[default]
    Pretty,
    Generic,
}

pub fn print_module(module: &Module, form: Form) -> String {
    let mut p = Printer {
        module,
        form,
        out: String::new(),
        names: HashMap::new(),
    };
    p.module();
    p.out
}

/// Whether an attribute is a discardable one (`dialect.name`).
pub fn is_discardable(name: &str) -> bool {
    name.contains('.')
}

struct Printer<'m> {
    module: &'m Module,
    form: Form,
    out: String,
    names: HashMap<ValueId, Name>,
}

struct DictWriter<'a>(&'a Attributes);
impl std::fmt::Display for DictWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_dict(f, self.0)
    }
}

fn dict(attrs: &Attributes) -> String {
    DictWriter(attrs).to_string()
}

fn sanitize(hint: &str) -> Option<String> {
    let mut s: String = hint
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '$' | '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    Some(s)
}

/// A value's printed name, less its `%`. Numbers are kept as numbers: a
/// module of 10^6 values would otherwise hold 10^6 small strings twice.
enum Name {
    Number(usize),
    Text(String),
}

/// Assigns printed names to the values of one isolated operation (a
/// function): source names where possible, made unique, else numbers.
struct Namer<'m> {
    module: &'m Module,
    /// The names given that are not numbers; no hint is a number
    /// (`sanitize`), so numbers cannot clash with them.
    used: HashSet<String>,
    next_number: usize,
    next_arg: usize,
    names: HashMap<ValueId, Name>,
}

impl Namer<'_> {
    fn name(&mut self, v: ValueId, is_arg: bool) {
        let hint = self.module.value(v).name.as_deref().and_then(sanitize);
        let name = match hint {
            Some(h) => {
                let mut candidate = h.clone();
                let mut k = 1;
                while self.used.contains(&candidate) {
                    candidate = format!("{h}_{k}");
                    k += 1;
                }
                candidate
            }
            None if is_arg => loop {
                let c = format!("arg{}", self.next_arg);
                self.next_arg += 1;
                if !self.used.contains(&c) {
                    break c;
                }
            },
            None => {
                self.names.insert(v, Name::Number(self.next_number));
                self.next_number += 1;
                return;
            }
        };
        self.used.insert(name.clone());
        self.names.insert(v, Name::Text(name));
    }

    fn block(&mut self, b: BlockId) {
        for &a in &self.module.blocks[b].args {
            self.name(a, true);
        }
        for &op in &self.module.blocks[b].ops {
            self.op(op);
        }
    }

    fn op(&mut self, op: OpId) {
        for &r in &self.module.op(op).results {
            self.name(r, false);
        }
        for &region in &self.module.op(op).regions {
            for &b in &self.module.regions[region].blocks {
                self.block(b);
            }
        }
    }
}

impl Printer<'_> {
    fn indent(&mut self, depth: usize) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
    }

    fn value(&self, v: ValueId) -> String {
        match self.names.get(&v) {
            Some(Name::Number(n)) => format!("%{n}"),
            Some(Name::Text(n)) => format!("%{n}"),
            None => format!("%<<UNKNOWN VALUE {}>>", v.index()),
        }
    }

    fn values(&self, vs: &[ValueId]) -> String {
        vs.iter()
            .map(|&v| self.value(v))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn types(&self, vs: &[ValueId]) -> Vec<Type> {
        vs.iter()
            .map(|&v| self.module.value_type(v).clone())
            .collect()
    }

    fn module(&mut self) {
        let m = self.module;
        let mut namer = Namer {
            module: m,
            used: HashSet::new(),
            next_number: 0,
            next_arg: 0,
            names: HashMap::new(),
        };
        for &op in m.top_ops() {
            // Each top-level operation is its own naming scope, as in MLIR.
            namer.used.clear();
            namer.next_number = 0;
            namer.next_arg = 0;
            namer.op(op);
        }
        self.names = namer.names;
        match self.form {
            Form::Pretty => {
                self.out.push_str("module");
                if let Some(name) = &m.name {
                    self.out.push_str(" @");
                    self.symbol(name);
                }
                if !m.attrs.is_empty() {
                    let _ = write!(self.out, " attributes {}", dict(&m.attrs));
                }
                self.out.push_str(" {\n");
                for &op in m.top_ops() {
                    self.op(op, 1);
                }
                self.out.push_str("}\n");
            }
            Form::Generic => {
                self.out.push_str("\"builtin.module\"() ");
                if let Some(name) = &m.name {
                    let mut props = Attributes::new();
                    props.insert("sym_name".into(), Attribute::String(name.clone()));
                    let _ = write!(self.out, "<{}> ", dict(&props));
                }
                self.out.push_str("({\n");
                if m.top_ops().is_empty() {
                    self.out.push_str("^bb0:\n");
                }
                for &op in m.top_ops() {
                    self.op(op, 1);
                }
                self.out.push_str("})");
                if !m.attrs.is_empty() {
                    let _ = write!(self.out, " {}", dict(&m.attrs));
                }
                self.out.push_str(" : () -> ()\n");
            }
        }
    }

    fn symbol(&mut self, name: &str) {
        if is_bare_id(name) {
            self.out.push_str(name);
        } else {
            let _ = write_string_literal(&mut self.out, name);
        }
    }

    fn op(&mut self, op: OpId, depth: usize) {
        self.indent(depth);
        let o = self.module.op(op);
        if !o.results.is_empty() {
            let _ = write!(self.out, "{} = ", self.values(&o.results));
        }
        let func = FuncOp::of(self.module, op);
        let view = IndexOp::of(self.module, op) == Some(IndexOp::View);
        let done = self.form == Form::Pretty
            && match (func, view) {
                (Some(FuncOp::Func), _) => self.pretty_func(op, depth),
                (_, true)
                    if o.operands.len() == 1 && o.results.len() == 1 && o.attrs.len() == 1 =>
                {
                    match o.attr("map") {
                        Some(Attribute::AffineMap(m)) => {
                            let _ = write!(
                                self.out,
                                "{} {} by affine_map<{m}> : {} to {}",
                                IndexOp::View.name(),
                                self.value(o.operands[0]),
                                self.module.value_type(o.operands[0]),
                                self.module.value_type(o.results[0])
                            );
                            true
                        }
                        _ => false,
                    }
                }
                (Some(FuncOp::Return), _) => {
                    self.out.push_str(FuncOp::Return.name());
                    if !o.operands.is_empty() {
                        let tys: Vec<String> = self
                            .types(&o.operands)
                            .iter()
                            .map(Type::to_string)
                            .collect();
                        let _ = write!(
                            self.out,
                            " {} : {}",
                            self.values(&o.operands),
                            tys.join(", ")
                        );
                    }
                    true
                }
                _ => false,
            };
        if !done {
            match self.form {
                Form::Pretty => self.pretty_op(op, depth),
                Form::Generic => self.generic_op(op, depth),
            }
        }
        self.out.push('\n');
    }

    fn pretty_op(&mut self, op: OpId, depth: usize) {
        let o = self.module.op(op);
        self.out.push_str(&o.name);
        if !o.operands.is_empty() {
            let _ = write!(self.out, " {}", self.values(&o.operands));
        }
        if !o.attrs.is_empty() {
            let _ = write!(self.out, " {}", dict(&o.attrs));
        }
        self.regions(&o.regions, depth);
        let list = |tys: Vec<Type>| {
            if tys.is_empty() {
                "()".to_string()
            } else {
                tys.iter()
                    .map(Type::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        let _ = write!(
            self.out,
            " : {} -> {}",
            list(self.types(&o.operands)),
            list(self.types(&o.results))
        );
    }

    fn generic_op(&mut self, op: OpId, depth: usize) {
        let o = self.module.op(op);
        let _ = write_string_literal(&mut self.out, &o.name);
        let _ = write!(self.out, "({})", self.values(&o.operands));
        let (props, discardable): (Attributes, Attributes) = o
            .attrs
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .partition(|(k, _)| !is_discardable(k));
        if !props.is_empty() {
            let _ = write!(self.out, " <{}>", dict(&props));
        }
        self.regions(&o.regions, depth);
        if !discardable.is_empty() {
            let _ = write!(self.out, " {}", dict(&discardable));
        }
        let fty = Type::Function {
            inputs: self.types(&o.operands),
            results: self.types(&o.results),
        };
        let _ = write!(self.out, " : {fty}");
    }

    fn regions(&mut self, regions: &[RegionId], depth: usize) {
        if regions.is_empty() {
            return;
        }
        self.out.push_str(" (");
        for (i, &r) in regions.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.region(r, depth, false);
        }
        self.out.push(')');
    }

    /// `{ blocks }`. With `elide_entry`, the entry block's label is left out
    /// because its arguments were printed elsewhere (a function signature).
    fn region(&mut self, r: RegionId, depth: usize, elide_entry: bool) {
        self.out.push_str("{\n");
        let blocks = self.module.regions[r].blocks.clone();
        for (i, &b) in blocks.iter().enumerate() {
            let args = self.module.blocks[b].args.clone();
            // An empty entry block keeps its label, or it would read back
            // as a region with no blocks.
            let empty = args.is_empty() && self.module.blocks[b].ops.is_empty();
            let needs_label = i > 0 || (!elide_entry && (!args.is_empty() || empty));
            if needs_label {
                self.indent(depth);
                let _ = write!(self.out, "^bb{i}");
                if !args.is_empty() {
                    let list: Vec<String> = args
                        .iter()
                        .map(|&a| format!("{}: {}", self.value(a), self.module.value_type(a)))
                        .collect();
                    let _ = write!(self.out, "({})", list.join(", "));
                }
                self.out.push_str(":\n");
            }
            for op in self.module.blocks[b].ops.clone() {
                self.op(op, depth + 1);
            }
        }
        self.indent(depth);
        self.out.push('}');
    }

    /// `func.func @name(%a: T) -> R attributes {..} { body }`; returns false
    /// (and prints nothing) when the op does not have the shape that the
    /// pretty form can express, so the generic form is used instead.
    fn pretty_func(&mut self, op: OpId, depth: usize) -> bool {
        let o = self.module.op(op);
        let (
            Some(Attribute::String(name)),
            Some(Attribute::Type(Type::Function { inputs, results })),
        ) = (o.attr("sym_name"), o.attr("function_type"))
        else {
            return false;
        };
        if o.regions.len() != 1 || !o.results.is_empty() || !o.operands.is_empty() {
            return false;
        }
        let blocks = &self.module.regions[o.regions[0]].blocks;
        let entry_args: Vec<ValueId> = blocks
            .first()
            .map(|&b| self.module.blocks[b].args.clone())
            .unwrap_or_default();
        if !blocks.is_empty() && self.types(&entry_args) != *inputs {
            return false;
        }
        let dicts = |key: &str, n: usize| -> Option<Vec<Attributes>> {
            match o.attr(key) {
                None => Some(vec![Attributes::new(); n]),
                Some(Attribute::Array(items)) if items.len() == n => items
                    .iter()
                    .map(|a| match a {
                        Attribute::Dict(d) => Some(d.clone()),
                        _ => None,
                    })
                    .collect(),
                _ => None,
            }
        };
        let (Some(arg_attrs), Some(res_attrs)) = (
            dicts("arg_attrs", inputs.len()),
            dicts("res_attrs", results.len()),
        ) else {
            return false;
        };
        let visibility = match o.attr("sym_visibility") {
            None => None,
            Some(Attribute::String(v)) if matches!(v.as_str(), "private" | "public" | "nested") => {
                Some(v.clone())
            }
            Some(_) => return false,
        };
        self.out.push_str("func.func ");
        if let Some(v) = visibility {
            let _ = write!(self.out, "{v} ");
        }
        self.out.push('@');
        self.symbol(name);
        self.out.push('(');
        for (i, ty) in inputs.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            match entry_args.get(i) {
                Some(&a) => {
                    let _ = write!(self.out, "{}: {ty}", self.value(a));
                }
                None => {
                    let _ = write!(self.out, "%arg{i}: {ty}");
                }
            }
            if !arg_attrs[i].is_empty() {
                let _ = write!(self.out, " {}", dict(&arg_attrs[i]));
            }
        }
        self.out.push(')');
        if !results.is_empty() {
            self.out.push_str(" -> ");
            let simple = results.len() == 1
                && res_attrs[0].is_empty()
                && !matches!(results[0], Type::Function { .. });
            if simple {
                let _ = write!(self.out, "{}", results[0]);
            } else {
                let items: Vec<String> = results
                    .iter()
                    .zip(&res_attrs)
                    .map(|(t, a)| {
                        if a.is_empty() {
                            t.to_string()
                        } else {
                            format!("{t} {}", dict(a))
                        }
                    })
                    .collect();
                let _ = write!(self.out, "({})", items.join(", "));
            }
        }
        let extra: Attributes = o
            .attrs
            .iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "sym_name" | "function_type" | "sym_visibility" | "arg_attrs" | "res_attrs"
                )
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !extra.is_empty() {
            let _ = write!(self.out, " attributes {}", dict(&extra));
        }
        if !blocks.is_empty() {
            self.out.push(' ');
            self.region(o.regions[0], depth, true);
        }
        true
    }
}
