//! A deployable bundle: a folder holding `plan.json`, the sources it names
//! and `weights.safetensors`, everything a host needs to run a compiled
//! model (`spec/plan.md`). [`write`] makes one; [`read`] loads one and
//! checks it whole before anything is allocated on a device, since a
//! bundle is input like any other: it may come from elsewhere.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use ircc_core::stored::{Bytes, map_file};
use ircc_core::{ElemType, StoredTensor, TensorType};
use safetensors::Dtype;
use safetensors::tensor::TensorView;

use crate::host::{dtype_size, from_bytes, stored_bytes};
use crate::webgpu::WebGpuNeeds;
use crate::{Access, BufferKind, Language, PLAN_VERSION, Plan, TexelFormat};

type R<T> = Result<T, String>;

/// The plan's file in a bundle.
pub const PLAN_FILE: &str = "plan.json";
/// The weights' file in a bundle.
pub const WEIGHTS_FILE: &str = "weights.safetensors";
/// The largest binding number a plan may use (WGSL's @binding and OpenCL's
/// argument index are 32-bit; no device binds more than a few thousand).
const MAX_BINDING: usize = 1 << 16;
/// Pool offsets are multiples of WebGPU's storage offset alignment.
const POOL_ALIGNMENT: u64 = 256;
/// How much larger than the plan's weights the weights file may be: room
/// for its header (names, types and shapes), so that a stray file cannot
/// fill memory.
const MAX_WEIGHTS_HEADER_BYTES: u64 = 256 << 20;

/// Writes `plan` as a bundle into `dir`: its sources, every weight
/// (`weight(name)`) and constant in weights.safetensors in its storage
/// type, and plan.json naming them. A constant whose name a weight
/// already has is renamed in the plan.
pub fn write(dir: &Path, plan: &mut Plan, weight: &dyn Fn(&str) -> R<StoredTensor>) -> R<()> {
    let io = |what: &str, path: &Path, e: std::io::Error| {
        format!("cannot {what} {}: {e}", path.display())
    };
    std::fs::create_dir_all(dir).map_err(|e| io("create", dir, e))?;
    let mut tensors: Vec<(String, Dtype, Vec<usize>, Bytes)> = Vec::new();
    let mut taken: HashSet<String> = plan
        .buffers
        .iter()
        .filter(|b| b.kind == BufferKind::Weight)
        .map(|b| b.tensor_name().to_string())
        .collect();
    let mut written: HashSet<String> = HashSet::new();
    for b in &mut plan.buffers {
        let bytes = match b.kind {
            BufferKind::Weight => {
                let name = b.tensor_name().to_string();
                b.tensor = Some(name.clone());
                if written.contains(&name) {
                    continue; // one weight bound twice
                }
                stored_bytes(&weight(&name)?, &b.dtype)
            }
            BufferKind::Constant => {
                let base = b.tensor_name().to_string();
                let mut name = base.clone();
                for i in 1.. {
                    if !taken.contains(&name) {
                        break;
                    }
                    name = format!("{base}#{i}");
                }
                taken.insert(name.clone());
                b.tensor = Some(name);
                let data = plan
                    .constants
                    .get(&b.id)
                    .ok_or_else(|| format!("constant '{}' has no data", b.name))?;
                stored_bytes(&StoredTensor::from_tensor(data), &b.dtype)
            }
            _ => continue,
        }
        .map_err(|e| format!("{:?} '{}': {e}", b.kind, b.name))?;
        written.insert(b.tensor.clone().unwrap_or_default());
        let shape = b.dims()?;
        let exact = shape.iter().product::<usize>() as u64 * dtype_size(&b.dtype)?;
        if bytes.len() as u64 != exact {
            return Err(format!(
                "{:?} '{}': {} bytes of data for {exact}",
                b.kind,
                b.name,
                bytes.len()
            ));
        }
        tensors.push((
            b.tensor.clone().unwrap_or_default(),
            storage_dtype(&b.dtype)?,
            shape,
            bytes,
        ));
    }
    let views = tensors
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            TensorView::new(*dtype, shape.clone(), bytes)
                .map(|v| (name.clone(), v))
                .map_err(|e| format!("weight '{name}': {e}"))
        })
        .collect::<R<Vec<_>>>()?;
    let path = dir.join(WEIGHTS_FILE);
    // Written as it is serialized: the weights are not copied into one
    // buffer first.
    // Written beside and renamed over, as write_replacing writes (the
    // crate does so itself): a link at the path is replaced.
    safetensors::serialize_to_file(views, None, &path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    plan.weights = Some(WEIGHTS_FILE.to_string());
    plan.webgpu =
        (plan.language == Some(Language::Wgsl)).then(|| WebGpuNeeds::of(plan, &plan.sources));
    for (file, text) in &plan.sources {
        let path = dir.join(file);
        ircc_core::files::write_file(&path, text)?;
    }
    let path = dir.join(PLAN_FILE);
    let json = serde_json::to_string_pretty(plan).map_err(|e| e.to_string())?;
    ircc_core::files::write_file(&path, json + "\n")
}

