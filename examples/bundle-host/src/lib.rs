//! A host that runs an ircc bundle with wgpu, written only against the
//! bundle's documentation (`spec/plan.md`): it reads `plan.json`, allocates
//! the pool, the buffers and textures it lists, uploads
//! `weights.safetensors`, records the dispatches in order and reads the
//! outputs back. Tensors go in and out as raw little-endian bytes in the
//! plan's `dtype`, so it needs no ircc crate and no numeric library.
//!
//! It trusts nothing in the bundle more than wgpu does: shaders are
//! compiled with every runtime check, and each index the plan holds is
//! checked before use.

use std::collections::HashMap;
use std::path::Path;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use serde_json::Value;

type R<T> = Result<T, String>;

/// A tensor as the host moves it: its shape and bytes in the plan's dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct Data {
    pub dtype: String,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

/// Runs the bundle in `dir` once on `inputs` (by input name) and returns
/// its outputs by name, in order.
pub fn run(dir: &Path, inputs: &HashMap<String, Data>) -> R<Vec<(String, Data)>> {
    let text = read(dir, "plan.json")?;
    let plan: Value = serde_json::from_str(&text).map_err(|e| format!("plan.json: {e}"))?;
    if plan["version"] != 1 || plan["language"] != "wgsl" {
        return Err("this host runs version 1 plans of WGSL shaders".into());
    }
    let buffers = array(&plan["buffers"])?;
    let buffer = |id: &Value| -> R<&Value> {
        id.as_u64()
            .and_then(|i| buffers.get(i as usize))
            .ok_or_else(|| format!("no buffer {id}"))
    };

    let adapter = block_on(wgpu::Instance::default().request_adapter(&Default::default()))
        .map_err(|e| format!("no GPU adapter: {e}"))?;
    let features = if plan["precision"] == "f16" {
        wgpu::Features::SHADER_F16
    } else {
        wgpu::Features::empty()
    };
    let (device, queue) = block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        required_features: features,
        required_limits: adapter.limits(),
        ..Default::default()
    }))
    .map_err(|e| format!("cannot open the GPU: {e}"))?;
    let errors = device.push_error_scope(wgpu::ErrorFilter::Validation);

    // Every tensor: the pool's intermediates, buffers of their own, textures.
    let storage =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
    let pool = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("pool"),
        size: round4(uint(&plan["pool_bytes"])?).max(4),
        usage: storage,
        mapped_at_creation: false,
    });
    let weights_bytes = match plan["weights"].as_str() {
        Some(file) => read_bytes(dir, file, MAX_WEIGHTS_BYTES)?,
        None => Vec::new(),
    };
    let weights = (!weights_bytes.is_empty())
        .then(|| safetensors::SafeTensors::deserialize(&weights_bytes))
        .transpose()
        .map_err(|e| format!("weights: {e}"))?;
    enum Memory {
        Pool(u64),
        Own(wgpu::Buffer),
        Texture(wgpu::TextureView),
    }
    let mut memory = Vec::new();
    for b in buffers {
        let name = b["name"].as_str().unwrap_or_default();
        let size = round4(uint(&b["bytes"])?);
        memory.push(match b["kind"].as_str().unwrap_or_default() {
            "intermediate" => Memory::Pool(uint(&b["pool_offset"])?),
            "texture" => {
                let [width, height] = &array(&b["texels"])?[..] else {
                    return Err(format!("texture '{name}' needs [width, height] texels"));
                };
                let format = match b["texel_format"].as_str() {
                    Some("rgba16f") => wgpu::TextureFormat::Rgba16Float,
                    _ => wgpu::TextureFormat::Rgba32Float,
                };
                let texture = device.create_texture(&wgpu::TextureDescriptor {
                    label: Some(name),
                    size: wgpu::Extent3d {
                        width: count(width)?,
                        height: count(height)?,
                        depth_or_array_layers: 1,
                    },
                    mip_level_count: 1,
                    sample_count: 1,
                    dimension: wgpu::TextureDimension::D2,
                    format,
                    usage: wgpu::TextureUsages::STORAGE_BINDING
                        | wgpu::TextureUsages::TEXTURE_BINDING,
                    view_formats: &[],
                });
                Memory::Texture(texture.create_view(&Default::default()))
            }
            kind => {
                let buf = device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(name),
                    size,
                    usage: storage,
                    mapped_at_creation: false,
                });
                let data = match kind {
                    "weight" | "constant" => {
                        let tensor = b["tensor"].as_str().unwrap_or(name);
                        let view = weights
                            .as_ref()
                            .and_then(|w| w.tensor(tensor).ok())
                            .ok_or_else(|| format!("no weight '{tensor}'"))?;
                        let dtype = match view.dtype() {
                            safetensors::Dtype::F32 => "f32",
                            safetensors::Dtype::F16 => "f16",
                            safetensors::Dtype::I32 => "i32",
                            safetensors::Dtype::I8 => "i8",
                            safetensors::Dtype::U8 => "ui8",
                            _ => "another type",
                        };
                        if dtype != b["dtype"] || view.shape() != dims(b)? {
                            return Err(format!(
                                "weight '{tensor}' is {dtype} {:?}; the plan stores {} {}",
                                view.shape(),
                                b["dtype"],
                                b["shape"]
                            ));
                        }
                        Some(view.data().to_vec())
                    }
                    "input" => {
                        let given = inputs
                            .get(name)
                            .ok_or_else(|| format!("no input '{name}' given"))?;
                        if given.dtype != b["dtype"] || given.shape != dims(b)? {
                            return Err(format!(
                                "input '{name}' is {} {:?}; the plan takes {} {}",
                                given.dtype, given.shape, b["dtype"], b["shape"]
                            ));
                        }
                        Some(given.bytes.clone())
                    }
                    _ => None,
                };
                if let Some(mut bytes) = data {
                    if bytes.len() as u64 > size {
                        return Err(format!("'{name}' has more bytes than its buffer"));
                    }
                    bytes.resize(size as usize, 0);
                    queue.write_buffer(&buf, 0, &bytes);
                }
                Memory::Own(buf)
            }
        });
    }

    // The dispatches, in order, in one compute pass.
    let mut encoder = device.create_command_encoder(&Default::default());
    let mut pipelines = Vec::new();
    let mut groups = Vec::new();
    for d in array(&plan["dispatches"])? {
        let file = d["shader"].as_str().ok_or("a dispatch without a shader")?;
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(file),
            source: wgpu::ShaderSource::Wgsl(read(dir, file)?.into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(file),
            layout: None,
            module: &module,
            entry_point: d["entry"].as_str(),
            compilation_options: Default::default(),
            cache: None,
        });
        let mut entries = Vec::new();
        for bd in array(&d["bindings"])? {
            let b = buffer(&bd["buffer"])?;
            let id = uint(&bd["buffer"])? as usize;
            let size = wgpu::BufferSize::new(round4(uint(&b["bytes"])?));
            let resource = match &memory[id] {
                Memory::Pool(offset) => wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &pool,
                    offset: *offset,
                    size,
                }),
                Memory::Own(buffer) => wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer,
                    offset: 0,
                    size,
                }),
                Memory::Texture(view) => wgpu::BindingResource::TextureView(view),
            };
            entries.push(wgpu::BindGroupEntry {
                binding: count(&bd["binding"])?,
                resource,
            });
        }
        groups.push(device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(file),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        }));
        pipelines.push((pipeline, array(&d["workgroups"])?.to_vec()));
    }
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        for ((pipeline, grid), group) in pipelines.iter().zip(&groups) {
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, group, &[]);
            let n = |i: usize| grid.get(i).map_or(Ok(1), count);
            pass.dispatch_workgroups(n(0)?, n(1)?, n(2)?);
        }
    }

    // The outputs, copied out and read back.
    let mut reads = Vec::new();
    for id in array(&plan["outputs"])? {
        let b = buffer(id)?;
        let size = round4(uint(&b["bytes"])?);
        let (source, offset) = match &memory[uint(id)? as usize] {
            Memory::Pool(offset) => (&pool, *offset),
            Memory::Own(buffer) => (buffer, 0),
            Memory::Texture(_) => return Err("an output in a texture".into()),
        };
        let read = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        encoder.copy_buffer_to_buffer(source, offset, &read, 0, size);
        reads.push((b, read));
    }
    queue.submit([encoder.finish()]);
    if let Some(e) = block_on(errors.pop()) {
        return Err(format!("wgpu refused the bundle: {e}"));
    }
    let names = array(&plan["output_names"])?;
    let mut outputs = Vec::new();
    for ((b, read), name) in reads.into_iter().zip(names) {
        let slice = read.slice(..);
        slice.map_async(wgpu::MapMode::Read, |_| {});
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| format!("the GPU did not finish: {e}"))?;
        let mut bytes = slice
            .get_mapped_range()
            .map_err(|e| format!("cannot read back: {e}"))?
            .to_vec();
        let shape = dims(b)?;
        let size = if b["dtype"] == "f16" { 2 } else { 4 };
        bytes.truncate(shape.iter().product::<usize>() * size);
        outputs.push((
            name.as_str().unwrap_or_default().to_string(),
            Data {
                dtype: b["dtype"].as_str().unwrap_or_default().to_string(),
                shape,
                bytes,
            },
        ));
    }
    Ok(outputs)
}

