//! The texture dialect (see `spec/dialects/texture.toml`): tensors placed
//! in 2.5D textures through a layout map, and read back. In the
//! interpreter a texture is an `H x W x 4` tensor of its lanes (rounded to
//! f16 for `rgba16f`), so a layout that loses or mixes elements changes
//! the result, and `ircc check` catches it.

mod layout;

pub use layout::{LANES, TexelFormat, TextureLayout, TextureType};

use ircc_core::interp::Env;
use ircc_core::limits::MAX_INTERPRETED_ELEMENTS;
use ircc_core::registry::{OpHooks, OpView, Registry};
use ircc_core::{AffineMap, Diagnostic, ElemType, Tensor, TensorType};
use ndarray::{ArrayD, IxDyn};

use crate::graph::for_each_index;

pub const SPEC: &str = include_str!("../../../spec/dialects/texture.toml");

/// Typed views of the texture ops, generated from the spec by `ircc-ods`.
pub mod ops {
    include!(concat!(env!("OUT_DIR"), "/texture_ops.rs"));
}

pub use ops::TextureOp;

/// The tensor, texture and layout of a place or read op, checked: the
/// map takes the tensor's index to `(x, y, lane)` inside the texture.
fn parts<'a>(v: &OpView<'a>) -> Result<(&'a TensorType, TextureType, &'a AffineMap), String> {
    let (tensor, texture) = match TextureOp::of(v.module, v.op) {
        Some(TextureOp::Place) => (v.tensor(0)?, v.result_types()[0]),
        _ => (v.result_tensor(0)?, v.operand_type(0)),
    };
    let texture = TextureType::of(texture)?;
    let Some(ircc_core::Attribute::AffineMap(map)) = v.attr("layout") else {
        return Err("attribute 'layout' must be an affine map".to_string());
    };
    if !tensor.elem.is_float() {
        return Err(format!("textures hold floats, not {}", tensor.elem));
    }
    if map.num_syms != 0 || map.num_dims as usize != tensor.rank() || map.num_results() != 3 {
        return Err(format!(
            "the layout must take the {} axes of the tensor to (x, y, lane), not {} dimensions to {} results",
            tensor.rank(),
            map.num_dims,
            map.num_results()
        ));
    }
    let dims: Vec<(i64, i64)> = tensor.shape.iter().map(|&d| (0, d - 1)).collect();
    let limits = [("x", texture.width), ("y", texture.height), ("lane", LANES)];
    for ((what, extent), e) in limits.iter().zip(&map.results) {
        match e.range(&dims) {
            Some((lo, hi)) if lo >= 0 && hi < *extent => {}
            r => {
                let r = r.map_or("unbounded".to_string(), |(lo, hi)| format!("{lo}..={hi}"));
                return Err(format!(
                    "the layout's {what} ranges over {r}, outside the texture's 0..{extent}"
                ));
            }
        }
    }
    Ok((tensor, texture, map))
}

fn verify(v: &OpView) -> Result<(), String> {
    parts(v).map(|_| ())
}

/// The offset of `(x, y, lane)` in the interpreter's `H x W x 4` lanes.
fn lane_offset(map: &AffineMap, index: &[i64], width: i64) -> Result<usize, String> {
    let at = map.eval(index, &[]).map_err(|e| e.to_string())?;
    Ok(((at[1] * width + at[0]) * LANES + at[2]) as usize)
}

/// Calls `f` with every index of `shape`, in row-major order, until it fails.
fn each_index(
    shape: &[i64],
    mut f: impl FnMut(&[i64]) -> Result<(), String>,
) -> Result<(), String> {
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let mut point = vec![0i64; dims.len()];
    let mut result = Ok(());
    for_each_index(&dims, |i| {
        if result.is_ok() {
            point.iter_mut().zip(i).for_each(|(p, &x)| *p = x as i64);
            result = f(&point);
        }
    });
    result
}

/// The `height x width x 4` lanes of a texture holding `values` (a tensor
/// of `shape`, row-major) through `layout`; unused lanes hold zero.
pub fn place_lanes(
    layout: &AffineMap,
    shape: &[i64],
    values: &[f64],
    width: i64,
    height: i64,
) -> Result<Vec<f64>, String> {
    let n = width * height * LANES;
    if n > MAX_INTERPRETED_ELEMENTS {
        return Err(format!(
            "a texture of {n} lanes is larger than the interpreter's limit of {MAX_INTERPRETED_ELEMENTS}"
        ));
    }
    let mut lanes = vec![0.0; n as usize];
    let mut values = values.iter();
    each_index(shape, |i| {
        let x = values
            .next()
            .ok_or("the tensor has fewer elements than its type")?;
        let o = lane_offset(layout, i, width)?;
        *lanes.get_mut(o).ok_or("the layout leaves the texture")? = *x;
        Ok(())
    })?;
    Ok(lanes)
}

/// The tensor of `shape` (row-major) that `lanes` hold through `layout`.
pub fn read_lanes(
    layout: &AffineMap,
    shape: &[i64],
    lanes: &[f64],
    width: i64,
) -> Result<Vec<f64>, String> {
    let n: i64 = shape.iter().product();
    let mut values = Vec::with_capacity(n.max(0) as usize);
    each_index(shape, |i| {
        let o = lane_offset(layout, i, width)?;
        values.push(*lanes.get(o).ok_or("the layout leaves the texture")?);
        Ok(())
    })?;
    Ok(values)
}

fn interpret(v: &OpView, args: &[Tensor], _env: &mut dyn Env) -> Result<Vec<Tensor>, String> {
    let (tensor, texture, map) = parts(v)?;
    let store = |x: f64| match texture.format {
        TexelFormat::Rgba32f => x as f32 as f64,
        TexelFormat::Rgba16f => half::f16::from_f64(x).to_f64(),
    };
    let grid = IxDyn(&[
        texture.height as usize,
        texture.width as usize,
        LANES as usize,
    ]);
    match TextureOp::of(v.module, v.op) {
        Some(TextureOp::Place) => {
            let src: Vec<f64> = args[0].to_f64().iter().map(|&x| store(x)).collect();
            let lanes = place_lanes(map, &tensor.shape, &src, texture.width, texture.height)?;
            let data = ArrayD::from_shape_vec(grid, lanes).map_err(|e| e.to_string())?;
            Ok(vec![Tensor::float(ElemType::F32, data)])
        }
        _ => {
            let lanes = args[0].to_f64();
            let flat = lanes.as_slice().ok_or("texture lanes are contiguous")?;
            let values = read_lanes(map, &tensor.shape, flat, texture.width)?;
            let shape: Vec<usize> = tensor.shape.iter().map(|&d| d as usize).collect();
            let data = ArrayD::from_shape_vec(IxDyn(&shape), values).map_err(|e| e.to_string())?;
            Ok(vec![Tensor::float(tensor.elem, data)])
        }
    }
}

pub fn register(registry: &mut Registry) -> Result<(), Diagnostic> {
    let hooks = OpHooks {
        infer: None,
        verify: Some(verify),
        interpret: Some(interpret),
    };
    let all: Vec<_> = TextureOp::ALL
        .iter()
        .map(|&op| (op.name(), hooks))
        .collect();
    registry.add_dialect(SPEC, &all)
}
