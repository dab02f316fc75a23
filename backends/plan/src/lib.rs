//! The execution plan of a lowered module: every tensor the host handles
//! (inputs, weights, constants, intermediates in one pooled allocation,
//! outputs), and the dispatches in order with their bindings and grids.
//! It knows nothing of a shading language: a backend prints each kernel
//! and records its source in [`Plan::sources`]. It is what the wgpu
//! runtime executes and what `--emit wgsl|opencl -o DIR` writes as a
//! bundle ([`bundle`]: `plan.json`, the sources and `weights.safetensors`),
//! so a host other than ircc can run the shaders. `spec/plan.md` documents
//! the format and `spec/plan.schema.json` is its JSON Schema.

pub mod bundle;
pub mod host;
pub mod webgpu;

use std::collections::{BTreeMap, HashMap};

use ircc_core::builtin::{FuncOp, input_names, output_names};
use ircc_core::{ElemType, Module, OpId, ValueId};
use ircc_dialects::graph::ops as graph_ops;
use ircc_dialects::kernel::{self, KernelOp, Target, ops as kernel_ops, texture_args};
use serde::{Deserialize, Serialize};

type R<T> = Result<T, String>;

/// The version of the plan format, `plan.json`'s `version`: a reader
/// refuses any other. Raise it with every change a reader would misread.
pub const PLAN_VERSION: u32 = 1;

/// The dispatches in the first chunk of a run. ircc's hosts submit (wgpu)
/// or flush (OpenCL) a run's dispatches in chunks, this many and then
/// twice as many each time, so that the device starts on the first while
/// the CPU records the rest: recording ViT-B/16's 87 dispatches took the
/// CPU 0.1-0.3 ms a run, which the GPU otherwise waited out (on an H200,
/// the five torchvision networks ran 5-16% faster so).
pub const FIRST_CHUNK: usize = 4;

/// The exclusive end of each chunk of a run of `count` dispatches:
/// [`FIRST_CHUNK`], then each chunk twice the one before, the last ending
/// at `count` (`[0]` for none).
pub fn submission_ends(count: usize) -> impl Iterator<Item = usize> {
    std::iter::successors(Some(FIRST_CHUNK.min(count)), move |&end| {
        (end < count).then(|| (2 * end + FIRST_CHUNK).min(count))
    })
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
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

/// The texel format of a texture.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TexelFormat {
    /// Four f32 lanes: WGSL's rgba32float, OpenCL's CL_RGBA / CL_FLOAT.
    Rgba32f,
    /// Four f16 lanes, at f16 precision: rgba16float, CL_RGBA / CL_HALF_FLOAT.
    Rgba16f,
}

/// How a dispatch binds a tensor.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// A storage buffer the kernel only reads.
    Read,
    /// A storage buffer the kernel may write (every intermediate: the
    /// pool is bound writable wherever it is bound).
    ReadWrite,
    /// A texture the kernel samples.
    Texture,
    /// A texture the kernel writes.
    StorageTexture,
}

/// The language of a plan's sources.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Language {
    /// A WGSL module per dispatch, entry point `main`.
    Wgsl,
    /// One OpenCL C program, a kernel function per entry.
    Opencl,
}

impl std::fmt::Display for Language {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Language::Wgsl => "WGSL",
            Language::Opencl => "OpenCL C",
        })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferPlan {
    pub id: usize,
    pub name: String,
    pub kind: BufferKind,
    pub shape: Vec<i64>,
    /// Element type in memory: f32, f16, i32, or bytes (i8, ui8; see
    /// [`storage`]).
    pub dtype: String,
    /// The graph's element type of the tensor (`i64`, `i1`, `ui8`, ...),
    /// which `dtype` stores: integers and booleans as i32, but inputs,
    /// weights and constants of 8 bits or fewer as bytes.
    pub elem: String,
    pub bytes: u64,
    /// Offset in the pool, for intermediates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_offset: Option<u64>,
    /// The name of the tensor in the weights file, for weights and constants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor: Option<String>,
    /// Width and height in texels, for textures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub texels: Option<[u32; 2]>,
    /// The texel format, for textures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub texel_format: Option<TexelFormat>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    pub binding: usize,
    pub buffer: usize,
    pub access: Access,
}

