//! The tables of `spec/fusion.toml`, read once and checked for completeness.

use std::fmt::Write;

use indexmap::IndexMap;
use ircc_core::registry::{LayoutClass, MappingType};
use serde::Deserialize;

pub const SPEC: &str = include_str!("../../../../spec/fusion.toml");

/// DNNFusion's verdict on fusing a pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    /// fuse_through
    Green,
    /// fuse_depend: decided by the cost model (or, later, measurements)
    Yellow,
    /// fuse_break
    Red,
}

/// SmartMem's action on a producer–consumer pair (Table 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    KeepBoth,
    TryFuse,
    EliminateFirst,
    EliminateSecond,
    EliminateBoth,
}

/// Where the layout search happens after a pair is handled (Table 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Search {
    SearchBoth,
    SearchFused,
    SearchFirst,
    SearchSecond,
    NoSearch,
}

#[derive(Deserialize)]
struct Raw {
    dnnfusion: RawDnn,
    smartmem: RawSmartMem,
    #[serde(default)]
    prologues: IndexMap<String, Vec<String>>,
}

#[derive(Deserialize)]
struct RawDnn {
    types: Vec<MappingType>,
    table: IndexMap<String, Vec<String>>,
}

#[derive(Deserialize)]
struct RawSmartMem {
    classes: Vec<LayoutClass>,
    action: IndexMap<String, Vec<Action>>,
    result: IndexMap<String, Vec<String>>,
    operand_rules: IndexMap<String, LayoutClass>,
}

pub struct Tables {
    pub types: Vec<MappingType>,
    fusion: Vec<Vec<(MappingType, Color)>>,
    pub classes: Vec<LayoutClass>,
    actions: Vec<Vec<Action>>,
    results: Vec<Vec<(Option<LayoutClass>, Search)>>,
    /// The class of a one-to-one op that broadcasts.
    pub broadcasting_elementwise: LayoutClass,
    /// Many-to-Many producers that join a product's group as its prologue,
    /// with the products that take them.
    prologues: IndexMap<String, Vec<String>>,
}

fn parse_enum<T: for<'de> Deserialize<'de>>(text: &str) -> Result<T, String> {
    T::deserialize(serde::de::value::StrDeserializer::<serde::de::value::Error>::new(text))
        .map_err(|e| format!("'{text}': {e}"))
}

impl Tables {
    pub fn parse(text: &str) -> Result<Tables, String> {
        let raw: Raw = toml::from_str(text).map_err(|e| format!("spec/fusion.toml: {e}"))?;
        let square = |n: usize, rows: usize, what: &str| -> Result<(), String> {
            if rows != n {
                Err(format!(
                    "spec/fusion.toml: {what} needs {n} rows, one per type"
                ))
            } else {
                Ok(())
            }
        };
        square(
            raw.dnnfusion.types.len(),
            raw.dnnfusion.table.len(),
            "dnnfusion.table",
        )?;
        let mut fusion = Vec::new();
        for (row, t) in raw.dnnfusion.table.iter().zip(&raw.dnnfusion.types) {
            if parse_enum::<MappingType>(row.0)? != *t {
                return Err(format!("dnnfusion.table: row '{}' is out of order", row.0));
            }
            let cells = row
                .1
                .iter()
                .map(|c| {
                    let (ty, color) = c
                        .split_once(' ')
                        .ok_or_else(|| format!("cell '{c}' must be 'TYPE COLOR'"))?;
                    let color = match color {
                        "green" => Color::Green,
                        "yellow" => Color::Yellow,
                        "red" => Color::Red,
                        other => return Err(format!("unknown color '{other}'")),
                    };
                    Ok((parse_enum(ty)?, color))
                })
                .collect::<Result<Vec<_>, String>>()?;
            if cells.len() != raw.dnnfusion.types.len() {
                return Err(format!(
                    "dnnfusion.table: row '{}' needs one cell per type",
                    row.0
                ));
            }
            fusion.push(cells);
        }
        let n = raw.smartmem.classes.len();
        square(n, raw.smartmem.action.len(), "smartmem.action")?;
        square(n, raw.smartmem.result.len(), "smartmem.result")?;
        let actions: Vec<Vec<Action>> = raw.smartmem.action.values().cloned().collect();
        let mut results = Vec::new();
        for row in raw.smartmem.result.values() {
            let cells = row
                .iter()
                .map(|c| {
                    let (class, search) = c
                        .split_once(' ')
                        .ok_or_else(|| format!("cell '{c}' must be 'CLASS SEARCH'"))?;
                    let class = if class == "-" {
                        None
                    } else {
                        Some(parse_enum(class)?)
                    };
                    Ok((class, parse_enum(search)?))
                })
                .collect::<Result<Vec<_>, String>>()?;
            results.push(cells);
        }
        if actions.iter().any(|r| r.len() != n) || results.iter().any(|r| r.len() != n) {
            return Err("smartmem tables need one cell per class".to_string());
        }
        let broadcasting_elementwise = *raw
            .smartmem
            .operand_rules
            .get("broadcasting-elementwise")
            .ok_or("smartmem.operand_rules needs broadcasting-elementwise")?;
        if let Some(name) = raw
            .prologues
            .iter()
            .flat_map(|(k, v)| std::iter::once(k).chain(v))
            .find(|name| !name.starts_with("graph."))
        {
            return Err(format!(
                "prologues: '{name}' is not a graph op (graph.NAME)"
            ));
        }
        Ok(Tables {
            types: raw.dnnfusion.types,
            fusion,
            classes: raw.smartmem.classes,
            actions,
            results,
            broadcasting_elementwise,
            prologues: raw.prologues,
        })
    }

