//! The execution plan of a lowered module: every tensor the host handles
//! (inputs, weights, constants, intermediates in one pooled allocation,
//! outputs), and the dispatches in order with their bindings and grids.
//! It is what the wgpu runtime executes and what `--emit wgsl` writes as
//! `plan.json`, so a host other than ircc can run the shaders.

use std::collections::HashMap;

use ircc_core::{Attribute, ElemType, Module, OpId, ValueId};
use serde::Serialize;

use crate::wgsl::{kernel_to_wgsl, texture_args};

type R<T> = Result<T, String>;

/// Offsets in the pool are multiples of this (WebGPU's largest
/// `minStorageBufferOffsetAlignment`).
pub const POOL_ALIGN: u64 = 256;

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BufferKind {
    Input,
    Weight,
    Constant,
    Intermediate,
    /// An intermediate held in a 2.5D texture of four-lane texels.
    Texture,
    Output,
}

#[derive(Clone, Debug, Serialize)]
pub struct BufferPlan {
    pub id: usize,
    pub name: String,
    pub kind: BufferKind,
    pub shape: Vec<i64>,
    /// Element type in memory: f32, f16 or i32.
    pub dtype: String,
    pub bytes: u64,
    /// Offset in the pool, for intermediates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_offset: Option<u64>,
    /// The name of the tensor in the weights file, for weights and constants.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor: Option<String>,
    /// Width and height in texels, for textures (format rgba32float, or
    /// rgba16float at f16 precision).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub texels: Option<[u32; 2]>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Binding {
    pub binding: usize,
    pub buffer: usize,
    pub access: &'static str,
}

#[derive(Clone, Debug, Serialize)]
pub struct Dispatch {
    pub kernel: String,
    pub shader: String,
    pub template: String,
    pub workgroup_size: Vec<i64>,
    pub workgroups: Vec<i64>,
    pub bindings: Vec<Binding>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub precision: String,
    pub pool_bytes: u64,
    pub buffers: Vec<BufferPlan>,
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
    pub dispatches: Vec<Dispatch>,
    /// WGSL per kernel name (written as separate files, not in plan.json).
    #[serde(skip)]
    pub shaders: Vec<(String, String)>,
    /// Data of each constant buffer, in graph element order (f64).
    #[serde(skip)]
    pub constants: HashMap<usize, ircc_core::Tensor>,
}

fn dtype(e: ElemType, float: ElemType) -> ElemType {
    match e {
        e if e.is_float() => float,
        _ => ElemType::I32,
    }
}

fn symbol(m: &Module, op: OpId) -> R<String> {
    match m.op(op).attr("kernel") {
        Some(Attribute::SymbolRef(p)) if p.len() == 1 => Ok(p[0].clone()),
        _ => Err("kernel.launch without a kernel".to_string()),
    }
}

fn value_name(m: &Module, v: ValueId, fallback: String) -> String {
    m.value(v).name.clone().unwrap_or(fallback)
}

/// The first-fit offsets of buffers live over `[first, last]` dispatch.
fn pack(lives: &[(u64, usize, usize)]) -> (Vec<u64>, u64) {
    let mut placed: Vec<(u64, u64, usize, usize)> = Vec::new();
    let mut offsets = Vec::with_capacity(lives.len());
    let mut top = 0;
    for &(bytes, first, last) in lives {
        let size = bytes.div_ceil(POOL_ALIGN) * POOL_ALIGN;
        let mut busy: Vec<(u64, u64)> = placed
            .iter()
            .filter(|&&(_, _, f, l)| f <= last && first <= l)
            .map(|&(o, s, _, _)| (o, o + s))
            .collect();
        busy.sort_unstable();
        let mut offset = 0;
        for (start, end) in busy {
            if offset + size <= start {
                break;
            }
            offset = offset.max(end);
        }
        placed.push((offset, size, first, last));
        offsets.push(offset);
        top = top.max(offset + size);
    }
    (offsets, top)
}