/// The largest plan.json or shader read, as `ircc run`'s default
/// (spec/plan.md).
const MAX_TEXT_BYTES: u64 = 16 << 20;
/// The largest weights file read.
const MAX_WEIGHTS_BYTES: u64 = 16 << 30;

fn read(dir: &Path, file: &str) -> R<String> {
    String::from_utf8(read_bytes(dir, file, MAX_TEXT_BYTES)?)
        .map_err(|_| format!("{file} is not UTF-8 text"))
}

/// The bytes of `file`, which must be a regular file of at most `max`
/// bytes whose real location (links resolved) is inside `dir`.
fn read_bytes(dir: &Path, file: &str, max: u64) -> R<Vec<u8>> {
    let folder = dir
        .canonicalize()
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = folder
        .join(file)
        .canonicalize()
        .map_err(|e| format!("{file}: {e}"))?;
    let meta = std::fs::metadata(&path).map_err(|e| format!("{file}: {e}"))?;
    if !path.starts_with(&folder) || !meta.is_file() || meta.len() > max {
        return Err(format!(
            "'{file}' is not a file of the bundle's folder of at most {max} bytes"
        ));
    }
    std::fs::read(&path).map_err(|e| format!("{file}: {e}"))
}

/// A count that must fit 32 bits (texels, workgroups, binding numbers).
fn count(v: &Value) -> R<u32> {
    u32::try_from(uint(v)?).map_err(|_| format!("{v} does not fit 32 bits"))
}

fn array(v: &Value) -> R<&Vec<Value>> {
    v.as_array()
        .ok_or_else(|| format!("expected an array, found {v}"))
}

fn uint(v: &Value) -> R<u64> {
    v.as_u64()
        .ok_or_else(|| format!("expected a count, found {v}"))
}

fn dims(b: &Value) -> R<Vec<usize>> {
    array(&b["shape"])?
        .iter()
        .map(|d| uint(d).map(|d| d as usize))
        .collect()
}

fn round4(n: u64) -> u64 {
    n.div_ceil(4) * 4
}

/// Drives a future to its end on this thread: wgpu's native futures are
/// ready at once or after `device.poll`, so no executor is needed.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}
