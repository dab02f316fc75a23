//! The wgpu runtime: a [`Session`] compiles a plan once (shader modules,
//! pipelines, bind groups, the pooled allocation, weights uploaded once)
//! and runs it many times, each run's dispatches submitted in chunks as
//! they are recorded ([`ircc_plan::submission_ends`]).
//! Every wgpu error (validation, out of memory, device lost) is caught in
//! an error scope or the uncaptured-error handler and returned as an ircc
//! error naming the kernel.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ircc_core::{ElemType, StoredTensor, Tensor};

use ircc_plan::host::{from_bytes, input_bytes, stored_to_bytes, to_bytes};
use ircc_plan::{BufferKind, Plan, Timing};

type R<T> = Result<T, String>;

/// Where the runtime finds a weight by name.
pub type Weights<'a> = dyn Fn(&str) -> R<StoredTensor> + 'a;

/// Where a plan's tensor lives on the device.
enum Memory {
    Buffer(Arc<wgpu::Buffer>),
    Texture(wgpu::TextureView),
}

impl Memory {
    /// The buffer of a tensor the host writes or reads; the plan never
    /// puts those in textures.
    fn buffer(&self) -> R<&wgpu::Buffer> {
        match self {
            Memory::Buffer(b) => Ok(b),
            Memory::Texture(_) => Err("a host-visible tensor is held in a texture".to_string()),
        }
    }
}

pub struct Session {
    gpu: Arc<Gpu>,
    plan: Plan,
    buffers: Vec<Memory>,
    pipelines: Vec<wgpu::ComputePipeline>,
    bind_groups: Vec<wgpu::BindGroup>,
    readback: Vec<wgpu::Buffer>,
    timestamps: Option<Timestamps>,
    /// `graph` element types of the outputs, to convert results back.
    output_elems: Vec<ElemType>,
    pub adapter: String,
    pub backend: String,
}

struct Timestamps {
    /// Two queries per dispatch, in sets of at most
    /// `QUERY_SET_MAX_QUERIES` (a `none` pipeline can dispatch thousands).
    sets: Vec<wgpu::QuerySet>,
    resolve: wgpu::Buffer,
    read: wgpu::Buffer,
    period_ns: f64,
}

impl Timestamps {
    /// The set holding dispatch `i`'s two queries, and the first's index.
    fn queries_of(&self, i: usize) -> (&wgpu::QuerySet, u32) {
        let q = 2 * i as u32;
        let per_set = wgpu::QUERY_SET_MAX_QUERIES;
        (&self.sets[(q / per_set) as usize], q % per_set)
    }
}

fn take_errors(errors: &Mutex<Vec<String>>) -> Option<String> {
    let mut e = errors.lock().ok()?;
    (!e.is_empty()).then(|| e.drain(..).collect::<Vec<_>>().join("; "))
}

/// The first adapter wgpu finds: Vulkan unless `WGPU_BACKEND` names
/// another (`WGPU_ADAPTER_NAME` picks among several).
pub(crate) fn open_adapter() -> R<wgpu::Adapter> {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle().with_env();
    if std::env::var_os("WGPU_BACKEND").is_none() {
        desc.backends = wgpu::Backends::VULKAN;
    }
    let instance = wgpu::Instance::new(desc);
    pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .map_err(|e| {
        format!("no GPU adapter: {e} (is a Vulkan driver installed, e.g. mesa-vulkan-drivers?)")
    })
}

/// The adapter a session would open, as `--device auto` matches profiles
/// against it.
pub fn adapter() -> R<ircc_dialects::kernel::Adapter> {
    let adapter = open_adapter()?;
    let info = adapter.get_info();
    let limits = adapter.limits();
    Ok(ircc_dialects::kernel::Adapter {
        api: info.backend.to_str().to_string(),
        name: info.name,
        vendor_id: info.vendor,
        device_id: info.device,
        is_cpu: info.device_type == wgpu::DeviceType::Cpu,
        compute_units: None,
        max_workgroup_invocations: Some(limits.max_compute_invocations_per_workgroup),
        local_memory_bytes: Some(u64::from(limits.max_compute_workgroup_storage_size)),
        max_texture_extent: Some(limits.max_texture_dimension_2d),
        max_storage_buffers: Some(limits.max_storage_buffers_per_shader_stage),
        cooperative_matrix: cooperative_matrices(&adapter),
    })
}