    pub fn load() -> Tables {
        Tables::parse(SPEC).expect("spec/fusion.toml is valid (a test checks it)")
    }

    /// The tables a pass's `tables` option names: the built-in
    /// spec/fusion.toml when empty, else the file at that path, read at
    /// run time.
    pub fn from_option(path: &str) -> Result<Tables, String> {
        if path.is_empty() {
            return Ok(Tables::load());
        }
        let text = ircc_core::files::read_spec_file(path).map_err(|e| format!("tables={e}"))?;
        Tables::parse(&text).map_err(|e| format!("tables={path}: {e}"))
    }

    fn type_index(&self, t: MappingType) -> usize {
        self.types
            .iter()
            .position(|&x| x == t)
            .expect("every mapping type has a row")
    }

    fn class_index(&self, c: LayoutClass) -> usize {
        self.classes
            .iter()
            .position(|&x| x == c)
            .expect("every class has a row")
    }

    /// DNNFusion: the type of `first` fused into `second`, and whether to.
    pub fn fuse(&self, first: MappingType, second: MappingType) -> (MappingType, Color) {
        self.fusion[self.type_index(first)][self.type_index(second)]
    }

    /// Whether op `producer` joins a group anchored by product `product`
    /// as its prologue (the `[prologues]` table).
    pub fn prologue(&self, producer: &str, product: &str) -> bool {
        self.prologues
            .get(producer)
            .is_some_and(|products| products.iter().any(|p| p == product))
    }

    /// SmartMem Table 5.
    pub fn action(&self, producer: LayoutClass, consumer: LayoutClass) -> Action {
        self.actions[self.class_index(producer)][self.class_index(consumer)]
    }

    /// SmartMem Table 6.
    pub fn result(
        &self,
        producer: LayoutClass,
        consumer: LayoutClass,
    ) -> (Option<LayoutClass>, Search) {
        self.results[self.class_index(producer)][self.class_index(consumer)]
    }

    /// The three tables as text, for `ircc --list-fusion-tables`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let w = 22;
        let _ = writeln!(
            out,
            "DNNFusion mapping-type fusion (row: first op, column: second op)"
        );
        let _ = write!(out, "{:<14}", "");
        for t in &self.types {
            let _ = write!(out, "{:<w$}", t.name());
        }
        out.push('\n');
        for (i, row) in self.fusion.iter().enumerate() {
            let _ = write!(out, "{:<14}", self.types[i].name());
            for (ty, color) in row {
                let c = match color {
                    Color::Green => "green",
                    Color::Yellow => "yellow",
                    Color::Red => "red",
                };
                let _ = write!(out, "{:<w$}", format!("{} {c}", ty.name()));
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "\nSmartMem Table 5: action (row: producer, column: consumer)"
        );
        let _ = write!(out, "{:<14}", "");
        for c in &self.classes {
            let _ = write!(out, "{:<w$}", c.name());
        }
        out.push('\n');
        for (i, row) in self.actions.iter().enumerate() {
            let _ = write!(out, "{:<14}", self.classes[i].name());
            for a in row {
                let _ = write!(out, "{:<w$}", format!("{a:?}"));
            }
            out.push('\n');
        }
        let _ = writeln!(out, "\nSmartMem Table 6: resulting class and layout search");
        let _ = write!(out, "{:<14}", "");
        for c in &self.classes {
            let _ = write!(out, "{:<28}", c.name());
        }
        out.push('\n');
        for (i, row) in self.results.iter().enumerate() {
            let _ = write!(out, "{:<14}", self.classes[i].name());
            for (class, search) in row {
                let _ = write!(
                    out,
                    "{:<28}",
                    format!("{} {search:?}", class.map_or("-", LayoutClass::name))
                );
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "\nOperand rule: a one-to-one op that broadcasts is {}",
            self.broadcasting_elementwise.name()
        );
        if !self.prologues.is_empty() {
            let _ = writeln!(out, "\nPrologues: a producer joins the product reading it");
            for (producer, products) in &self.prologues {
                let _ = writeln!(out, "{producer:<22}{}", products.join(", "));
            }
        }
        out.lines().map(|l| format!("{}\n", l.trim_end())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_parses_and_reads_as_the_papers_say() {
        let t = Tables::load();
        use MappingType::*;
        assert_eq!(t.fuse(OneToOne, ManyToMany), (ManyToMany, Color::Green));
        assert_eq!(t.fuse(OneToMany, ManyToMany).1, Color::Red);
        assert_eq!(t.fuse(ManyToMany, ManyToMany).1, Color::Red);
        assert_eq!(t.fuse(ManyToMany, OneToMany).1, Color::Yellow);
        use LayoutClass::*;
        assert_eq!(t.action(IldVariable, IldFixed), Action::EliminateSecond);
        assert_eq!(t.action(IliFixed, IliFixed), Action::EliminateBoth);
        assert_eq!(t.action(IldVariable, IldVariable), Action::KeepBoth);
        assert_eq!(
            t.result(IldVariable, IliVariable),
            (Some(IldVariable), Search::SearchFused)
        );
        assert!(Tables::parse(&SPEC.replace("\"shuffle green\"]", "\"shuffle purple\"]")).is_err());
        let (norm, matmul) = (
            ircc_dialects::graph::GraphOp::LayerNorm.name(),
            ircc_dialects::graph::GraphOp::Matmul.name(),
        );
        assert!(t.prologue(norm, matmul));
        assert!(!t.prologue(matmul, norm));
        assert!(Tables::parse(&SPEC.replace("\"graph.gemm\"]", "\"gemm\"]")).is_err());
    }
}