impl Binding {
    /// Whether the kernel may declare the binding read-only.
    pub fn read_only(&self) -> bool {
        self.access == Access::Read
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dispatch {
    pub kernel: String,
    /// The file the backend wrote the kernel's source to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shader: Option<String>,
    /// The kernel's function in that file (`main` in WGSL, where each
    /// file holds one kernel; the kernel's name in an OpenCL program).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    pub template: String,
    pub workgroup_size: Vec<i64>,
    pub workgroups: Vec<i64>,
    pub bindings: Vec<Binding>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// [`PLAN_VERSION`].
    pub version: u32,
    /// The language of the sources; none until a backend prints them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<Language>,
    /// The safetensors file beside plan.json holding every weight and
    /// constant buffer's data, by its `tensor` name, in its `dtype`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<String>,
    pub precision: String,
    /// The device profile the kernels were compiled for, and why it was
    /// chosen (the module's `ircc.target`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<PlanTarget>,
    /// What a WGSL plan asks of a WebGPU device beyond every one's
    /// defaults ([`webgpu::WebGpuNeeds`]); a bundle's reader checks it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webgpu: Option<webgpu::WebGpuNeeds>,
    pub pool_bytes: u64,
    pub buffers: Vec<BufferPlan>,
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
    /// The function's name of each output (`ircc.name`, else `resultN`),
    /// in the order of `outputs`.
    pub output_names: Vec<String>,
    pub dispatches: Vec<Dispatch>,
    /// The source files the backend printed, `(file, text)`, written
    /// beside plan.json: a WGSL module per dispatch, in order, or one
    /// OpenCL C program.
    #[serde(skip)]
    pub sources: Vec<(String, String)>,
    /// Data of each constant buffer (in a bundle, in weights.safetensors).
    #[serde(skip)]
    pub constants: HashMap<usize, ircc_core::Tensor>,
}

/// The profile a plan's kernels were compiled for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanTarget {
    pub device: String,
    pub reason: String,
}

/// What a runtime measured over repeated runs of a plan: each run in
/// milliseconds, and each dispatch's runs in microseconds (empty where the
/// device cannot time kernels).
pub struct Timing {
    pub runs_ms: Vec<f64>,
    pub per_kernel_us: Vec<Vec<f64>>,
}

impl Plan {
    /// The bytes of the largest allocation: a buffer or the pool.
    pub fn largest_bytes(&self) -> u64 {
        self.buffers
            .iter()
            .map(|b| b.bytes)
            .chain([self.pool_bytes])
            .max()
            .unwrap_or(0)
    }
}

/// Intermediates sharing one allocation of `bytes`: no two of `buffers`
/// are live at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    pub bytes: u64,
    pub buffers: Vec<usize>,
}

impl Plan {
    /// The pooled intermediates shared out over whole allocations, for a
    /// runtime that cannot bind a part of the pool: OpenCL's sub-buffers
    /// would, but NVIDIA's driver crashes releasing overlapping ones. An
    /// intermediate lives from the first dispatch binding it to the last;
    /// each, in the order they come alive, takes the smallest free
    /// allocation that holds it, else grows the largest free one, else
    /// starts another.
    pub fn allocations(&self) -> Vec<Allocation> {
        let mut lives: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
        for (i, d) in self.dispatches.iter().enumerate() {
            for b in &d.bindings {
                if self
                    .buffers
                    .get(b.buffer)
                    .is_some_and(|x| x.pool_offset.is_some())
                {
                    let live = lives.entry(b.buffer).or_insert((i, i));
                    live.1 = i;
                }
            }
        }
        let mut order: Vec<(usize, usize, usize)> = lives
            .iter()
            .map(|(&id, &(first, last))| (first, id, last))
            .collect();
        order.sort_unstable();
        // Each allocation with the last dispatch its current tenant lives to.
        let mut allocations: Vec<(Allocation, usize)> = Vec::new();
        for (first, id, last) in order {
            let need = self.buffers[id].bytes.div_ceil(4) * 4;
            let free = allocations
                .iter()
                .enumerate()
                .filter(|(_, (_, end))| *end < first);
            let fits = free
                .clone()
                .filter(|(_, (a, _))| a.bytes >= need)
                .min_by_key(|(i, (a, _))| (a.bytes, *i))
                .map(|(i, _)| i);
            let chosen = fits.or_else(|| {
                free.max_by_key(|(i, (a, _))| (a.bytes, usize::MAX - i))
                    .map(|(i, _)| i)
            });
            match chosen {
                Some(i) => {
                    let (a, end) = &mut allocations[i];
                    a.bytes = a.bytes.max(need);
                    a.buffers.push(id);
                    *end = last;
                }
                None => allocations.push((
                    Allocation {
                        bytes: need,
                        buffers: vec![id],
                    },
                    last,
                )),
            }
        }
        allocations.into_iter().map(|(a, _)| a).collect()
    }
}

