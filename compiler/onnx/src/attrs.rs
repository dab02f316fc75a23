//! Reading an ONNX node's attributes, with the defaults the operator
//! specification gives.

use std::cell::RefCell;

use crate::proto::{AttributeProto, NodeProto, attr_type};
use crate::{ImportError, Result};

/// Typed access to a node's attributes. An attribute of another type than
/// the one read (a float `axis`, an integer `alpha`) reads as absent and is
/// recorded; [`Attrs::check`] then refuses the node, naming it, as
/// onnxruntime does, instead of importing a 0.
pub struct Attrs<'a> {
    node: &'a NodeProto,
    wrong: RefCell<Vec<String>>,
}

fn type_name(t: i32) -> &'static str {
    match t {
        attr_type::FLOAT => "a float",
        attr_type::INT => "an integer",
        attr_type::STRING => "a string",
        attr_type::TENSOR => "a tensor",
        attr_type::GRAPH => "a graph",
        attr_type::FLOATS => "a list of floats",
        attr_type::INTS => "a list of integers",
        attr_type::STRINGS => "a list of strings",
        _ => "of an unknown type",
    }
}

impl<'a> Attrs<'a> {
    pub fn new(node: &'a NodeProto) -> Self {
        Attrs {
            node,
            wrong: RefCell::new(Vec::new()),
        }
    }

    fn get(&self, name: &str) -> Option<&'a AttributeProto> {
        self.node.attribute.iter().find(|a| a.name == name)
    }

    /// The attribute `name` when it has type `want` (models that leave the
    /// type out, 0, are taken at their word).
    fn typed(&self, name: &str, want: i32) -> Option<&'a AttributeProto> {
        let a = self.get(name)?;
        if a.r#type != 0 && a.r#type != want {
            self.wrong.borrow_mut().push(format!(
                "attribute '{name}' is {}, but {} takes {}",
                type_name(a.r#type),
                self.node.op_type,
                type_name(want)
            ));
            return None;
        }
        Some(a)
    }

    pub fn i(&self, name: &str, default: i64) -> i64 {
        self.typed(name, attr_type::INT).map_or(default, |a| a.i)
    }

    pub fn f(&self, name: &str, default: f32) -> f32 {
        self.typed(name, attr_type::FLOAT).map_or(default, |a| a.f)
    }

    pub fn s(&self, name: &str, default: &str) -> String {
        self.typed(name, attr_type::STRING)
            .map_or(default.to_string(), |a| {
                String::from_utf8_lossy(&a.s).into_owned()
            })
    }

    /// An integer attribute that must be 0 or 1.
    pub fn flag(&self, name: &str, default: bool) -> Result<bool> {
        match self.i(name, i64::from(default)) {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(ImportError::invalid(format!(
                "attribute '{name}' must be 0 or 1, not {v}"
            ))),
        }
    }

    pub fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.typed(name, attr_type::INTS).map(|a| a.ints.clone())
    }

    pub fn floats(&self, name: &str) -> Option<Vec<f32>> {
        self.typed(name, attr_type::FLOATS)
            .map(|a| a.floats.clone())
    }

    pub fn strings(&self, name: &str) -> Option<Vec<String>> {
        self.typed(name, attr_type::STRINGS).map(|a| {
            a.strings
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
    }

    pub fn graph(&self, name: &str) -> Option<&'a crate::proto::GraphProto> {
        self.typed(name, attr_type::GRAPH)
            .and_then(|a| a.g.as_ref())
    }

    /// Fails if an attribute was read as a type it does not have.
    pub fn check(&self) -> Result<()> {
        match self.wrong.borrow().first() {
            Some(e) => Err(ImportError::invalid(e.clone())),
            None => Ok(()),
        }
    }

    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Fails on an attribute this import does not understand.
    pub fn only(&self, known: &[&str]) -> Result<()> {
        for a in &self.node.attribute {
            if !known.contains(&a.name.as_str()) {
                return Err(ImportError::unsupported(format!(
                    "attribute '{}' is not supported",
                    a.name
                )));
            }
            if !a.ref_attr_name.is_empty() {
                return Err(ImportError::unsupported(
                    "attribute references (functions) are not supported",
                ));
            }
        }
        Ok(())
    }
}
