//! The dialect registry. An operation is declared as data in
//! `spec/dialects/*.toml` (operands, results, attributes with kinds and
//! defaults, DNNFusion mapping type, SmartMem layout class, reduction
//! dimensions, a summary) and bound to Rust hooks (infer result types,
//! verify, interpret). [`Registry::add_dialect`] refuses a spec op without
//! hooks and hooks without a spec op, so the two cannot drift apart.

use std::collections::BTreeMap;
use std::fmt::Write;

use indexmap::IndexMap;

use crate::attr::Attribute;
use crate::diag::Diagnostic;
use crate::interp::Env;
use crate::ir::{Module, OpId};
use crate::tensor::Tensor;
use crate::types::{TensorType, Type};

pub use ircc_ods::{AttrKind, LayoutClass, MappingType, ReductionDims};

/// Whether an attribute is of a spec kind (enum values are checked
/// against the spec by the verifier).
pub fn kind_accepts(kind: AttrKind, a: &Attribute) -> bool {
    match kind {
        AttrKind::Int => matches!(a, Attribute::Int(..) | Attribute::Bool(_)),
        AttrKind::Float => matches!(a, Attribute::Float(..) | Attribute::Int(..)),
        AttrKind::Bool => matches!(a, Attribute::Bool(_) | Attribute::Unit),
        AttrKind::String | AttrKind::Enum => matches!(a, Attribute::String(_)),
        AttrKind::Ints => a.as_i64_array().is_some(),
        AttrKind::Floats => a.as_f64_array().is_some(),
        AttrKind::Type => matches!(a, Attribute::Type(_)),
        AttrKind::Dense => matches!(a, Attribute::Dense(_)),
        AttrKind::AffineMap => matches!(a, Attribute::AffineMap(_)),
        AttrKind::Symbol => matches!(a, Attribute::SymbolRef(_)),
        AttrKind::Any => true,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    One,
    Optional,
    Variadic,
}

#[derive(Clone, Debug)]
pub struct ArgSpec {
    pub name: String,
    pub arity: Arity,
}

fn arg_spec(text: &str) -> ArgSpec {
    if let Some(n) = text.strip_suffix('?') {
        ArgSpec {
            name: n.to_string(),
            arity: Arity::Optional,
        }
    } else if let Some(n) = text.strip_suffix('*') {
        ArgSpec {
            name: n.to_string(),
            arity: Arity::Variadic,
        }
    } else {
        ArgSpec {
            name: text.to_string(),
            arity: Arity::One,
        }
    }
}

#[derive(Clone, Debug)]
pub struct AttrSpec {
    pub kind: AttrKind,
    pub default: Option<Attribute>,
    /// Absent and no default: the op cannot be built without it.
    pub required: bool,
    pub unbounded: bool,
    /// The strings an `enum` attribute may hold.
    pub values: Vec<String>,
    pub doc: Option<String>,
}

/// One operation's declaration, read from a dialect spec.
#[derive(Clone, Debug)]
pub struct OpSpec {
    pub name: String,
    pub summary: String,
    pub operands: Vec<ArgSpec>,
    pub results: Vec<ArgSpec>,
    pub attrs: IndexMap<String, AttrSpec>,
    pub mapping: Option<MappingType>,
    pub layout: Option<LayoutClass>,
    pub reduction: BTreeMap<String, ReductionDims>,
}

/// Allowed counts for a list of arguments.
fn count_range(args: &[ArgSpec]) -> (usize, Option<usize>) {
    let min = args.iter().filter(|a| a.arity == Arity::One).count();
    let max = if args.iter().any(|a| a.arity == Arity::Variadic) {
        None
    } else {
        Some(args.len())
    };
    (min, max)
}

impl OpSpec {
    pub fn operand_range(&self) -> (usize, Option<usize>) {
        count_range(&self.operands)
    }

    pub fn result_range(&self) -> (usize, Option<usize>) {
        count_range(&self.results)
    }
}

/// A read-only view of one operation, handed to hooks, with attribute
/// defaults from the spec applied.
pub struct OpView<'a> {
    pub module: &'a Module,
    pub op: OpId,
    pub spec: &'a OpSpec,
}

impl<'a> OpView<'a> {
    pub fn name(&self) -> &str {
        &self.module.op(self.op).name
    }

    pub fn num_operands(&self) -> usize {
        self.module.op(self.op).operands.len()
    }