/// The cooperative-matrix configurations of `adapter` that kernels can
/// use: float operands and accumulators.
pub(crate) fn cooperative_matrices(
    adapter: &wgpu::Adapter,
) -> Vec<ircc_dialects::kernel::CooperativeMatrix> {
    if !adapter
        .features()
        .contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
    {
        return Vec::new();
    }
    let float = |t: wgpu::CooperativeScalarType| match t {
        wgpu::CooperativeScalarType::F16 => Some("f16"),
        wgpu::CooperativeScalarType::F32 => Some("f32"),
        _ => None,
    };
    adapter
        .cooperative_matrix_properties()
        .into_iter()
        .filter_map(|p| {
            Some(ircc_dialects::kernel::CooperativeMatrix {
                m: p.m_size,
                n: p.n_size,
                k: p.k_size,
                operands: float(p.ab_type)?.into(),
                accumulator: float(p.cr_type)?.into(),
                // Vulkan does not report the units' speed.
                peak_gflops: None,
            })
        })
        .collect()
}

/// The errors wgpu reports outside an error scope, collected to be
/// returned by the next call that checks.
pub(crate) type ErrorSink = Arc<Mutex<Vec<String>>>;

/// A device on `adapter` with `features` and the adapter's own limits,
/// its uncaptured errors collected.
pub(crate) fn open_device(
    adapter: &wgpu::Adapter,
    features: wgpu::Features,
) -> R<(wgpu::Device, wgpu::Queue, ErrorSink)> {
    let experimental_features =
        if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            // SAFETY: wgpu marks cooperative matrices experimental; kernels
            // use them only as its own validation (naga's) accepts them, and
            // the GPU machine checks their results against the FMA template's.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("ircc"),
        required_features: features,
        required_limits: adapter.limits(),
        experimental_features,
        ..Default::default()
    }))
    .map_err(|e| format!("cannot open the GPU: {e}"))?;
    let errors: ErrorSink = Arc::new(Mutex::new(Vec::new()));
    let sink = errors.clone();
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        if let Ok(mut v) = sink.lock() {
            v.push(e.to_string());
        }
    }));
    Ok((device, queue, errors))
}

/// An open device, with the pipelines compiled on it by their WGSL, so
/// that sessions on one device (`ircc tune`'s trials) compile each kernel
/// once.
pub struct Gpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    features: wgpu::Features,
    /// The cooperative-matrix configurations the adapter offers.
    matrices: Vec<ircc_dialects::kernel::CooperativeMatrix>,
    errors: ErrorSink,
    /// Compiled pipelines by source and whether it was trusted.
    pipelines: Mutex<HashMap<(String, bool), wgpu::ComputePipeline>>,
}

impl Gpu {
    /// Opens the first adapter wgpu finds (Vulkan preferred;
    /// `WGPU_BACKEND` and `WGPU_ADAPTER_NAME` choose another); `f16` asks
    /// that it run f16 shaders.
    pub fn open(f16: bool) -> R<Gpu> {
        let adapter = open_adapter()?;
        let info = adapter.get_info();
        let features = adapter.features()
            & (wgpu::Features::SHADER_F16
                | wgpu::Features::TIMESTAMP_QUERY
                | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS
                | wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX);
        if f16 && !features.contains(wgpu::Features::SHADER_F16) {
            return Err(format!(
                "adapter '{}' cannot run f16 shaders (no SHADER_F16)",
                info.name
            ));
        }
        let (device, queue, errors) = open_device(&adapter, features)?;
        Ok(Gpu {
            device,
            queue,
            info,
            features,
            matrices: cooperative_matrices(&adapter),
            errors,
            pipelines: Mutex::new(HashMap::new()),
        })
    }

    /// The adapter's name.
    pub fn adapter(&self) -> &str {
        &self.info.name
    }

