//! ONNX import. A model becomes a `func.func @main` of graph-dialect ops;
//! its weights go to a safetensors file that `graph.param` ops name.
//!
//! Shapes are static, so everything computed from shapes alone — the
//! Shape/Gather/Concat/Range/... arithmetic that the torchscript exporter
//! leaves in a graph — is evaluated during import through the graph
//! dialect's own interpret hooks, and never reaches the IR. Shape-like
//! inputs (Reshape's shape, Slice's bounds, ...) must therefore be
//! constants after this folding, and become attributes.

mod attention;
mod attrs;
mod composite;
mod control_flow;
mod data_dependent;
mod einsum;
mod fold;
mod gated;
mod grid_sample;
mod import;
mod loss;
mod norms;
pub mod operators;
mod ops;
pub mod proto;
mod quantize;
mod rearrange;
mod recurrent;
mod resize;
mod rotary;
mod scan;
mod signal;
pub mod tensor;

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use ircc_core::{Module, Registry, StoredTensor, Tensor};

pub use import::import_model;

pub type Result<T> = std::result::Result<T, ImportError>;

/// Why a model could not be imported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportError {
    /// The model uses something ircc does not support (an operator, an
    /// attribute value, a data type); the model itself may be fine.
    pub unsupported: bool,
    pub message: String,
}

impl ImportError {
    pub fn unsupported(message: impl Into<String>) -> Self {
        ImportError {
            unsupported: true,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        ImportError {
            unsupported: false,
            message: message.into(),
        }
    }

    /// Prefixes the message with where the error happened.
    pub fn context(mut self, place: impl fmt::Display) -> Self {
        self.message = format!("{place}: {}", self.message);
        self
    }
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ImportError {}

/// How to import.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Shapes for inputs with symbolic dimensions: `input name -> shape`.
    pub input_shapes: HashMap<String, Vec<i64>>,
    /// Constants with more elements than this become `graph.param` weights
    /// instead of inline `graph.constant`s (integer constants, which are
    /// indices and shapes, are inlined up to 4096 elements whatever this is).
    pub inline_limit: usize,
    /// Values of inputs to specialize on (`--bind`): where an operator
    /// needs a constant (a Reshape's shape, a Slice's bounds) and gets one
    /// of these inputs, or a value computed from them and constants alone
    /// (a window's size through a Cast, a Range's limit through a Sub),
    /// the value is used. Elsewhere the input stays an argument. Each must
    /// have its input's type.
    pub known_inputs: HashMap<String, Tensor>,
    /// The values a run is given (`ircc run --input`), by name and by
    /// position (None where a file's values need the model's type to be
    /// read): used as `known_inputs` are where they have their input's
    /// type. Where one does not, the input stays an argument and the run
    /// that reads it says what is wrong.
    pub given: HashMap<String, Tensor>,
    pub given_in_order: Vec<Option<Tensor>>,
    /// Told how far the import is, as it goes.
    pub progress: Progress,
}

/// A callback told `(done, total)` as an import reads initializers and
/// nodes: what a progress bar over a large model's import shows.
#[derive(Clone, Default)]
pub struct Progress(Option<std::sync::Arc<dyn Fn(usize, usize) + Send + Sync>>);

impl Progress {
    pub fn new(report: impl Fn(usize, usize) + Send + Sync + 'static) -> Progress {
        Progress(Some(std::sync::Arc::new(report)))
    }

    pub(crate) fn report(&self, done: usize, total: usize) {
        if let Some(f) = &self.0 {
            f(done, total);
        }
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Progress(..)"
        } else {
            "Progress(none)"
        })
    }
}

/// An imported model: the module and the weights its `graph.param`s name.
pub struct Imported {
    pub module: Module,
    /// Each weight as the model stores it (shared with its file).
    pub weights: Vec<(String, StoredTensor)>,
    /// The known inputs (`ImportOptions::known_inputs`) whose values the
    /// module was specialized on, each with the first operand it fed.
    pub bound: Vec<(String, String)>,
    /// What import did that a user should know of, one remark each.
    pub remarks: Vec<String>,
}

/// Reads and imports a model file; external data is looked up beside it.
/// The file is mapped, not read: the weights it holds stay its bytes.
pub fn import_file(path: &Path, registry: &Registry, options: &ImportOptions) -> Result<Imported> {
    let meta = std::fs::metadata(path)
        .map_err(|e| ImportError::invalid(format!("cannot read {}: {e}", path.display())))?;
    if !meta.is_file() {
        return Err(ImportError::invalid(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    let bytes = ircc_core::stored::map_file(path).map_err(ImportError::invalid)?;
    let base = path.parent().unwrap_or(Path::new("."));
    import::import_bytes(bytes, base, registry, options)
}