    pub fn operand_type(&self, i: usize) -> &'a Type {
        self.module.value_type(self.module.op(self.op).operands[i])
    }

    /// Operand `i` as a tensor type, or an error naming the operand.
    pub fn tensor(&self, i: usize) -> Result<&'a TensorType, String> {
        let name = self
            .spec
            .operands
            .get(i.min(self.spec.operands.len().saturating_sub(1)))
            .map_or("operand", |a| &a.name);
        match self.operand_type(i) {
            Type::Tensor(t) => Ok(t),
            other => Err(format!(
                "operand #{i} ({name}) must be a tensor, not {other}"
            )),
        }
    }

    pub fn tensors(&self) -> Result<Vec<&'a TensorType>, String> {
        (0..self.num_operands()).map(|i| self.tensor(i)).collect()
    }

    pub fn result_types(&self) -> Vec<&'a Type> {
        self.module
            .op(self.op)
            .results
            .iter()
            .map(|&r| self.module.value_type(r))
            .collect()
    }

    pub fn result_tensor(&self, i: usize) -> Result<&'a TensorType, String> {
        match self.result_types().get(i) {
            Some(Type::Tensor(t)) => Ok(t),
            Some(other) => Err(format!("result #{i} must be a tensor, not {other}")),
            None => Err(format!("result #{i} does not exist")),
        }
    }

    /// The attribute as written, else the spec's default.
    pub fn attr(&self, name: &str) -> Option<&'a Attribute> {
        self.module
            .op(self.op)
            .attr(name)
            .or_else(|| self.spec.attrs.get(name).and_then(|a| a.default.as_ref()))
    }

    pub fn has_attr(&self, name: &str) -> bool {
        self.module.op(self.op).attr(name).is_some()
    }

    pub fn i64(&self, name: &str) -> Result<i64, String> {
        self.attr(name)
            .and_then(Attribute::as_i64)
            .ok_or_else(|| format!("attribute '{name}' must be an integer"))
    }

    pub fn f64(&self, name: &str) -> Result<f64, String> {
        self.attr(name)
            .and_then(Attribute::as_f64)
            .ok_or_else(|| format!("attribute '{name}' must be a number"))
    }

    pub fn bool(&self, name: &str) -> Result<bool, String> {
        match self.attr(name) {
            Some(Attribute::Bool(b)) => Ok(*b),
            Some(Attribute::Unit) => Ok(true),
            Some(Attribute::Int(v, _)) => Ok(*v != 0),
            None => Ok(false),
            Some(_) => Err(format!("attribute '{name}' must be a boolean")),
        }
    }

    pub fn str(&self, name: &str) -> Result<&'a str, String> {
        self.attr(name)
            .and_then(Attribute::as_str)
            .ok_or_else(|| format!("attribute '{name}' must be a string"))
    }

    /// An integer-list attribute, or `None` when absent without default.
    pub fn i64s(&self, name: &str) -> Result<Option<Vec<i64>>, String> {
        match self.attr(name) {
            None => Ok(None),
            Some(a) => a
                .as_i64_array()
                .map(Some)
                .ok_or_else(|| format!("attribute '{name}' must be a list of integers")),
        }
    }

    pub fn f64s(&self, name: &str) -> Result<Option<Vec<f64>>, String> {
        match self.attr(name) {
            None => Ok(None),
            Some(a) => a
                .as_f64_array()
                .map(Some)
                .ok_or_else(|| format!("attribute '{name}' must be a list of numbers")),
        }
    }
}

pub type InferFn = fn(&OpView) -> Result<Vec<Type>, String>;
pub type VerifyFn = fn(&OpView) -> Result<(), String>;
pub type InterpretFn = fn(&OpView, &[Tensor], &mut dyn Env) -> Result<Vec<Tensor>, String>;

/// The Rust side of an operation.
#[derive(Clone, Copy, Default)]
pub struct OpHooks {
    /// Result types from operand types and attributes. Where it is absent,
    /// the verifier checks only counts and attributes.
    pub infer: Option<InferFn>,
    /// Checks beyond what inference covers.
    pub verify: Option<VerifyFn>,
    pub interpret: Option<InterpretFn>,
}

#[derive(Clone)]
pub struct OpDef {
    pub spec: OpSpec,
    pub hooks: OpHooks,
}

#[derive(Clone)]
pub struct DialectInfo {
    pub name: String,
    pub summary: String,
}

