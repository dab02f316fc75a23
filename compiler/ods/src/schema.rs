//! The schema of a dialect spec file.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use serde::Deserialize;

/// The kinds an attribute may have in a spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttrKind {
    Int,
    Float,
    Bool,
    String,
    /// A string from the attribute's `values`; the generated accessor
    /// returns an enum and the verifier refuses any other string.
    Enum,
    Ints,
    Floats,
    Type,
    Dense,
    AffineMap,
    Symbol,
    Any,
}

impl AttrKind {
    pub fn name(self) -> &'static str {
        match self {
            AttrKind::Int => "int",
            AttrKind::Float => "float",
            AttrKind::Bool => "bool",
            AttrKind::String => "string",
            AttrKind::Enum => "enum",
            AttrKind::Ints => "ints",
            AttrKind::Floats => "floats",
            AttrKind::Type => "type",
            AttrKind::Dense => "dense",
            AttrKind::AffineMap => "affine-map",
            AttrKind::Symbol => "symbol",
            AttrKind::Any => "any",
        }
    }
}

/// DNNFusion's classification of how output elements depend on inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MappingType {
    OneToOne,
    OneToMany,
    ManyToMany,
    Reorganize,
    Shuffle,
}

impl MappingType {
    pub fn name(self) -> &'static str {
        match self {
            MappingType::OneToOne => "one-to-one",
            MappingType::OneToMany => "one-to-many",
            MappingType::ManyToMany => "many-to-many",
            MappingType::Reorganize => "reorganize",
            MappingType::Shuffle => "shuffle",
        }
    }
}

/// SmartMem's operator classes: input layout dependent or independent
/// (ILD/ILI), and whether the output layout is variable or fixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
pub enum LayoutClass {
    #[serde(rename = "ild-variable")]
    IldVariable,
    #[serde(rename = "ild-fixed")]
    IldFixed,
    #[serde(rename = "ili-variable")]
    IliVariable,
    #[serde(rename = "ili-fixed")]
    IliFixed,
}

impl LayoutClass {
    pub fn name(self) -> &'static str {
        match self {
            LayoutClass::IldVariable => "ILD-Variable",
            LayoutClass::IldFixed => "ILD-Fixed",
            LayoutClass::IliVariable => "ILI-Variable",
            LayoutClass::IliFixed => "ILI-Fixed",
        }
    }
}

/// The dimensions an operand is reduced over: fixed positions (negative
/// counts from the end) or the value of an attribute (`"attr:axis"`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum ReductionDims {
    Fixed(Vec<i64>),
    FromAttr(String),
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttrSpecToml {
    pub kind: AttrKind,
    /// The default in the textual attribute syntax (`"1"`, `"1.0e-5 : f32"`,
    /// `"\"constant\""`).
    pub default: Option<String>,
    #[serde(default)]
    pub optional: bool,
    /// Integers may use the whole i64 range (ONNX's "to the end" slice
    /// bounds); others must lie within ±MAX_DIM.
    #[serde(default)]
    pub unbounded: bool,
    /// The strings an `enum` attribute may hold.
    #[serde(default)]
    pub values: Vec<String>,
    pub doc: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpSpecToml {
    pub name: String,
    pub summary: String,
    /// `name`, `name?` (optional) or `name*` (variadic).
    #[serde(default)]
    pub operands: Vec<String>,
    #[serde(default)]
    pub results: Vec<String>,
    #[serde(default)]
    pub attrs: IndexMap<String, AttrSpecToml>,
    pub mapping: Option<MappingType>,
    pub layout: Option<LayoutClass>,
    #[serde(default)]
    pub reduction: BTreeMap<String, ReductionDims>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DialectSpec {
    pub dialect: String,
    pub summary: String,
    #[serde(rename = "op", default)]
    pub ops: Vec<OpSpecToml>,
}

/// Reads a dialect spec and checks what the schema alone cannot: enum
/// attributes list their values (and only they do), reductions name
/// operands that exist.
pub fn parse(text: &str) -> Result<DialectSpec, String> {
    let spec: DialectSpec =
        toml::from_str(text).map_err(|e| format!("invalid dialect spec: {e}"))?;
    for op in &spec.ops {
        let full = format!("{}.{}", spec.dialect, op.name);
        for (name, a) in &op.attrs {
            if (a.kind == AttrKind::Enum) == a.values.is_empty() {
                return Err(format!(
                    "spec of '{full}': attribute '{name}' lists values but is not of kind enum, or the reverse"
                ));
            }
        }
        for operand in op.reduction.keys() {
            if !op
                .operands
                .iter()
                .any(|o| o.trim_end_matches(['?', '*']) == operand)
            {
                return Err(format!(
                    "spec of '{full}': reduction names unknown operand '{operand}'"
                ));
            }
        }
    }
    Ok(spec)
}

/// One option of a pass.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PassOptionToml {
    /// `int`, `bool`, `string` or `enum`.
    pub kind: String,
    /// The default, as a pipeline would write it.
    pub default: String,
    #[serde(default)]
    pub values: Vec<String>,
    pub doc: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PassToml {
    pub name: String,
    pub summary: String,
    #[serde(default)]
    pub options: IndexMap<String, PassOptionToml>,
}

/// `spec/passes.toml`: every pass ircc ships.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PassesSpec {
    #[serde(rename = "pass", default)]
    pub passes: Vec<PassToml>,
}

/// Reads a pass table and checks each option's kind and default.
pub fn parse_passes(text: &str) -> Result<PassesSpec, String> {
    let spec: PassesSpec = toml::from_str(text).map_err(|e| format!("invalid pass table: {e}"))?;
    for p in &spec.passes {
        for (name, o) in &p.options {
            let ok = match o.kind.as_str() {
                "int" => o.default.parse::<i64>().is_ok(),
                "bool" => matches!(o.default.as_str(), "true" | "false"),
                "string" => true,
                "enum" => o.values.contains(&o.default),
                _ => false,
            };
            if !ok || (o.kind == "enum") == o.values.is_empty() {
                return Err(format!(
                    "pass '{}': option '{name}' has kind '{}' and default '{}', which do not agree",
                    p.name, o.kind, o.default
                ));
            }
        }
    }
    Ok(spec)
}