/// What a buffer of `e` and `kind` holds on the device
/// (`kernel::storage`): inputs, weights and constants are what no kernel
/// writes.
pub fn storage(e: ElemType, float: ElemType, kind: BufferKind) -> ElemType {
    let read_only = matches!(
        kind,
        BufferKind::Input | BufferKind::Weight | BufferKind::Constant
    );
    kernel::storage(e, float, read_only)
}

/// The bytes of a buffer of `n` elements stored as `elem` (at least one
/// element, for empty and scalar tensors): bytes in whole words, since a
/// shader reads them four to a u32. `None` where that overflows.
pub(crate) fn buffer_bytes(n: u64, elem: ElemType) -> Option<u64> {
    let bytes = n.max(1).checked_mul(elem.byte_size() as u64)?;
    Some(if elem.byte_size() == 1 {
        bytes.div_ceil(4) * 4
    } else {
        bytes
    })
}

fn elem_is_f16(b: &BufferPlan) -> bool {
    b.dtype == ElemType::F16.name()
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
        // Offsets in the pool are multiples of the storage offset alignment.
        let align = Target::webgpu().storage_offset_alignment;
        let size = bytes.div_ceil(align) * align;
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
        .filter(|&&op| KernelOp::of(m, op) == Some(KernelOp::Func))
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
        let elem = storage(t.elem, float, kind);
        let id = buffers.len();
        buffers.push(BufferPlan {
            id,
            name,
            kind,
            shape: t.shape.clone(),
            dtype: elem.name().to_string(),
            elem: t.elem.name().to_string(),
            bytes: buffer_bytes(t.num_elements().max(0) as u64, elem)
                .ok_or("a buffer's size overflows")?,
            pool_offset: None,
            tensor,
            texels: None,
            texel_format: None,
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
    let mut outputs = Vec::new();
    let mut produced_at: HashMap<usize, usize> = HashMap::new();
    let mut last_use: HashMap<usize, usize> = HashMap::new();
    for &op in &m.blocks[block].ops {
        let o = m.op(op);
        if let Some(param) = graph_ops::Param::new(m, op) {
            let name = param.name().to_string();
            add(
                &mut buffers,
                &mut ids,
                o.results[0],
                BufferKind::Weight,
                name.clone(),
                Some(name),
            )?;
        } else if let Some(constant) = graph_ops::Constant::new(m, op) {
            let name = value_name(m, o.results[0], format!("constant{}", buffers.len()));
            let id = add(
                &mut buffers,
                &mut ids,
                o.results[0],
                BufferKind::Constant,
                name.clone(),
                Some(name),
            )?;
            constants.insert(id, ircc_core::Tensor::from_dense(constant.value()));
        } else if let Some(launch) = kernel_ops::Launch::new(m, op) {
            let kernel = launch.kernel().to_string();
            {
                let kf = m
                    .lookup_symbol(&kernel)
                    .and_then(|f| kernel_ops::Func::new(m, f))
                    .ok_or_else(|| format!("no kernel.func @{kernel}"))?;
                let mut bindings = Vec::new();
                let textures = texture_args(m, kf.id()).map_err(|e| format!("@{kernel}: {e}"))?;
                let texels = |arg: usize| {
                    textures
                        .iter()
                        .find(|t| t.arg == arg)
                        .map(|t| [t.width, t.height])
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
                            access: Access::Texture,
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
                        access: if own { Access::Read } else { Access::ReadWrite },
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
                            buffers[buffer].texel_format = Some(if elem_is_f16(&buffers[buffer]) {
                                TexelFormat::Rgba16f
                            } else {
                                TexelFormat::Rgba32f
                            });
                            Access::StorageTexture
                        }
                        None => Access::ReadWrite,
                    };
                    bindings.push(Binding {
                        binding,
                        buffer,
                        access,
                    });
                }
                dispatches.push(Dispatch {
                    shader: None,
                    entry: None,
                    kernel,
                    template: kf.template().name().to_string(),
                    workgroup_size: kf.workgroup_size(),
                    workgroups: kf.grid(),
                    bindings,
                });
            }
        } else if FuncOp::of(m, op) == Some(FuncOp::Return) {
            {
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
        } else {
            return Err(format!(
                "'{}' is left in the host function; run kernel.lower first",
                o.name
            ));
        }
    }
    for (&id, name) in inputs.iter().zip(input_names(m, func)) {
        buffers[id].name = name;
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
        version: PLAN_VERSION,
        language: None,
        weights: None,
        precision: float.name().to_string(),
        target: ircc_dialects::kernel::ModuleTarget::of(m)
            .ok()
            .flatten()
            .map(|t| PlanTarget {
                device: t.profile.name,
                reason: t.reason,
            }),
        webgpu: None,
        pool_bytes,
        buffers,
        inputs,
        outputs,
        output_names: output_names(m, func),
        dispatches,
        sources: Vec::new(),
        constants,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_submitted_in_chunks_that_double() {
        let ends = |n| submission_ends(n).collect::<Vec<_>>();
        assert_eq!(ends(87), [4, 12, 28, 60, 87]);
        assert_eq!(ends(12), [4, 12]);
        assert_eq!(ends(3), [3]);
        assert_eq!(ends(0), [0]);
    }

    /// A plan of intermediates of `bytes`, each bound by the dispatches
    /// listed with it.
    fn plan_of(buffers: &[(u64, &[usize])]) -> Plan {
        let n = buffers
            .iter()
            .flat_map(|(_, d)| d.iter())
            .max()
            .map_or(0, |m| m + 1);
        let dispatches = (0..n)
            .map(|i| Dispatch {
                kernel: format!("k{i}"),
                shader: None,
                entry: None,
                template: "elementwise".into(),
                workgroup_size: vec![1, 1, 1],
                workgroups: vec![1, 1, 1],
                bindings: buffers
                    .iter()
                    .enumerate()
                    .filter(|(_, (_, ds))| ds.contains(&i))
                    .map(|(id, _)| Binding {
                        binding: id,
                        buffer: id,
                        access: Access::ReadWrite,
                    })
                    .collect(),
            })
            .collect();
        Plan {
            version: PLAN_VERSION,
            language: None,
            weights: None,
            precision: "f32".into(),
            target: None,
            webgpu: None,
            pool_bytes: 0,
            buffers: buffers
                .iter()
                .enumerate()
                .map(|(id, &(bytes, _))| BufferPlan {
                    id,
                    name: format!("t{id}"),
                    kind: BufferKind::Intermediate,
                    shape: vec![bytes as i64 / 4],
                    dtype: "f32".into(),
                    elem: "f32".into(),
                    bytes,
                    pool_offset: Some(0),
                    tensor: None,
                    texels: None,
                    texel_format: None,
                })
                .collect(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            output_names: Vec::new(),
            dispatches,
            sources: Vec::new(),
            constants: HashMap::new(),
        }
    }

    #[test]
    fn allocations_hold_no_two_live_intermediates_and_reuse_dead_ones() {
        // t0 lives over dispatches 0-1, t1 1-2, t2 2-3, t3 3-4, t4 0-4.
        let plan = plan_of(&[
            (100, &[0, 1]),
            (400, &[1, 2]),
            (300, &[2, 3]),
            (50, &[3, 4]),
            (8, &[0, 4]),
        ]);
        let allocations = plan.allocations();
        let mut seen = Vec::new();
        for a in &allocations {
            for (i, &x) in a.buffers.iter().enumerate() {
                assert!(plan.buffers[x].bytes <= a.bytes);
                seen.push(x);
                for &y in &a.buffers[i + 1..] {
                    // Bound by no common dispatch, and one ends first.
                    assert!(!plan.dispatches.iter().any(|d| {
                        d.bindings.iter().any(|b| b.buffer == x)
                            && d.bindings.iter().any(|b| b.buffer == y)
                    }));
                }
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1, 2, 3, 4]);
        // t2 takes t0's allocation (grown to 300), t3 takes t1's.
        assert_eq!(
            allocations,
            vec![
                Allocation {
                    bytes: 300,
                    buffers: vec![0, 2]
                },
                Allocation {
                    bytes: 8,
                    buffers: vec![4]
                },
                Allocation {
                    bytes: 400,
                    buffers: vec![1, 3]
                },
            ]
        );
    }

    #[test]
    fn buffers_live_at_once_never_overlap_and_dead_ones_are_reused() {
        // a: 0..1, b: 1..2, c: 2..3 — a and c may share, b overlaps both.
        let (offsets, top) = pack(&[(100, 0, 1), (300, 1, 2), (100, 2, 3)]);
        assert_eq!(offsets, vec![0, 256, 0]);
        assert_eq!(top, 256 + 512);
    }
}
