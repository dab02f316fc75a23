//! Reading an ONNX node's attributes, with the defaults the operator
//! specification gives.

use crate::proto::{AttributeProto, NodeProto};
use crate::{ImportError, Result};

/// Typed access to a node's attributes.
pub struct Attrs<'a>(pub &'a NodeProto);

impl<'a> Attrs<'a> {
    fn get(&self, name: &str) -> Option<&'a AttributeProto> {
        self.0.attribute.iter().find(|a| a.name == name)
    }

    pub fn i(&self, name: &str, default: i64) -> i64 {
        self.get(name).map_or(default, |a| a.i)
    }

    pub fn f(&self, name: &str, default: f32) -> f32 {
        self.get(name).map_or(default, |a| a.f)
    }

    pub fn s(&self, name: &str, default: &str) -> String {
        self.get(name).map_or(default.to_string(), |a| {
            String::from_utf8_lossy(&a.s).into_owned()
        })
    }

    pub fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.get(name).map(|a| a.ints.clone())
    }

    pub fn floats(&self, name: &str) -> Option<Vec<f32>> {
        self.get(name).map(|a| a.floats.clone())
    }

    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Fails on an attribute this import does not understand.
    pub fn only(&self, known: &[&str]) -> Result<()> {
        for a in &self.0.attribute {
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