    /// Whether the adapter is a CPU (lavapipe): no clocks to raise, so no
    /// warming up before timing.
    pub fn is_cpu(&self) -> bool {
        self.info.device_type == wgpu::DeviceType::Cpu
    }

    /// The pipeline of kernel `name`, compiled from `wgsl` unless a
    /// session on this device compiled the same source before. Shaders
    /// ircc did not print just now (`trusted` false: a bundle's) keep
    /// every check wgpu adds.
    fn pipeline(&self, name: &str, wgsl: &str, trusted: bool) -> wgpu::ComputePipeline {
        if let Some(p) = self.cached(wgsl, trusted) {
            return p;
        }
        let pipeline = self.compile(name, wgsl, trusted);
        if let Ok(mut m) = self.pipelines.lock() {
            m.insert((wgsl.to_string(), trusted), pipeline.clone());
        }
        pipeline
    }

    /// Drops every compiled pipeline no session holds: a tuner's rounds
    /// compile kernels that are not met again.
    pub fn forget_pipelines(&self) {
        if let Ok(mut m) = self.pipelines.lock() {
            m.clear();
        }
    }

    fn cached(&self, wgsl: &str, trusted: bool) -> Option<wgpu::ComputePipeline> {
        self.pipelines
            .lock()
            .ok()
            .and_then(|m| m.get(&(wgsl.to_string(), trusted)).cloned())
    }

    /// Compiles every one of `sources` (`(name, wgsl)`) this device has
    /// not, on as many threads as the machine has cores: a driver
    /// compiles a shader on one core, and a model (or a tuning round)
    /// brings dozens at once. A source that fails is left for
    /// [`Gpu::pipeline`] to compile again under its caller's error scope,
    /// which reports it.
    pub fn precompile(&self, sources: &[(String, String)], trusted: bool) {
        let mut todo: Vec<&(String, String)> = sources
            .iter()
            .filter(|(_, wgsl)| self.cached(wgsl, trusted).is_none())
            .collect();
        todo.sort_by(|a, b| a.1.cmp(&b.1));
        todo.dedup_by(|a, b| a.1 == b.1);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        if todo.len() < 2 || threads < 2 {
            return;
        }
        let per_thread = todo.len().div_ceil(threads);
        std::thread::scope(|s| {
            for chunk in todo.chunks(per_thread) {
                s.spawn(move || {
                    for (name, wgsl) in chunk {
                        // Error scopes are per thread.
                        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
                        let pipeline = self.compile(name, wgsl, trusted);
                        if pollster::block_on(scope.pop()).is_none()
                            && let Ok(mut m) = self.pipelines.lock()
                        {
                            m.insert((wgsl.to_string(), trusted), pipeline);
                        }
                    }
                });
            }
        });
    }

    /// Compiles `wgsl`'s kernel into a pipeline.
    fn compile(&self, name: &str, wgsl: &str, trusted: bool) -> wgpu::ComputePipeline {
        // SAFETY: every loop ircc emits has constant bounds, so the
        // guard wgpu adds against infinite loops is dropped (it costs a
        // 64-bit counter in each matmul step). Workgroup-memory indices
        // are in bounds by construction (tile and row offsets), and
        // Vulkan's robust buffer access, which wgpu turns on, keeps the
        // reads kernels make past a tensor's end (the last tile's rows,
        // the prefetch past K) inside the binding: there the shader's
        // own bounds clamps go too. Integer-division checks stay.
        let source = wgpu::ShaderModuleDescriptor {
            label: Some(name),
            source: wgpu::ShaderSource::Wgsl(wgsl.into()),
        };
        let module = if !trusted {
            self.device.create_shader_module(source)
        } else {
            unsafe {
                self.device.create_shader_module_trusted(
                    source,
                    wgpu::ShaderRuntimeChecks {
                        force_loop_bounding: false,
                        bounds_checks: self.info.backend != wgpu::Backend::Vulkan,
                        ..wgpu::ShaderRuntimeChecks::checked()
                    },
                )
            }
        };
        self.device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(name),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                // Every template writes a workgroup-memory word before any
                // invocation reads it, so zeroing it at each start is waste.
                compilation_options: wgpu::PipelineCompilationOptions {
                    zero_initialize_workgroup_memory: false,
                    ..Default::default()
                },
                cache: None,
            })
    }
}

