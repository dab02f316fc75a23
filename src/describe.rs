//! `ircc --describe-op NAME`: one operation's declaration as its spec
//! gives it (`spec/dialects/*.toml`): operands, results, attributes with
//! their kinds, defaults and meaning, and the fusion and layout classes.

use std::fmt::Write;

use ircc_core::Registry;
use ircc_core::registry::{ArgSpec, Arity, ReductionDims};

/// The description of `name`, or an error naming the closest registered
/// operation.
pub(crate) fn describe_op(registry: &Registry, name: &str) -> Result<String, String> {
    let Some(def) = registry.get(name) else {
        let closest = crate::closest(name, registry.ops.keys().map(String::as_str))
            .map(|op| format!(" (did you mean '{op}'?)"))
            .unwrap_or_default();
        return Err(format!(
            "no operation '{name}'{closest}; ircc --list-ops lists them"
        ));
    };
    let s = &def.spec;
    let args = |list: &[ArgSpec]| -> String {
        if list.is_empty() {
            return "none".to_string();
        }
        list.iter()
            .map(|a| match a.arity {
                Arity::One => a.name.clone(),
                Arity::Optional => format!("{} (optional)", a.name),
                Arity::Variadic => format!("{}... (any number)", a.name),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = String::new();
    let _ = writeln!(out, "{}: {}", s.name, s.summary);
    let _ = writeln!(out, "  operands:   {}", args(&s.operands));
    let _ = writeln!(out, "  results:    {}", args(&s.results));
    if s.attrs.is_empty() {
        let _ = writeln!(out, "  attributes: none");
    } else {
        let _ = writeln!(out, "  attributes:");
        let width = s.attrs.keys().map(String::len).max().unwrap_or(0);
        for (attr, a) in &s.attrs {
            let mut kind = a.kind.name().to_string();
            if !a.values.is_empty() {
                kind = format!("{kind} of {}", a.values.join("|"));
            }
            let presence = match (&a.default, a.required) {
                (Some(d), _) => format!("default {d}"),
                (None, true) => "required".to_string(),
                (None, false) => "optional".to_string(),
            };
            let doc = a.doc.as_deref().unwrap_or("");
            let _ = writeln!(out, "    {attr:<width$}  {kind}, {presence} -- {doc}");
        }
    }
    if let Some(m) = s.mapping {
        let _ = writeln!(out, "  DNNFusion mapping type: {}", m.name());
    }
    if let Some(l) = s.layout {
        let _ = writeln!(out, "  SmartMem layout class:  {}", l.name());
    }
    if !s.reduction.is_empty() {
        let dims: Vec<String> = s
            .reduction
            .iter()
            .map(|(operand, d)| match d {
                ReductionDims::Fixed(axes) => format!("{operand} over axes {axes:?}"),
                ReductionDims::FromAttr(attr) => format!("{operand} over the axes of '{attr}'"),
            })
            .collect();
        let _ = writeln!(out, "  reduces:                {}", dims.join("; "));
    }
    Ok(out)
}
