//! `ircc --describe-op NAME`: one operation's declaration as its spec
//! gives it (`spec/dialects/*.toml`): operands, results, attributes with
//! their kinds, defaults and meaning, and the fusion and layout classes.
//! [`op_reference`] writes the same for every operation as the checked-in
//! reference `spec/ops.md`.

use std::fmt::Write;

use ircc_core::Registry;
use ircc_core::registry::{ArgSpec, Arity, AttrSpec, OpSpec, ReductionDims};

/// The operands or results of an op as a list: `x, w, b (optional)`.
fn args(list: &[ArgSpec]) -> String {
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
}

/// An attribute's kind (`ints`, `string of a|b`) and presence (`default
/// 1`, `required`, `optional`).
fn kind_and_presence(a: &AttrSpec) -> (String, String) {
    let mut kind = a.kind.name().to_string();
    if !a.values.is_empty() {
        kind = format!("{kind} of {}", a.values.join("|"));
    }
    let presence = match (&a.default, a.required) {
        (Some(d), _) => format!("default {d}"),
        (None, true) => "required".to_string(),
        (None, false) => "optional".to_string(),
    };
    (kind, presence)
}

/// What an op reduces, `w over axes [1, 2, 3]; x over axes [1]`.
fn reductions(s: &OpSpec) -> Option<String> {
    (!s.reduction.is_empty()).then(|| {
        s.reduction
            .iter()
            .map(|(operand, d)| match d {
                ReductionDims::Fixed(axes) => format!("{operand} over axes {axes:?}"),
                ReductionDims::FromAttr(attr) => format!("{operand} over the axes of '{attr}'"),
            })
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// `spec/ops.md`: every registered operation, by dialect, as the specs
/// declare it.
#[cfg(test)]
pub fn op_reference(registry: &Registry) -> String {
    let mut out = String::from(
        "# Operation reference\n\nGenerated from `spec/dialects/*.toml` by `ircc --describe-op`'s code; do not edit\n(`IRCC_UPDATE_OP_REFERENCE=1 cargo test --lib op_reference` rewrites it).\nAttributes are written in the IR's attribute syntax. The DNNFusion mapping\ntype and SmartMem layout class are what `spec/fusion.toml`'s tables read.\n",
    );
    for dialect in registry.dialects.values() {
        let _ = write!(out, "\n## {}\n\n{}.\n", dialect.name, dialect.summary);
        let prefix = format!("{}.", dialect.name);
        for def in registry
            .ops
            .values()
            .filter(|d| d.spec.name.starts_with(&prefix))
        {
            let s = &def.spec;
            let _ = write!(out, "\n### `{}`\n\n{}.\n\n", s.name, s.summary);
            let _ = writeln!(out, "- operands: {}", args(&s.operands));
            let _ = writeln!(out, "- results: {}", args(&s.results));
            if let Some(m) = s.mapping {
                let _ = writeln!(out, "- DNNFusion mapping type: {}", m.name());
            }
            if let Some(l) = s.layout {
                let _ = writeln!(out, "- SmartMem layout class: {}", l.name());
            }
            if let Some(r) = reductions(s) {
                let _ = writeln!(out, "- reduces: {r}");
            }
            if !s.attrs.is_empty() {
                let _ = writeln!(
                    out,
                    "\n| attribute | kind | presence | meaning |\n|---|---|---|---|"
                );
                for (attr, a) in &s.attrs {
                    let (kind, presence) = kind_and_presence(a);
                    let doc = a.doc.as_deref().unwrap_or("").replace('|', "\\|");
                    let _ = writeln!(
                        out,
                        "| `{attr}` | {} | {} | {doc} |",
                        kind.replace('|', "\\|"),
                        presence.replace('|', "\\|")
                    );
                }
            }
        }
    }
    out
}

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
            let (kind, presence) = kind_and_presence(a);
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
    if let Some(r) = reductions(s) {
        let _ = writeln!(out, "  reduces:                {r}");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    /// `spec/ops.md` is what the specs say today.
    #[test]
    fn op_reference_is_current() {
        let driver = crate::Driver::new().expect("the built-in dialects load");
        let text = super::op_reference(&driver.registry);
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("spec/ops.md");
        if std::env::var_os("IRCC_UPDATE_OP_REFERENCE").is_some() {
            std::fs::write(&path, &text).unwrap();
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == text,
            "spec/ops.md is stale: IRCC_UPDATE_OP_REFERENCE=1 cargo test --lib op_reference"
        );
        // Every op is in it, with its attributes.
        for name in driver.registry.ops.keys() {
            assert!(text.contains(&format!("### `{name}`")), "{name}");
        }
        assert!(text.contains("| `group` | int | default 1 | number of groups |"));
    }
}