impl Session {
    /// Compiles `plan` on a newly opened [`Gpu`].
    pub fn new(plan: Plan, output_elems: Vec<ElemType>, weights: &Weights) -> R<Session> {
        let gpu = Arc::new(Gpu::open(plan.precision == "f16")?);
        Session::on(gpu, plan, output_elems, weights)
    }

    /// Compiles `plan` on `gpu`.
    pub fn on(
        gpu: Arc<Gpu>,
        plan: Plan,
        output_elems: Vec<ElemType>,
        weights: &Weights,
    ) -> R<Session> {
        Session::build(gpu, plan, output_elems, weights, true)
    }

    /// Compiles a plan read from a bundle ([`ircc_plan::bundle::read`]),
    /// whose shaders keep wgpu's loop and bounds checks: ircc did not
    /// print them in this process, so nothing vouches for their loops.
    pub fn from_bundle(bundle: ircc_plan::bundle::Bundle) -> R<Session> {
        let ircc_plan::bundle::Bundle {
            plan,
            weights,
            output_elems,
            ..
        } = bundle;
        let gpu = Arc::new(Gpu::open(plan.precision == "f16")?);
        let weight = |name: &str| ircc_plan::bundle::weight_named(&weights, name);
        Session::build(gpu, plan, output_elems, &weight, false)
    }

