//! The inputs a command runs a model on: read from `.npy` files as the
//! command line names them, or seeded random ones.

use std::path::Path;

use ircc_core::{Diagnostic, ElemType, Module, Tensor, TensorType, Type};
use ircc_reference::{Npy, read_npy_file};
use ndarray::{ArrayD, IxDyn};

use crate::Failure;

/// Seeded inputs of `module`'s `@main`: see [`random_tensors`].
pub(crate) fn random_inputs(module: &Module, seed: u64) -> Result<Vec<Tensor>, Diagnostic> {
    let f = module
        .lookup_symbol("main")
        .ok_or_else(|| Diagnostic::plain("no function '@main'"))?;
    let entry = module
        .entry_block(f)
        .ok_or_else(|| Diagnostic::plain("'@main' has no body"))?;
    let types = module.blocks[entry]
        .args
        .iter()
        .map(|&a| match module.value_type(a) {
            Type::Tensor(t) => Ok(t.clone()),
            _ => Err(Diagnostic::plain("check needs tensor inputs")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(random_tensors(&types, seed))
}

/// Seeded tensors of `types`: floats in [-1, 1), integers in [0, 4),
/// random booleans.
pub(crate) fn random_tensors(types: &[TensorType], seed: u64) -> Vec<Tensor> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    types
        .iter()
        .map(|t| {
            let shape = IxDyn(&t.shape.iter().map(|&d| d as usize).collect::<Vec<_>>());
            let n = t.num_elements() as usize;
            match t.elem {
                e if e.is_float() => Tensor::float(
                    e,
                    ArrayD::from_shape_vec(shape, (0..n).map(|_| next() * 2.0 - 1.0).collect())
                        .expect("sized"),
                ),
                ElemType::I1 => Tensor::bool(
                    ArrayD::from_shape_vec(shape, (0..n).map(|_| next() < 0.5).collect())
                        .expect("sized"),
                ),
                e => Tensor::int(
                    e,
                    ArrayD::from_shape_vec(shape, (0..n).map(|_| (next() * 4.0) as i64).collect())
                        .expect("sized"),
                ),
            }
        })
        .collect()
}

/// A function's inputs: each one's name and declared type.
pub(crate) fn params(module: &Module, func: ircc_core::OpId) -> Vec<(String, TensorType)> {
    let names = ircc_reference::input_names(module, func);
    let args = module
        .entry_block(func)
        .map(|b| module.blocks[b].args.clone())
        .unwrap_or_default();
    names
        .into_iter()
        .zip(args)
        .filter_map(|(n, a)| Some((n, module.value_type(a).as_tensor()?.clone())))
        .collect()
}

/// A `--input` or `--bind` spec: the input it names, if any, and the file.
fn split_spec(spec: &str) -> (Option<&str>, &Path) {
    match spec.split_once('=') {
        Some((name, path)) => (Some(name), Path::new(path)),
        None => (None, Path::new(spec)),
    }
}

fn is_safetensors(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("safetensors"))
}

/// A value a file gives for an input, read no further than its shape
/// until the input's type is known.
enum Source {
    /// A `.npy` file.
    Npy(std::path::PathBuf),
    /// A tensor of a `.safetensors` file, as stored.
    Stored(ircc_core::StoredTensor),
}

impl Source {
    /// The shape the file declares.
    fn shape(&self) -> Result<Vec<usize>, String> {
        match self {
            Source::Npy(path) => Ok(ircc_reference::read_npy_shape(path)?.1),
            Source::Stored(t) => Ok(t.ty().shape.iter().map(|&d| d as usize).collect()),
        }
    }

    /// The values, read as `elem`.
    fn value(self, elem: ircc_core::ElemType) -> Result<Tensor, String> {
        match self {
            Source::Npy(path) => read_npy_file(&path)?.into_type(elem),
            Source::Stored(t) => Npy::Typed(t.to_tensor()).into_type(elem),
        }
    }

    /// The values where the file says their type (not ml_dtypes' untyped
    /// bytes), else None.
    fn typed(self) -> Result<Option<Tensor>, String> {
        match self {
            Source::Npy(path) => Ok(match read_npy_file(&path)? {
                Npy::Typed(t) => Some(t),
                Npy::Untyped { .. } => None,
            }),
            Source::Stored(t) => Ok(Some(t.to_tensor())),
        }
    }
}

/// The values a spec's file gives: a `.npy` file one; a `.safetensors`
/// file, named for one input, the tensor of that name or its only one,
/// and given alone, every tensor by its name.
fn read_file(name: Option<&str>, path: &Path) -> Result<Vec<(Option<String>, Source)>, String> {
    if !is_safetensors(path) {
        return Ok(vec![(
            name.map(str::to_string),
            Source::Npy(path.to_path_buf()),
        )]);
    }
    let file = ircc_reference::SafetensorsWeights::open(path)?;
    let mut tensors = file.tensors()?;
    match name {
        None => Ok(tensors
            .into_iter()
            .map(|(n, t)| (Some(n), Source::Stored(t)))
            .collect()),
        Some(name) => {
            let at = match tensors.iter().position(|(n, _)| n == name) {
                Some(at) => at,
                None if tensors.len() == 1 => 0,
                None => {
                    let names: Vec<&str> = tensors.iter().map(|(n, _)| n.as_str()).collect();
                    return Err(format!(
                        "{} has no tensor '{name}' (it holds {})",
                        path.display(),
                        if names.is_empty() {
                            "none".to_string()
                        } else {
                            names.join(", ")
                        }
                    ));
                }
            };
            let (_, t) = tensors.swap_remove(at);
            Ok(vec![(Some(name.to_string()), Source::Stored(t))])
        }
    }
}

/// The inputs `specs` give the function whose inputs are `params`: each
/// spec `NAME=FILE` or `FILE` (the next input in order), a `.npy` file
/// holding one input and a `.safetensors` file given alone holding inputs
/// by name. Every input must be given, in its declared type and shape: a
/// file's shape is checked before its data is read.
pub(crate) fn read_inputs(
    specs: &[String],
    params: &[(String, TensorType)],
) -> Result<Vec<Tensor>, Failure> {
    let names: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
    let mut slots: Vec<Option<Tensor>> = vec![None; params.len()];
    let mut next_positional = 0;
    for spec in specs {
        let (name, path) = split_spec(spec);
        let at = |e: String| Diagnostic::plain(format!("--input {spec}: {e}"));
        let unknown = |name: &str| {
            at(format!(
                "no input named '{name}' (inputs: {})",
                names.join(", ")
            ))
        };
        if let Some(name) = name
            && !names.contains(&name)
        {
            return Err(unknown(name).into());
        }
        for (name, source) in read_file(name, path).map_err(at)? {
            let index = match &name {
                Some(name) => names
                    .iter()
                    .position(|n| n == name)
                    .ok_or_else(|| unknown(name))?,
                None => {
                    next_positional += 1;
                    next_positional - 1
                }
            };
            let Some((input, ty)) = params.get(index) else {
                return Err(
                    at(format!("too many inputs: the model takes {}", params.len())).into(),
                );
            };
            if slots[index].is_some() {
                return Err(at(format!("input '{input}' is given twice")).into());
            }
            let want: Vec<usize> = ty.shape.iter().map(|&d| d as usize).collect();
            let shape = source.shape().map_err(at)?;
            if shape != want {
                return Err(at(format!(
                    "{} holds an array of shape {shape:?}, but input '{input}' is {ty}",
                    path.display()
                ))
                .into());
            }
            let t = source.value(ty.elem).map_err(|e| {
                at(format!(
                    "{} {e}, but input '{input}' is {ty}{}",
                    path.display(),
                    ircc_reference::ml_dtypes_hint(ty.elem)
                ))
            })?;
            slots[index] = Some(t);
        }
    }
    slots
        .into_iter()
        .zip(params)
        .map(|(t, (n, _))| {
            t.ok_or_else(|| {
                Diagnostic::plain(format!("missing input '{n}' (give --input {n}=PATH.npy)")).into()
            })
        })
        .collect()
}

/// Values given for inputs: by name, and by position (None where a
/// value is not known until run time).
type Given = (Vec<(String, Tensor)>, Vec<Option<Tensor>>);

/// A value a file gives an input (by name, or the next by position), if
/// it is known now.
type Known = (Option<String>, Option<Tensor>);

/// The most elements a run's input may have to be bound when compiling:
/// what feeds a shape, an axis or sizes is small, and a large activation
/// is not decoded twice.
const MAX_BOUND_ELEMENTS: usize = 4096;

/// The values `ircc run`'s inputs (or `--bind`) give, for an ONNX import
/// to specialize on: `(by name, in order)`. Of a run's inputs, a file too
/// large to feed a shape, one whose values need the model's type to be
/// read (ml_dtypes' untyped bytes), or one that cannot be read gives
/// none: the run reads it and says what is wrong. With `strict`
/// (`--bind`) any file that cannot be read is an error.
pub(crate) fn known_values(specs: &[String], strict: bool) -> Result<Given, String> {
    let (mut by_name, mut in_order) = (Vec::new(), Vec::new());
    for spec in specs {
        let (name, path) = split_spec(spec);
        let read = |name: Option<&str>| -> Result<Vec<Known>, String> {
            let mut values = Vec::new();
            for (name, source) in read_file(name, path)? {
                let small = source
                    .shape()?
                    .iter()
                    .try_fold(1usize, |n, &d| n.checked_mul(d))
                    .is_some_and(|n| n <= MAX_BOUND_ELEMENTS);
                let value = if small || strict {
                    source.typed()?
                } else {
                    None
                };
                if strict && value.is_none() {
                    return Err(
                        "holds ml_dtypes' untyped values, which only a run's --input reads"
                            .to_string(),
                    );
                }
                values.push((name, value));
            }
            Ok(values)
        };
        let values = match read(name) {
            Ok(v) => v,
            Err(e) if strict => return Err(format!("--bind {spec}: {e}")),
            // Not known now; still the input of its position.
            Err(_) => vec![(name.map(str::to_string), None)],
        };
        for (name, value) in values {
            match (name, value) {
                (Some(name), Some(t)) => by_name.push((name, t)),
                (Some(_), None) => {}
                (None, value) => in_order.push(value),
            }
        }
    }
    Ok((by_name, in_order))
}