/// A bundle read back: its plan (sources and constants filled in) and
/// its weights by name, each in its buffer's storage type.
pub struct Bundle {
    pub plan: Plan,
    /// The language of the plan's sources.
    pub language: Language,
    /// Each weight in its buffer's storage type, shared with the mapped file.
    pub weights: HashMap<String, StoredTensor>,
    /// The graph element type of each output, to convert results back.
    pub output_elems: Vec<ElemType>,
}

/// The weight `name` of `weights`, or an error naming it: what a runtime
/// asks for each weight buffer.
pub fn weight_named(weights: &HashMap<String, StoredTensor>, name: &str) -> R<StoredTensor> {
    weights
        .get(name)
        .cloned()
        .ok_or_else(|| format!("no weight '{name}'"))
}

/// Whether `dir` is a folder holding a bundle's plan.json.
pub fn is_bundle(dir: &Path) -> bool {
    dir.is_dir() && dir.join(PLAN_FILE).is_file()
}

/// Reads the bundle in `dir`, refusing one whose plan is of another
/// version or inconsistent, whose files lie outside `dir`, whose plan or
/// a source is larger than `max_text_bytes` (a shader compiler takes time
/// and memory in proportion), or whose weights are missing or of another
/// type or shape than the plan's.
pub fn read(dir: &Path, max_text_bytes: u64) -> R<Bundle> {
    let text = read_text(dir, PLAN_FILE, max_text_bytes)?;
    // Another version may have other fields: say so before what serde
    // finds wrong with them.
    let value = serde_json::from_str::<serde_json::Value>(&text).ok();
    let version = value
        .as_ref()
        .and_then(|v| v.get("version").and_then(|v| v.as_u64()));
    if let Some(v) = version.filter(|&v| v != u64::from(PLAN_VERSION)) {
        return Err(format!("{PLAN_FILE}: {}", other_version(v)));
    }
    // Names are echoed in messages and output: none may hold a control
    // character, even escaped (`\u001b`, a terminal's escape).
    if let Some(s) = value.as_ref().and_then(control_string) {
        return Err(format!(
            "{PLAN_FILE}: the string {s:?} holds a control character, which no name in a plan has"
        ));
    }
    let mut plan: Plan = serde_json::from_str(&text).map_err(|e| format!("{PLAN_FILE}: {e}"))?;
    plan.check().map_err(|e| format!("{PLAN_FILE}: {e}"))?;
    let language = plan.language.ok_or("the plan names no source language")?;
    let mut files: Vec<&str> = Vec::new();
    for d in &plan.dispatches {
        let file = d.shader.as_deref().unwrap_or_default();
        if !files.contains(&file) {
            files.push(file);
        }
    }
    plan.sources = files
        .iter()
        .map(|f| Ok((f.to_string(), read_text(dir, f, max_text_bytes)?)))
        .collect::<R<_>>()?;
    if let Some(said) = &plan.webgpu {
        let needs = WebGpuNeeds::of(&plan, &plan.sources);
        if *said != needs {
            return Err(format!(
                "{PLAN_FILE}: 'webgpu' says the plan needs {}; its dispatches and shaders need {}",
                serde_json::to_string(said).unwrap_or_default(),
                serde_json::to_string(&needs).unwrap_or_default()
            ));
        }
    }
    let weights = read_weights(dir, &mut plan)?;
    let output_elems = plan
        .outputs
        .iter()
        .map(|&o| ElemType::from_name(&plan.buffers[o].elem).unwrap_or(ElemType::F32))
        .collect();
    Ok(Bundle {
        plan,
        language,
        weights,
        output_elems,
    })
}