    fn build(
        gpu: Arc<Gpu>,
        plan: Plan,
        output_elems: Vec<ElemType>,
        weights: &Weights,
        trusted: bool,
    ) -> R<Session> {
        if plan.precision == "f16" && !gpu.features.contains(wgpu::Features::SHADER_F16) {
            return Err(format!(
                "adapter '{}' cannot run f16 shaders (no SHADER_F16)",
                gpu.info.name
            ));
        }
        let matrices = plan
            .sources
            .iter()
            .find(|(_, source)| source.contains("enable wgpu_cooperative_matrix;"));
        let template = ircc_dialects::kernel::CooperativeMatrix::f16_f32(16);
        if let Some((file, _)) = matrices
            && !gpu.matrices.iter().any(|c| c.same_shape(&template))
        {
            return Err(format!(
                "kernel {file} multiplies 16x16x16 f16 cooperative matrices into f32, which adapter '{}' does not offer: compile for its own target (--device auto) or one whose profile lists no cooperative_matrix",
                gpu.info.name
            ));
        }
        let (device, queue, info, features) = (&gpu.device, &gpu.queue, &gpu.info, gpu.features);
        let limits = device.limits();
        let largest = plan.largest_bytes();
        if largest > limits.max_storage_buffer_binding_size {
            return Err(format!(
                "a {largest}-byte tensor exceeds the adapter's storage binding limit of {} bytes",
                limits.max_storage_buffer_binding_size
            ));
        }
        let usage = wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_DST
            | wgpu::BufferUsages::COPY_SRC;
        let pool = Arc::new(device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("pool"),
            size: plan.pool_bytes.max(16),
            usage,
            mapped_at_creation: false,
        }));
        let mut buffers = Vec::new();
        for b in &plan.buffers {
            if b.kind == BufferKind::Intermediate {
                buffers.push(Memory::Buffer(pool.clone()));
                continue;
            }
            if let Some([width, height]) = b.texels {
                let max = limits.max_texture_dimension_2d;
                if width > max || height > max {
                    return Err(format!(
                        "texture '{}' of {width}x{height} texels exceeds the adapter's limit of {max}",
                        b.name
                    ));
                }
                let format = if b.dtype == "f16" {
                    wgpu::TextureFormat::Rgba16Float
                } else {
                    wgpu::TextureFormat::Rgba32Float
                };
                let texture = device.create_texture(&wgpu::TextureDescriptor {
                    label: Some(&b.name),
                    size: wgpu::Extent3d {
                        width,
                        height,
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
                buffers.push(Memory::Texture(texture.create_view(&Default::default())));
                continue;
            }
            let size = b.bytes.div_ceil(4) * 4;
            let buf = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(&b.name),
                size,
                usage,
                mapped_at_creation: false,
            });
            match b.kind {
                BufferKind::Weight => {
                    let t = weights(b.tensor_name())?;
                    queue.write_buffer(&buf, 0, &stored_to_bytes(&t, &b.dtype, size)?);
                }
                BufferKind::Constant => {
                    if let Some(t) = plan.constants.get(&b.id) {
                        queue.write_buffer(&buf, 0, &to_bytes(t, &b.dtype, size)?);
                    }
                }
                _ => {}
            }
            buffers.push(Memory::Buffer(Arc::new(buf)));
        }
        gpu.precompile(&plan.sources, trusted);
        let mut pipelines = Vec::new();
        let mut bind_groups = Vec::new();
        for d in &plan.dispatches {
            // A bundle's dispatches may share a file: each finds its own.
            let (name, wgsl) = plan
                .sources
                .iter()
                .find(|(file, _)| Some(file) == d.shader.as_ref())
                .ok_or_else(|| format!("kernel {}: no source", d.kernel))?;
            let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
            let pipeline = gpu.pipeline(name, wgsl, trusted);
            let entries: Vec<wgpu::BindGroupEntry> = d
                .bindings
                .iter()
                .map(|bd| {
                    let b = &plan.buffers[bd.buffer];
                    let resource = match &buffers[bd.buffer] {
                        Memory::Buffer(buffer) => {
                            wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                                buffer,
                                offset: b.pool_offset.unwrap_or(0),
                                size: wgpu::BufferSize::new(b.bytes.div_ceil(4) * 4),
                            })
                        }
                        Memory::Texture(view) => wgpu::BindingResource::TextureView(view),
                    };
                    wgpu::BindGroupEntry {
                        binding: bd.binding as u32,
                        resource,
                    }
                })
                .collect();
            let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(name),
                layout: &pipeline.get_bind_group_layout(0),
                entries: &entries,
            });
            if let Some(e) = pollster::block_on(scope.pop()) {
                return Err(format!("kernel {name}: {e}"));
            }
            if d.workgroups
                .iter()
                .any(|&g| g as u32 > limits.max_compute_workgroups_per_dimension)
            {
                return Err(format!(
                    "kernel {name}: grid {:?} exceeds the adapter's limit",
                    d.workgroups
                ));
            }
            pipelines.push(pipeline);
            bind_groups.push(group);
        }
        let readback = plan
            .outputs
            .iter()
            .map(|&id| {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("readback"),
                    size: plan.buffers[id].bytes.div_ceil(4) * 4,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            })
            .collect();
        let timestamps = (features.contains(wgpu::Features::TIMESTAMP_QUERY)
            && !plan.dispatches.is_empty())
        .then(|| {
            let count = 2 * plan.dispatches.len() as u32;
            let size = 8 * count as u64;
            let sets = (0..count)
                .step_by(wgpu::QUERY_SET_MAX_QUERIES as usize)
                .map(|first| {
                    device.create_query_set(&wgpu::QuerySetDescriptor {
                        label: Some("kernel times"),
                        ty: wgpu::QueryType::Timestamp,
                        count: (count - first).min(wgpu::QUERY_SET_MAX_QUERIES),
                    })
                })
                .collect();
            Timestamps {
                sets,
                resolve: device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("timestamps"),
                    size,
                    usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: false,
                }),
                read: device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("timestamps read"),
                    size,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                }),
                period_ns: queue.get_timestamp_period() as f64,
            }
        });
        if let Some(e) = take_errors(&gpu.errors) {
            return Err(e);
        }
        Ok(Session {
            adapter: info.name.clone(),
            backend: format!("{:?}", info.backend).to_lowercase(),
            gpu: gpu.clone(),
            plan,
            buffers,
            pipelines,
            bind_groups,
            readback,
            timestamps,
            output_elems,
        })
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    fn upload_inputs(&self, inputs: &[Tensor]) -> R<()> {
        for (id, bytes) in input_bytes(&self.plan, inputs)? {
            self.gpu
                .queue
                .write_buffer(self.buffers[id].buffer()?, 0, &bytes);
        }
        Ok(())
    }

    /// Records every dispatch (and, when asked, the output copies) and
    /// submits them. An untimed run records a compute pass per chunk of
    /// dispatches: WebGPU synchronises the dispatches of a pass (each is
    /// its own usage scope), and a pass per dispatch cost the CPU more to
    /// encode than many of the kernels take. The chunks are submitted as
    /// they are recorded ([`ircc_plan::submission_ends`]), so that the GPU
    /// runs the first while the CPU records the rest. A timed run gives
    /// each dispatch a pass of its own, whose timestamps bracket it, in one
    /// submission.
    fn submit(&self, read_outputs: bool, timed: bool) -> R<()> {
        let encoder = || self.gpu.device.create_command_encoder(&Default::default());
        let mut enc = encoder();
        let timestamps = self.timestamps.as_ref().filter(|_| timed);
        match timestamps {
            None => {
                let count = self.pipelines.len();
                let mut first = 0;
                for end in ircc_plan::submission_ends(count) {
                    let mut pass = enc.begin_compute_pass(&Default::default());
                    for i in first..end {
                        self.dispatch(&mut pass, i, &self.pipelines[i], &self.bind_groups[i]);
                    }
                    drop(pass);
                    if end < count {
                        let recorded = std::mem::replace(&mut enc, encoder());
                        self.gpu.queue.submit([recorded.finish()]);
                    }
                    first = end;
                }
            }
            Some(t) => {
                let dispatches = self.pipelines.iter().zip(&self.bind_groups);
                for (i, (p, g)) in dispatches.enumerate() {
                    let (set, first) = t.queries_of(i);
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: None,
                        timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                            query_set: set,
                            beginning_of_pass_write_index: Some(first),
                            end_of_pass_write_index: Some(first + 1),
                        }),
                    });
                    self.dispatch(&mut pass, i, p, g);
                }
            }
        }
        if timed && let Some(t) = &self.timestamps {
            let mut left = 2 * self.pipelines.len() as u32;
            for (k, set) in t.sets.iter().enumerate() {
                let count = left.min(wgpu::QUERY_SET_MAX_QUERIES);
                let offset = 8 * k as u64 * wgpu::QUERY_SET_MAX_QUERIES as u64;
                enc.resolve_query_set(set, 0..count, &t.resolve, offset);
                left -= count;
            }
            enc.copy_buffer_to_buffer(&t.resolve, 0, &t.read, 0, t.resolve.size());
        }
        if read_outputs {
            for (&id, rb) in self.plan.outputs.iter().zip(&self.readback) {
                let b = &self.plan.buffers[id];
                enc.copy_buffer_to_buffer(
                    self.buffers[id].buffer()?,
                    b.pool_offset.unwrap_or(0),
                    rb,
                    0,
                    rb.size(),
                );
            }
        }
        self.gpu.queue.submit([enc.finish()]);
        self.gpu
            .device
            .poll(wgpu::PollType::Wait {
                submission_index: None,
                timeout: None,
            })
            .map_err(|e| format!("the GPU did not finish: {e}"))?;
        match take_errors(&self.gpu.errors) {
            Some(e) => Err(format!("while running: {e}")),
            None => Ok(()),
        }
    }

    fn dispatch(
        &self,
        pass: &mut wgpu::ComputePass,
        i: usize,
        pipeline: &wgpu::ComputePipeline,
        group: &wgpu::BindGroup,
    ) {
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, group, &[]);
        let w = &self.plan.dispatches[i].workgroups;
        pass.dispatch_workgroups(w[0] as u32, w[1] as u32, w[2] as u32);
    }

    fn read(&self, buffer: &wgpu::Buffer) -> R<Vec<u8>> {
        let slice = buffer.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.gpu
            .device
            .poll(wgpu::PollType::Wait {
                submission_index: None,
                timeout: None,
            })
            .map_err(|e| format!("the GPU did not finish: {e}"))?;
        rx.recv()
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot read back: {e}"))?;
        let data = slice
            .get_mapped_range()
            .map_err(|e| format!("cannot read back: {e}"))?
            .to_vec();
        buffer.unmap();
        Ok(data)
    }

    /// Runs the model once on `inputs` and returns its outputs.
    pub fn run(&mut self, inputs: &[Tensor]) -> R<Vec<Tensor>> {
        self.upload_inputs(inputs)?;
        self.submit(true, false)?;
        let mut outs = Vec::new();
        for (k, (&id, rb)) in self.plan.outputs.iter().zip(&self.readback).enumerate() {
            let b = &self.plan.buffers[id];
            let shape: Vec<usize> = b.shape.iter().map(|&d| d as usize).collect();
            let data = self.read(rb)?;
            outs.push(from_bytes(&data, &b.dtype, &shape, self.output_elems[k])?);
        }
        Ok(outs)
    }

    /// Times `runs` runs after `warmup` untimed ones.
    pub fn time(&mut self, inputs: &[Tensor], warmup: usize, runs: usize) -> R<Timing> {
        self.time_with_progress(inputs, warmup, runs, &mut |_, _| {})
    }

    /// [`Self::time`], calling `progress(done, total)` after each run.
    pub fn time_with_progress(
        &mut self,
        inputs: &[Tensor],
        warmup: usize,
        runs: usize,
        progress: &mut dyn FnMut(usize, usize),
    ) -> R<Timing> {
        self.upload_inputs(inputs)?;
        let profiled = if self.timestamps.is_some() {
            runs.min(10)
        } else {
            0
        };
        let total = warmup + runs + profiled;
        let mut done = 0;
        let mut step = |progress: &mut dyn FnMut(usize, usize)| {
            done += 1;
            progress(done, total);
        };
        for _ in 0..warmup {
            self.submit(false, false)?;
            step(progress);
        }
        let mut runs_ms = Vec::new();
        let mut per_kernel_us = vec![Vec::new(); self.pipelines.len()];
        for _ in 0..runs {
            let start = Instant::now();
            self.submit(false, false)?;
            runs_ms.push(start.elapsed().as_secs_f64() * 1e3);
            step(progress);
        }
        for _ in 0..profiled {
            for (k, us) in self.profiled_run()?.into_iter().enumerate() {
                per_kernel_us[k].push(us);
            }
            step(progress);
        }
        Ok(Timing {
            runs_ms,
            per_kernel_us,
        })
    }

    /// One run with each dispatch in a timed pass of its own: every
    /// dispatch's time in microseconds.
    fn profiled_run(&self) -> R<Vec<f64>> {
        let t = self
            .timestamps
            .as_ref()
            .ok_or("the adapter cannot time kernels (no timestamp queries)")?;
        self.submit(false, true)?;
        let data = self.read(&t.read)?;
        let ticks: Vec<u64> = data
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        Ok((0..self.pipelines.len())
            .map(|k| ticks[2 * k + 1].saturating_sub(ticks[2 * k]) as f64 * t.period_ns / 1e3)
            .collect())
    }

    /// Each dispatch's times over `runs` timed runs, after `warmup`
    /// untimed ones: what a tuner measures kernels by, with no run timed
    /// by the clock.
    pub fn profile(&mut self, inputs: &[Tensor], warmup: usize, runs: usize) -> R<Vec<Vec<f64>>> {
        self.upload_inputs(inputs)?;
        for _ in 0..warmup {
            self.submit(false, false)?;
        }
        let mut per_kernel_us = vec![Vec::new(); self.pipelines.len()];
        for _ in 0..runs {
            for (k, us) in self.profiled_run()?.into_iter().enumerate() {
                per_kernel_us[k].push(us);
            }
        }
        Ok(per_kernel_us)
    }

    /// `runs` runs timed by the clock, in milliseconds, after `warmup`
    /// untimed ones.
    pub fn wall_ms(&mut self, inputs: &[Tensor], warmup: usize, runs: usize) -> R<Vec<f64>> {
        self.upload_inputs(inputs)?;
        for _ in 0..warmup {
            self.submit(false, false)?;
        }
        (0..runs)
            .map(|_| {
                let start = Instant::now();
                self.submit(false, false)?;
                Ok(start.elapsed().as_secs_f64() * 1e3)
            })
            .collect()
    }
}