#[derive(Clone, Default)]
pub struct Registry {
    pub dialects: IndexMap<String, DialectInfo>,
    pub ops: IndexMap<String, OpDef>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads a dialect spec and binds each op to its hooks. Every spec op
    /// needs hooks and every hook a spec op.
    pub fn add_dialect(
        &mut self,
        spec_toml: &str,
        hooks: &[(&str, OpHooks)],
    ) -> Result<(), Diagnostic> {
        let (info, specs) = parse_dialect_spec(spec_toml)?;
        let hook_map: IndexMap<&str, OpHooks> = hooks.iter().map(|(n, h)| (*n, *h)).collect();
        let mut problems = Vec::new();
        for s in &specs {
            if !hook_map.contains_key(s.name.as_str()) {
                problems.push(format!(
                    "'{}' is declared in the spec but has no hooks",
                    s.name
                ));
            }
        }
        for name in hook_map.keys() {
            if !specs.iter().any(|s| s.name == *name) {
                problems.push(format!("'{name}' has hooks but no spec entry"));
            }
        }
        if !problems.is_empty() {
            return Err(Diagnostic::plain(format!(
                "dialect '{}': {}",
                info.name,
                problems.join("; ")
            )));
        }
        for spec in specs {
            let hooks = hook_map[spec.name.as_str()];
            self.ops.insert(spec.name.clone(), OpDef { spec, hooks });
        }
        self.dialects.insert(info.name.clone(), info);
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&OpDef> {
        self.ops.get(name)
    }

    pub fn view<'a>(&'a self, module: &'a Module, op: OpId) -> Option<OpView<'a>> {
        let def = self.ops.get(&module.op(op).name)?;
        Some(OpView {
            module,
            op,
            spec: &def.spec,
        })
    }

    /// Sets the result types of a freshly built `op` from its infer hook,
    /// after its verify hook accepts it.
    pub fn infer_result_types(&self, module: &mut Module, op: OpId) -> Result<(), String> {
        let def = self
            .ops
            .get(&module.op(op).name)
            .ok_or_else(|| format!("'{}' is not registered", module.op(op).name))?;
        let view = OpView {
            module,
            op,
            spec: &def.spec,
        };
        if let Some(verify) = def.hooks.verify {
            verify(&view)?;
        }
        let Some(infer) = def.hooks.infer else {
            return Ok(());
        };
        let types = infer(&view)?;
        for (r, t) in module.op(op).results.clone().into_iter().zip(types) {
            module.values[r].ty = t;
        }
        Ok(())
    }

    /// The table printed by `ircc --list-ops`.
    pub fn ops_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<26} {:<13} {:<13} {:<24} SUMMARY",
            "OP", "MAPPING", "LAYOUT", "REDUCTION"
        );
        for (name, def) in &self.ops {
            let s = &def.spec;
            let reduction: Vec<String> = s
                .reduction
                .iter()
                .map(|(k, v)| match v {
                    ReductionDims::Fixed(d) => format!("{k}:{d:?}").replace(' ', ""),
                    ReductionDims::FromAttr(a) => format!("{k}:{a}"),
                })
                .collect();
            let _ = writeln!(
                out,
                "{:<26} {:<13} {:<13} {:<24} {}",
                name,
                s.mapping.map_or("-", MappingType::name),
                s.layout.map_or("-", LayoutClass::name),
                if reduction.is_empty() {
                    "-".to_string()
                } else {
                    reduction.join(",")
                },
                s.summary
            );
        }
        out
    }
}

/// Parses a dialect spec without binding hooks.
pub fn parse_dialect_spec(text: &str) -> Result<(DialectInfo, Vec<OpSpec>), Diagnostic> {
    let raw = ircc_ods::parse(text).map_err(Diagnostic::plain)?;
    let mut specs = Vec::new();
    for op in raw.ops {
        let full = format!("{}.{}", raw.dialect, op.name);
        let mut attrs = IndexMap::new();
        for (name, a) in op.attrs {
            let default = match &a.default {
                Some(text) => Some(crate::parse::parse_attribute(text).map_err(|e| {
                    Diagnostic::plain(format!(
                        "spec of '{full}': default of '{name}' is not an attribute: {}",
                        e.message
                    ))
                })?),
                None => None,
            };
            if let Some(d) = &default
                && !kind_accepts(a.kind, d)
            {
                return Err(Diagnostic::plain(format!(
                    "spec of '{full}': default of '{name}' is not of kind {}",
                    a.kind.name()
                )));
            }
            let required = default.is_none() && !a.optional;
            attrs.insert(
                name,
                AttrSpec {
                    kind: a.kind,
                    default,
                    required,
                    unbounded: a.unbounded,
                    values: a.values,
                    doc: a.doc,
                },
            );
        }
        specs.push(OpSpec {
            name: full,
            summary: op.summary,
            operands: op.operands.iter().map(|s| arg_spec(s)).collect(),
            results: op.results.iter().map(|s| arg_spec(s)).collect(),
            attrs,
            mapping: op.mapping,
            layout: op.layout,
            reduction: op.reduction,
        });
    }
    Ok((
        DialectInfo {
            name: raw.dialect,
            summary: raw.summary,
        },
        specs,
    ))
}
