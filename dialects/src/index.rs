//! The index dialect: `index.view`, a tensor whose element at `o` is the
//! source's element at `map(o)`. Views compose, so a chain of layout ops
//! becomes one map that the consumer's index computation absorbs.

use ircc_core::interp::Env;
use ircc_core::registry::{OpHooks, OpView, Registry};
use ircc_core::{AffineMap, Attribute, Diagnostic, Tensor};

use crate::graph::{gather_by, strides_of};

/// Typed views of the index ops, generated from the spec by `ircc-ods`
/// (in `ircc-core`, whose textual format knows `index.view`).
pub use ircc_core::builtin::index_ops as ops;

pub use ops::IndexOp;

pub const SPEC: &str = include_str!("../../spec/dialects/index.toml");

/// The view's map, checked against its source and result ranks.
pub fn view_map<'a>(v: &OpView<'a>) -> Result<&'a AffineMap, String> {
    let map = match v.attr("map") {
        Some(Attribute::AffineMap(m)) => m,
        _ => return Err("attribute 'map' must be an affine map".to_string()),
    };
    let (src, dst) = (v.tensor(0)?, v.result_tensor(0)?);
    if map.num_syms != 0 {
        return Err("a view's map has no symbols".to_string());
    }
    if map.num_dims as usize != dst.rank() || map.num_results() != src.rank() {
        return Err(format!(
            "the map takes {} dimensions to {} results, but the view goes from rank {} to rank {}",
            map.num_dims,
            map.num_results(),
            src.rank(),
            dst.rank()
        ));
    }
    if src.elem != dst.elem {
        return Err(format!(
            "a view keeps the element type, but {} becomes {}",
            src.elem, dst.elem
        ));
    }
    Ok(map)
}

fn verify(v: &OpView) -> Result<(), String> {
    view_map(v).map(|_| ())
}

fn interpret(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Result<Vec<Tensor>, String> {
    let map = view_map(v)?;
    let src: Vec<usize> = args[0].shape().to_vec();
    let strides = strides_of(&src);
    let shape: Vec<usize> = v
        .result_tensor(0)?
        .shape
        .iter()
        .map(|&d| d as usize)
        .collect();
    let mut error = None;
    let mut point = vec![0i64; shape.len()];
    let out = gather_by(&args[0], &shape, 0.0, |o| {
        for (p, &i) in point.iter_mut().zip(o) {
            *p = i as i64;
        }
        let mut off = 0;
        for (k, e) in map.results.iter().enumerate() {
            match e.eval(&point, &[]) {
                Ok(i) if i >= 0 && (i as usize) < src[k] => off += i as usize * strides[k],
                Ok(i) => {
                    error.get_or_insert_with(|| {
                        format!(
                            "the map sends {o:?} to {i} on source axis {k} of extent {}",
                            src[k]
                        )
                    });
                    return None;
                }
                Err(e) => {
                    error.get_or_insert_with(|| e.to_string());
                    return None;
                }
            }
        }
        Some(off)
    })?;
    match error {
        Some(e) => Err(e),
        None => Ok(vec![out]),
    }
}

pub fn register(registry: &mut Registry) -> Result<(), Diagnostic> {
    registry.add_dialect(
        SPEC,
        &[(
            IndexOp::View.name(),
            OpHooks {
                infer: None,
                verify: Some(verify),
                interpret: Some(interpret),
            },
        )],
    )
}

/// Whether `op` is an `index.view`.
pub fn is_view(m: &ircc_core::Module, op: ircc_core::OpId) -> bool {
    IndexOp::of(m, op) == Some(IndexOp::View)
}