/// The first string in `v` (keys included) holding a control character.
fn control_string(v: &serde_json::Value) -> Option<&str> {
    let bad = |s: &str| s.chars().any(char::is_control);
    match v {
        serde_json::Value::String(s) => bad(s).then_some(s.as_str()),
        serde_json::Value::Array(a) => a.iter().find_map(control_string),
        serde_json::Value::Object(o) => o.iter().find_map(|(k, v)| {
            if bad(k) {
                Some(k.as_str())
            } else {
                control_string(v)
            }
        }),
        _ => None,
    }
}

fn read_text(dir: &Path, file: &str, max_bytes: u64) -> R<String> {
    let path = ircc_core::files::file_inside(dir, file)?;
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    if size > max_bytes {
        return Err(format!(
            "{} is {size} bytes, more than --max-source-bytes {max_bytes} (raise it to read the bundle)",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    // Neither JSON nor WGSL nor OpenCL C has a place for control
    // characters outside strings: say where the first is at once, rather
    // than leave a compiler to echo megabytes of them back.
    if let Some((at, c)) = text
        .char_indices()
        .find(|&(_, c)| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        let line = text[..at].matches('\n').count() + 1;
        let column = text[..at].rfind('\n').map_or(at, |n| at - n - 1) + 1;
        return Err(format!(
            "{}:{line}:{column}: a control character (U+{:04X}), which no bundle file holds",
            path.display(),
            c as u32
        ));
    }
    Ok(text)
}

/// The weights and constants of `plan` from its weights file; constants
/// go into `plan.constants`.
fn read_weights(dir: &Path, plan: &mut Plan) -> R<HashMap<String, StoredTensor>> {
    let mut weights = HashMap::new();
    let needed: Vec<usize> = plan
        .buffers
        .iter()
        .filter(|b| matches!(b.kind, BufferKind::Weight | BufferKind::Constant))
        .map(|b| b.id)
        .collect();
    if needed.is_empty() {
        return Ok(weights);
    }
    let file = plan
        .weights
        .clone()
        .ok_or("the plan has weights or constants but names no weights file")?;
    let path = ircc_core::files::file_inside(dir, &file)?;
    // The header (names, types, shapes) is small beside the data, which
    // is at most what the plan's buffers hold.
    let expected = needed
        .iter()
        .try_fold(0u64, |sum, &id| sum.checked_add(plan.buffers[id].bytes))
        .ok_or("the weights' sizes overflow")?;
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    if size > expected.saturating_add(MAX_WEIGHTS_HEADER_BYTES) {
        return Err(format!(
            "{} is {size} bytes, far more than the {expected} bytes of the plan's weights",
            path.display()
        ));
    }
    let bytes: Bytes = map_file(&path)?;
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| format!("{}: not a valid safetensors file: {e}", path.display()))?;
    for id in needed {
        let b = &plan.buffers[id];
        let name = b.tensor_name();
        let view = st
            .tensor(name)
            .map_err(|_| format!("{file} has no tensor '{name}', which the plan names"))?;
        let shape = b.dims()?;
        if view.dtype() != storage_dtype(&b.dtype)? || view.shape() != shape.as_slice() {
            return Err(format!(
                "{file}: tensor '{name}' is {:?} {:?}; the plan stores it as {} {:?}",
                view.dtype(),
                view.shape(),
                b.dtype,
                shape
            ));
        }
        // Held in its storage type, which the runtime uploads as it is.
        let storage = ElemType::from_name(&b.dtype).unwrap_or(ElemType::F32);
        if b.kind == BufferKind::Constant {
            let t = from_bytes(view.data(), &b.dtype, &shape, storage)?;
            plan.constants.insert(id, t);
        } else {
            let start = view.data().as_ptr() as usize - bytes.as_ptr() as usize;
            let data = bytes.slice(start..start + view.data().len());
            let ty = TensorType::new(shape.iter().map(|&d| d as i64).collect(), storage);
            let t = StoredTensor::new(ty, data).map_err(|e| format!("{file}: '{name}': {e}"))?;
            weights.insert(name.to_string(), t);
        }
    }
    Ok(weights)
}

fn other_version(v: u64) -> String {
    format!("version {v} of the plan format; this ircc reads version {PLAN_VERSION}")
}

fn storage_dtype(dtype: &str) -> R<Dtype> {
    match dtype {
        "f32" => Ok(Dtype::F32),
        "f16" => Ok(Dtype::F16),
        "i32" => Ok(Dtype::I32),
        "i8" => Ok(Dtype::I8),
        "ui8" => Ok(Dtype::U8),
        other => Err(format!(
            "storage type '{other}' is not f32, f16, i32, i8 or ui8"
        )),
    }
}

impl crate::BufferPlan {
    /// The name of its data in the weights file: `tensor`, else its name.
    pub fn tensor_name(&self) -> &str {
        self.tensor.as_deref().unwrap_or(&self.name)
    }

    /// The shape as sizes, refusing a negative one.
    pub fn dims(&self) -> R<Vec<usize>> {
        self.shape
            .iter()
            .map(|&d| {
                usize::try_from(d)
                    .map_err(|_| format!("buffer '{}' has a negative size {d}", self.name))
            })
            .collect()
    }
}

impl Plan {
    /// The invocations one run of the plan runs, all dispatches together
    /// (in u128: a hostile plan's counts overflow u64).
    pub fn invocations(&self) -> u128 {
        let count = |v: &[i64]| v.iter().map(|&x| x.max(0) as u128).product::<u128>();
        self.dispatches
            .iter()
            .map(|d| count(&d.workgroups).saturating_mul(count(&d.workgroup_size)))
            .fold(0, u128::saturating_add)
    }

    /// The bytes the plan's buffers take on a device: the pool, and every
    /// buffer outside it.
    pub fn device_bytes(&self) -> u128 {
        self.buffers
            .iter()
            .filter(|b| b.pool_offset.is_none())
            .map(|b| u128::from(b.bytes))
            .fold(u128::from(self.pool_bytes), u128::saturating_add)
    }

    /// Checks that the plan is one a runtime can execute as written:
    /// every index in range, every buffer's bytes those of its shape and
    /// type, intermediates inside the pool, textures and accesses
    /// consistent, every dispatch naming a source file inside the bundle.
    pub fn check(&self) -> R<()> {
        if self.version != PLAN_VERSION {
            return Err(other_version(u64::from(self.version)));
        }
        if !matches!(self.precision.as_str(), "f32" | "f16") {
            return Err(format!("precision '{}' is not f32 or f16", self.precision));
        }
        let language = self.language.ok_or("the plan names no source language")?;
        if language != Language::Wgsl && self.webgpu.is_some() {
            return Err(format!(
                "'webgpu' describes WGSL plans; this one is {language}"
            ));
        }
        for (i, b) in self.buffers.iter().enumerate() {
            let at = |e: String| format!("buffer {i} ('{}'): {e}", b.name);
            if b.id != i {
                return Err(at(format!("its id is {}", b.id)));
            }
            let elem = ElemType::from_name(&b.elem)
                .ok_or_else(|| at(format!("unknown element type '{}'", b.elem)))?;
            let float = if self.precision == "f16" {
                ElemType::F16
            } else {
                ElemType::F32
            };
            let dtype = crate::storage(elem, float, b.kind).name();
            if b.dtype != dtype {
                return Err(at(format!(
                    "{} stored as {}; at {} precision it is stored as {dtype}",
                    b.elem, b.dtype, self.precision
                )));
            }
            let elements = b
                .dims()
                .map_err(at)?
                .iter()
                .try_fold(1u64, |n, &d| n.checked_mul(d as u64))
                .ok_or_else(|| at("its size overflows".to_string()))?;
            let stored = ElemType::from_name(&b.dtype).unwrap_or(ElemType::F32);
            let size = crate::buffer_bytes(elements, stored)
                .ok_or_else(|| at("its size overflows".to_string()))?;
            if b.bytes != size {
                return Err(at(format!(
                    "{} bytes, where its shape and type take {size}",
                    b.bytes
                )));
            }
            match (b.kind, b.pool_offset) {
                (BufferKind::Intermediate, Some(offset))
                    if offset
                        .checked_add(b.bytes)
                        .is_none_or(|end| end > self.pool_bytes) =>
                {
                    return Err(at(format!(
                        "at pool offset {offset} it ends past the {}-byte pool",
                        self.pool_bytes
                    )));
                }
                (BufferKind::Intermediate, Some(offset)) if offset % POOL_ALIGNMENT != 0 => {
                    return Err(at(format!(
                        "pool offset {offset} is not a multiple of {POOL_ALIGNMENT}"
                    )));
                }
                (BufferKind::Intermediate, Some(_)) => {}
                (BufferKind::Intermediate, None) => {
                    return Err(at("an intermediate without a pool offset".to_string()));
                }
                (_, Some(_)) => return Err(at("only intermediates lie in the pool".to_string())),
                _ => {}
            }
            let format = match b.dtype.as_str() {
                "f16" => TexelFormat::Rgba16f,
                _ => TexelFormat::Rgba32f,
            };
            let texture = b.kind == BufferKind::Texture;
            if texture != b.texels.is_some()
                || texture != b.texel_format.is_some()
                || b.texel_format.is_some_and(|f| f != format)
                || b.texels.is_some_and(|[w, h]| w == 0 || h == 0)
            {
                return Err(at(
                    "a texture needs texels and the texel format of its dtype; only a texture has them"
                        .to_string(),
                ));
            }
            if matches!(b.kind, BufferKind::Weight | BufferKind::Constant) && b.tensor.is_none() {
                return Err(at("a weight or constant names no tensor".to_string()));
            }
        }
        let buffer = |id: usize, what: &str| {
            self.buffers
                .get(id)
                .ok_or_else(|| format!("{what} names buffer {id}, which does not exist"))
        };
        for &id in &self.inputs {
            if buffer(id, "inputs")?.kind != BufferKind::Input {
                return Err(format!("inputs names buffer {id}, which is not an input"));
            }
        }
        let mut input_buffers = self.buffers.iter().filter(|b| b.kind == BufferKind::Input);
        if input_buffers.clone().count() != self.inputs.len()
            || input_buffers.any(|b| self.inputs.iter().filter(|&&i| i == b.id).count() != 1)
        {
            return Err("inputs must list every input buffer once".to_string());
        }
        if self.output_names.len() != self.outputs.len() {
            return Err(format!(
                "{} outputs but {} output names",
                self.outputs.len(),
                self.output_names.len()
            ));
        }
        for &id in &self.outputs {
            if buffer(id, "outputs")?.kind == BufferKind::Texture {
                return Err(format!("output buffer {id} is a texture"));
            }
        }
        for (k, d) in self.dispatches.iter().enumerate() {
            let at = |e: String| format!("dispatch {k} ({}): {e}", d.kernel);
            match (&d.shader, &d.entry) {
                (Some(file), Some(entry)) if !file.is_empty() && !entry.is_empty() => {
                    if language == Language::Wgsl && entry != "main" {
                        return Err(at(format!("a WGSL entry point is main, not '{entry}'")));
                    }
                    let first = self.dispatches[0].shader.as_ref();
                    if language == Language::Opencl && Some(file) != first {
                        return Err(at(
                            "the OpenCL kernels are one program, one file".to_string()
                        ));
                    }
                }
                _ => return Err(at("it names no source file and entry point".to_string())),
            }
            for (what, dims) in [
                ("workgroup_size", &d.workgroup_size),
                ("workgroups", &d.workgroups),
            ] {
                if dims.len() != 3 || dims.iter().any(|&n| n < 1 || n > i64::from(u32::MAX)) {
                    return Err(at(format!(
                        "{what} {dims:?} is not three counts (x, y, z) of at least 1"
                    )));
                }
            }
            let mut seen = HashSet::new();
            for bd in &d.bindings {
                let b = buffer(bd.buffer, &format!("dispatch {k}"))?;
                if !seen.insert(bd.binding) {
                    return Err(at(format!("binding {} is bound twice", bd.binding)));
                }
                if bd.binding > MAX_BINDING {
                    return Err(at(format!("binding {} is past {MAX_BINDING}", bd.binding)));
                }
                let allowed: &[Access] = match b.kind {
                    BufferKind::Input | BufferKind::Weight | BufferKind::Constant => {
                        &[Access::Read]
                    }
                    BufferKind::Intermediate | BufferKind::Output => &[Access::ReadWrite],
                    BufferKind::Texture => &[Access::Texture, Access::StorageTexture],
                };
                if !allowed.contains(&bd.access) {
                    return Err(at(format!(
                        "binding {} accesses '{}' ({:?}) as {:?}",
                        bd.binding, b.name, b.kind, bd.access
                    )));
                }
            }
        }
        Ok(())
    }
}