/// The plan of function `func` of a module that `kernel.lower` produced.
pub fn plan(m: &Module, func: OpId) -> R<Plan> {
    let block = m.entry_block(func).ok_or("the function has no body")?;
    let float = m.blocks[m.body]
        .ops
        .iter()
        .filter(|&&op| m.op(op).name == "kernel.func")
        .flat_map(|&k| {
            m.entry_block(k)
                .map(|b| m.blocks[b].args.clone())
                .unwrap_or_default()
        })
        .filter_map(|a| m.value_type(a).as_tensor().map(|t| t.elem))
        .find(|e| e.is_float())
        .unwrap_or(ElemType::F32);
    let mut buffers: Vec<BufferPlan> = Vec::new();
    let mut ids: HashMap<ValueId, usize> = HashMap::new();
    let mut constants = HashMap::new();
    let add = |buffers: &mut Vec<BufferPlan>,
               ids: &mut HashMap<ValueId, usize>,
               v: ValueId,
               kind: BufferKind,
               name: String,
               tensor: Option<String>|
     -> R<usize> {
        let t = m
            .value_type(v)
            .as_tensor()
            .ok_or("host values are tensors")?;
        let elem = dtype(t.elem, float);
        let id = buffers.len();
        buffers.push(BufferPlan {
            id,
            name,
            kind,
            shape: t.shape.clone(),
            dtype: elem.name().to_string(),
            bytes: (t.num_elements().max(1) as u64) * elem.byte_size() as u64,
            pool_offset: None,
            tensor,
            texels: None,
        });
        ids.insert(v, id);
        Ok(id)
    };
    let mut inputs = Vec::new();
    for (i, &a) in m.blocks[block].args.iter().enumerate() {
        let name = value_name(m, a, format!("input{i}"));
        inputs.push(add(
            &mut buffers,
            &mut ids,
            a,
            BufferKind::Input,
            name,
            None,
        )?);
    }
    let mut dispatches = Vec::new();
    let mut shaders = Vec::new();
    let mut outputs = Vec::new();
    let mut produced_at: HashMap<usize, usize> = HashMap::new();
    let mut last_use: HashMap<usize, usize> = HashMap::new();
    for &op in &m.blocks[block].ops {
        let o = m.op(op);
        match o.name.as_str() {
            "graph.param" => {
                let name = match o.attr("name") {
                    Some(Attribute::String(s)) => s.clone(),
                    _ => return Err("graph.param without a name".to_string()),
                };
                add(
                    &mut buffers,
                    &mut ids,
                    o.results[0],
                    BufferKind::Weight,
                    name.clone(),
                    Some(name),
                )?;
            }
            "graph.constant" => {
                let name = value_name(m, o.results[0], format!("constant{}", buffers.len()));
                let id = add(
                    &mut buffers,
                    &mut ids,
                    o.results[0],
                    BufferKind::Constant,
                    name.clone(),
                    Some(name),
                )?;
                if let Some(Attribute::Dense(d)) = o.attr("value") {
                    constants.insert(id, ircc_core::Tensor::from_dense(d));
                }
            }
            "kernel.launch" => {
                let kernel = symbol(m, op)?;
                let kf = m
                    .lookup_symbol(&kernel)
                    .ok_or_else(|| format!("no kernel.func @{kernel}"))?;
                let mut bindings = Vec::new();
                let textures = texture_args(m, kf).map_err(|e| format!("@{kernel}: {e}"))?;
                let texels = |arg: usize| {
                    textures
                        .iter()
                        .find(|&&(a, ..)| a == arg)
                        .map(|&(_, w, h)| [w, h])
                };
                for (i, &x) in o.operands.iter().enumerate() {
                    let buffer = *ids
                        .get(&x)
                        .ok_or_else(|| format!("@{kernel} reads a value no buffer holds"))?;
                    last_use.insert(buffer, dispatches.len());
                    if texels(i).is_some() != (buffers[buffer].kind == BufferKind::Texture)
                        || texels(i).is_some_and(|t| buffers[buffer].texels != Some(t))
                    {
                        return Err(format!(
                            "@{kernel} reads '{}' as a {} it is not",
                            buffers[buffer].name,
                            if texels(i).is_some() {
                                "texture"
                            } else {
                                "buffer"
                            }
                        ));
                    }
                    if buffers[buffer].kind == BufferKind::Texture {
                        bindings.push(Binding {
                            binding: i,
                            buffer,
                            access: "texture",
                        });
                        continue;
                    }
                    // Intermediates share the pool, which is also bound
                    // writable in the dispatch that reads them, and wgpu
                    // refuses one buffer bound both read-only and
                    // writable: only buffers of their own are read-only
                    // (which lets the driver cache their loads).
                    let own = matches!(
                        buffers[buffer].kind,
                        BufferKind::Input | BufferKind::Weight | BufferKind::Constant
                    );
                    bindings.push(Binding {
                        binding: i,
                        buffer,
                        access: if own { "read" } else { "read_write" },
                    });
                }
                for (j, &r) in o.results.iter().enumerate() {
                    let name = value_name(m, r, format!("{kernel}_out{j}"));
                    let buffer = add(
                        &mut buffers,
                        &mut ids,
                        r,
                        BufferKind::Intermediate,
                        name,
                        None,
                    )?;
                    produced_at.insert(buffer, dispatches.len());
                    last_use.insert(buffer, dispatches.len());
                    let binding = o.operands.len() + j;
                    let access = match texels(binding) {
                        Some(t) => {
                            buffers[buffer].kind = BufferKind::Texture;
                            buffers[buffer].texels = Some(t);
                            "storage_texture"
                        }
                        None => "read_write",
                    };
                    bindings.push(Binding {
                        binding,
                        buffer,
                        access,
                    });
                }
                let read_only: Vec<bool> = bindings.iter().map(|b| b.access == "read").collect();
                let wgsl = kernel_to_wgsl(m, kf, &read_only)
                    .map_err(|e| format!("kernel @{kernel}: {e}"))?;
                let ints = |name: &str| match m.op(kf).attr(name) {
                    Some(Attribute::DenseI64Array(x)) => x.clone(),
                    _ => vec![1, 1, 1],
                };
                let template = match m.op(kf).attr("template") {
                    Some(Attribute::String(s)) => s.clone(),
                    _ => String::new(),
                };
                dispatches.push(Dispatch {
                    shader: format!("{kernel}.wgsl"),
                    kernel: kernel.clone(),
                    template,
                    workgroup_size: ints("workgroup_size"),
                    workgroups: ints("grid"),
                    bindings,
                });
                shaders.push((kernel, wgsl));
            }
            "func.return" => {
                for &r in &o.operands {
                    let id = *ids.get(&r).ok_or("an output no kernel wrote")?;
                    if buffers[id].kind == BufferKind::Texture {
                        return Err(format!(
                            "output '{}' is held in a texture",
                            buffers[id].name
                        ));
                    }
                    if buffers[id].kind == BufferKind::Intermediate {
                        buffers[id].kind = BufferKind::Output;
                    }
                    outputs.push(id);
                }
            }
            other => {
                return Err(format!(
                    "'{other}' is left in the host function; run kernel.lower first"
                ));
            }
        }
    }
    for (i, &a) in m.blocks[block].args.iter().enumerate() {
        if let Some(name) = m.value(a).name.clone() {
            buffers[inputs[i]].name = name;
        }
    }
    let pooled: Vec<usize> = buffers
        .iter()
        .filter(|b| b.kind == BufferKind::Intermediate)
        .map(|b| b.id)
        .collect();
    let lives: Vec<(u64, usize, usize)> = pooled
        .iter()
        .map(|&id| (buffers[id].bytes, produced_at[&id], last_use[&id]))
        .collect();
    let (offsets, pool_bytes) = pack(&lives);
    for (&id, off) in pooled.iter().zip(offsets) {
        buffers[id].pool_offset = Some(off);
    }
    Ok(Plan {
        precision: float.name().to_string(),
        pool_bytes,
        buffers,
        inputs,
        outputs,
        dispatches,
        shaders,
        constants,
    })
}

#[cfg(test)]
mod tests {
    use super::pack;

    #[test]
    fn buffers_live_at_once_never_overlap_and_dead_ones_are_reused() {
        // a: 0..1, b: 1..2, c: 2..3 — a and c may share, b overlaps both.
        let (offsets, top) = pack(&[(100, 0, 1), (300, 1, 2), (100, 2, 3)]);
        assert_eq!(offsets, vec![0, 256, 0]);
        assert_eq!(top, 256 + 512);
    }
}
