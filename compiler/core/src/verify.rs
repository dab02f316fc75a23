//! The verifier: checks a module against the registry and reports every
//! problem it finds, each at the operation it concerns.
//!
//! Checked: the op is registered (unless unregistered ops are allowed),
//! operand and result counts, attribute presence and kinds, unknown
//! attributes (names without a dialect prefix must be declared), affine
//! maps, the op's own verify hook, inferred against declared result types,
//! unique symbols, the integrity of use lists, and that every value is
//! defined before it is used.

use std::collections::{HashMap, HashSet};

use crate::attr::Attribute;
use crate::diag::{Diagnostic, Diagnostics};
use crate::ir::{BlockId, Module, OpId, Use, ValueId};
use crate::limits::{MAX_DIM, MAX_ELEMENTS};
use crate::print::is_discardable;
use crate::registry::{AttrKind, OpView, Registry, kind_accepts};
use crate::types::Type;

#[derive(Clone, Copy, Debug, Default)]
pub struct VerifyOptions {
    /// Accept operations no dialect declares, as `mlir-opt --allow-unregistered-dialect`.
    pub allow_unregistered: bool,
}

pub fn verify(
    module: &Module,
    registry: &Registry,
    options: VerifyOptions,
) -> Result<(), Diagnostics> {
    let mut errors = Vec::new();
    let mut symbols: HashMap<&str, OpId> = HashMap::new();
    for &op in module.top_ops() {
        if let Some(Attribute::String(name)) = module.op(op).attr("sym_name") {
            if let Some(&prev) = symbols.get(name.as_str()) {
                errors.push(
                    Diagnostic::error(
                        module.op(op).loc.clone(),
                        format!("redefinition of symbol '@{name}'"),
                    )
                    .with_note(module.op(prev).loc.clone(), "previously defined here"),
                );
            } else {
                symbols.insert(name, op);
            }
        }
    }
    module.walk(|op| {
        if let Err(message) = verify_op(module, registry, options, op) {
            errors.push(Diagnostic::error(module.op(op).loc.clone(), message));
        }
    });
    for &op in module.top_ops() {
        for &r in &module.op(op).regions {
            for &b in &module.regions[r].blocks {
                check_defined_before_use(module, b, &mut HashSet::new(), &mut errors);
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Diagnostics(errors))
    }
}

/// Every operand is a value of an enclosing block defined before its use:
/// an argument of this block or an enclosing one, or a result of an
/// earlier op. (A pass that outlines ops can otherwise leave a cycle that
/// only the printer would notice.)
fn check_defined_before_use(
    module: &Module,
    block: BlockId,
    visible: &mut HashSet<ValueId>,
    errors: &mut Vec<Diagnostic>,
) {
    let mut added: Vec<ValueId> = module.blocks[block].args.clone();
    visible.extend(added.iter().copied());
    for &op in &module.blocks[block].ops {
        let o = module.op(op);
        for (i, v) in o.operands.iter().enumerate() {
            if !visible.contains(v) {
                let name = module.value(*v).name.as_deref().unwrap_or("?");
                errors.push(Diagnostic::error(
                    o.loc.clone(),
                    format!(
                        "operand #{i} of '{}' (%{name}) is not defined before this use",
                        o.name
                    ),
                ));
            }
        }
        for &r in &o.regions {
            for &b in &module.regions[r].blocks {
                check_defined_before_use(module, b, visible, errors);
            }
        }
        visible.extend(o.results.iter().copied());
        added.extend(o.results.iter().copied());
    }
    for v in added {
        visible.remove(&v);
    }
}

fn check_count(what: &str, n: usize, (min, max): (usize, Option<usize>)) -> Result<(), String> {
    let ok = n >= min && max.is_none_or(|m| n <= m);
    if ok {
        return Ok(());
    }
    let expected = match max {
        Some(m) if m == min => format!("{min}"),
        Some(m) => format!("{min} to {m}"),
        None => format!("at least {min}"),
    };
    Err(format!("expects {expected} {what} but has {n}"))
}

fn check_affine(a: &Attribute) -> Result<(), String> {
    match a {
        Attribute::AffineMap(m) => m.check_bounds().map_err(|e| format!("bad affine map: {e}")),
        Attribute::Array(items) => items.iter().try_for_each(check_affine),
        Attribute::Dict(d) => d.values().try_for_each(check_affine),
        _ => Ok(()),
    }
}

fn verify_op(
    module: &Module,
    registry: &Registry,
    options: VerifyOptions,
    op: OpId,
) -> Result<(), String> {
    let o = module.op(op);
    for &v in o.operands.iter().chain(&o.results) {
        if let Type::Tensor(t) = module.value_type(v)
            && t.num_elements() > MAX_ELEMENTS
        {
            return Err(format!(
                "{t} has more than the supported {MAX_ELEMENTS} elements"
            ));
        }
    }
    for (i, &v) in o.operands.iter().enumerate() {
        if !module.value(v).uses.contains(&Use {
            op,
            index: i as u32,
        }) {
            return Err(format!(
                "internal error: use list of operand #{i} is out of date"
            ));
        }
    }
    for a in o.attrs.values() {
        check_affine(a)?;
    }
    let Some(def) = registry.get(&o.name) else {
        if options.allow_unregistered {
            return Ok(());
        }
        return Err(format!("unknown operation '{}'", o.name));
    };
    let spec = &def.spec;
    check_count("operands", o.operands.len(), spec.operand_range())
        .map_err(|e| format!("'{}' {e}", o.name))?;
    check_count("results", o.results.len(), spec.result_range())
        .map_err(|e| format!("'{}' {e}", o.name))?;
    for (name, a) in &o.attrs {
        match spec.attrs.get(name) {
            Some(s) if !kind_accepts(s.kind, a) => {
                return Err(format!(
                    "attribute '{name}' of '{}' must be of kind {}, not {} ({a})",
                    o.name,
                    s.kind.name(),
                    a.kind_name()
                ));
            }
            Some(s) if !s.unbounded && matches!(s.kind, AttrKind::Int | AttrKind::Ints) => {
                let values = a
                    .as_i64_array()
                    .or_else(|| a.as_i64().map(|v| vec![v]))
                    .unwrap_or_default();
                if let Some(v) = values.iter().find(|v| v.unsigned_abs() > MAX_DIM as u64) {
                    return Err(format!(
                        "attribute '{name}' of '{}' holds {v}, outside the supported range ±{MAX_DIM}",
                        o.name
                    ));
                }
            }
            Some(s) if s.kind == AttrKind::Enum => {
                let v = a.as_str().unwrap_or_default();
                if !s.values.iter().any(|x| x == v) {
                    return Err(format!(
                        "attribute '{name}' of '{}' is \"{v}\", not one of {}",
                        o.name,
                        s.values.join(", ")
                    ));
                }
            }
            Some(_) => {}
            None if is_discardable(name) => {}
            None => {
                let known: Vec<&str> = spec.attrs.keys().map(String::as_str).collect();
                let hint = if known.is_empty() {
                    "it takes none".to_string()
                } else {
                    format!("it takes {}", known.join(", "))
                };
                return Err(format!(
                    "unknown attribute '{name}' for '{}' ({hint})",
                    o.name
                ));
            }
        }
    }
    for (name, s) in &spec.attrs {
        if s.required && !o.attrs.contains_key(name) {
            return Err(format!("'{}' requires attribute '{name}'", o.name));
        }
    }
    let view = OpView { module, op, spec };
    if let Some(verify) = def.hooks.verify {
        verify(&view).map_err(|e| format!("'{}': {e}", o.name))?;
    }
    if let Some(infer) = def.hooks.infer {
        let inferred = infer(&view).map_err(|e| format!("'{}': {e}", o.name))?;
        let declared = view.result_types();
        if inferred.len() != declared.len() {
            return Err(format!(
                "'{}' produces {} results but {} are declared",
                o.name,
                inferred.len(),
                declared.len()
            ));
        }
        for (i, (inf, dec)) in inferred.iter().zip(declared).enumerate() {
            if inf != dec {
                return Err(format!(
                    "'{}': result #{i} is declared as {dec} but the operands and attributes give {inf}",
                    o.name
                ));
            }
        }
    }
    Ok(())
}
