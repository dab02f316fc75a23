//! The index dialect: `index.view`, a tensor whose element at `o` is the
//! source's element at `map(o)`. Views compose, so a chain of layout ops
//! becomes one map that the consumer's index computation absorbs.

use ircc_core::interp::Env;
use ircc_core::limits::MAX_CHECKED_VIEW;
use ircc_core::registry::{OpHooks, OpView, Registry};
use ircc_core::{AffineExpr, AffineMap, Attribute, Diagnostic, Tensor};

use crate::graph::{for_each_index, gather_by, strides_of};

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

/// A view reads only inside its source: every backend relies on it (a GPU
/// would read another tensor's memory, or zeros). Interval bounds settle
/// almost every map at once; the rest are checked index by index.
fn verify(v: &OpView) -> Result<(), String> {
    let map = view_map(v)?;
    let (src, dst) = (v.tensor(0)?, v.result_tensor(0)?);
    if dst.num_elements() == 0 {
        return Ok(());
    }
    let dims: Vec<(i64, i64)> = dst.shape.iter().map(|&d| (0, d - 1)).collect();
    let Some((k, bounds)) = map.results.iter().enumerate().find_map(|(k, e)| {
        let r = e.range(&dims);
        match r {
            Some((lo, hi)) if lo >= 0 && hi < src.shape[k] => None,
            _ => Some((k, r)),
        }
    }) else {
        return Ok(());
    };
    if dst.num_elements() > MAX_CHECKED_VIEW {
        let bounds = bounds.map_or("unbounded".to_string(), |(lo, hi)| format!("{lo}..={hi}"));
        return Err(format!(
            "cannot show that the map stays inside source axis {k} of extent {} (its bounds are {bounds}), and the view is too large ({} elements) to check index by index",
            src.shape[k],
            dst.num_elements()
        ));
    }
    let src_shape: Vec<usize> = src.shape.iter().map(|&d| d as usize).collect();
    let shape: Vec<usize> = dst.shape.iter().map(|&d| d as usize).collect();
    let strides = strides_of(&src_shape);
    let mut point = vec![0i64; shape.len()];
    let mut error = None;
    for_each_index(&shape, |o| {
        if error.is_none() {
            point.iter_mut().zip(o).for_each(|(p, &i)| *p = i as i64);
            error = source_offset(map, &point, &src.shape, &strides).err();
        }
    });
    error.map_or(Ok(()), Err)
}

/// The offset in the source (row-major, `strides`) of the element the map
/// sends result index `point` to, or why there is none.
fn source_offset(
    map: &AffineMap,
    point: &[i64],
    src: &[i64],
    strides: &[usize],
) -> Result<usize, String> {
    let mut offset = 0;
    for (k, e) in map.results.iter().enumerate() {
        let i = e.eval(point, &[]).map_err(|e| e.to_string())?;
        if !(0..src[k]).contains(&i) {
            return Err(format!(
                "the map sends {point:?} to {i} on source axis {k} of extent {}",
                src[k]
            ));
        }
        offset += i as usize * strides[k];
    }
    Ok(offset)
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
    let src_shape: Vec<i64> = src.iter().map(|&d| d as i64).collect();
    let mut error = None;
    let mut point = vec![0i64; shape.len()];
    let out = gather_by(&args[0], &shape, 0.0, |o| {
        point.iter_mut().zip(o).for_each(|(p, &i)| *p = i as i64);
        source_offset(map, &point, &src_shape, &strides)
            .map_err(|e| {
                error.get_or_insert(e);
            })
            .ok()
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

/// Whether `e` moves by a step when dimension `d` does: `d` appears in it
/// outside any division (a `mod` keeps the low part, which moves).
fn moves_with(e: &AffineExpr, d: u32) -> bool {
    match e {
        AffineExpr::Dim(x) => *x == d,
        AffineExpr::Add(a, b) | AffineExpr::Mul(a, b) => moves_with(a, d) || moves_with(b, d),
        AffineExpr::Mod(a, _) => moves_with(a, d),
        _ => false,
    }
}

/// The source axis that moves fastest with result axis `a` of `map`:
/// the last one whose expression moves with it.
pub fn source_axis(map: &AffineMap, a: usize) -> Option<usize> {
    map.results.iter().rposition(|e| moves_with(e, a as u32))
}

/// The tensor `v` reads through the views above it, with the composed map
/// from `v`'s index to that tensor's (none when `v` is not a view).
pub fn through_views(
    m: &ircc_core::Module,
    v: ircc_core::ValueId,
) -> (ircc_core::ValueId, Option<AffineMap>) {
    let mut stored = v;
    let mut map: Option<AffineMap> = None;
    while let Some(view) = m.defining_op(stored).and_then(|op| ops::View::new(m, op)) {
        let inner = view.map();
        map = Some(match map {
            None => inner.clone(),
            Some(outer) => AffineMap::new(
                outer.num_dims,
                0,
                inner
                    .results
                    .iter()
                    .map(|e| e.substitute(&outer.results, &[]))
                    .collect(),
            ),
        });
        stored = view.source();
    }
    (stored, map)
}
