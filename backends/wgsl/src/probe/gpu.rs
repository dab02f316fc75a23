//! The GPU side of the device probe: its WGSL kernels, and the harness
//! that opens the adapter, compiles and binds the kernels and times a
//! dispatch (by timestamp queries where they work, else the wall clock).

use std::time::Instant;

use super::R;
use crate::runtime::{ErrorSink, open_adapter, open_device};

pub(super) const COPY: &str = r#"
@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;
@compute @workgroup_size(16, 16)
fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {
    let i = g.y * n.x * 16u + g.x;
    dst[i] = src[i];
}
"#;

pub(super) const TEXTURE_COPY: &str = r#"
@group(0) @binding(0) var src: texture_2d<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;
@compute @workgroup_size(16, 16)
fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {
    dst[g.y * n.x * 16u + g.x] = textureLoad(src, g.xy, 0);
}
"#;

/// Loads of `V` (aliased to f32, vec2 or vec4) from a buffer of `WORDS`
/// elements that stays in the first cache, each invocation striding by
/// the workgroup so neighbours read neighbouring elements; summed and
/// stored so nothing is dropped.
pub(super) const WIDTH: &str = r#"
override ITERS: u32 = 256u;
override WORDS: u32 = 1024u;
@group(0) @binding(0) var<storage, read> src: array<V>;
@group(0) @binding(1) var<storage, read_write> dst: array<V>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {
    var acc = V(0.0);
    var i = g.x & (WORDS - 1u);
    for (var k = 0u; k < ITERS; k++) {
        acc += src[i];
        i = (i + 256u) & (WORDS - 1u);
    }
    dst[g.y * n.x * 256u + g.x] = acc;
}
"#;

/// Eight independent vec4 FMA chains an invocation, so the ALUs never wait
/// on a result; seeded from the invocation id so nothing folds, summed and
/// stored so nothing is dropped. `T` is aliased to f32 or f16.
pub(super) const FMA: &str = r#"
override WG: u32 = 256u;
override ITERS: u32 = 256u;
@group(0) @binding(0) var<storage, read_write> out: array<vec4<f32>>;
@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    var a0 = vec4<T>(T(g.x & 255u) * T(0.001));
    var a1 = a0 + T(0.01); var a2 = a0 + T(0.02); var a3 = a0 + T(0.03);
    var a4 = a0 + T(0.04); var a5 = a0 + T(0.05); var a6 = a0 + T(0.06); var a7 = a0 + T(0.07);
    let m = vec4<T>(T(0.999));
    let c = vec4<T>(T(0.001));
    for (var k = 0u; k < ITERS; k++) {
        a0 = fma(a0, m, c); a1 = fma(a1, m, c); a2 = fma(a2, m, c); a3 = fma(a3, m, c);
        a4 = fma(a4, m, c); a5 = fma(a5, m, c); a6 = fma(a6, m, c); a7 = fma(a7, m, c);
    }
    out[g.x] = vec4<f32>(a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7);
}
"#;

/// One invocation follows a ring of indices: every load waits for the last.
/// An iteration takes 32 steps because llvmpipe ends a loop after 65535
/// iterations (counted over the whole invocation).
pub(super) const CHASE: &str = r#"
@group(0) @binding(0) var<storage, read> ring: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<uniform> iterations: vec4<u32>;
fn next(i: u32) -> u32 { return ring[ring[ring[ring[ring[ring[ring[ring[i]]]]]]]]; }
@compute @workgroup_size(1)
fn main() {
    var i = 0u;
    for (var k = 0u; k < iterations.x; k++) { i = next(next(next(next(i)))); }
    out[0] = i;
}
"#;

/// The same through the texture path: a texel holds the next one's place.
pub(super) const TEXTURE_CHASE: &str = r#"
@group(0) @binding(0) var ring: texture_2d<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<uniform> iterations: vec4<u32>;
fn at(p: vec2<u32>) -> vec2<u32> { return textureLoad(ring, p, 0).xy; }
fn next(p: vec2<u32>) -> vec2<u32> { return at(at(at(at(at(at(at(at(p)))))))); }
@compute @workgroup_size(1)
fn main() {
    var p = vec2<u32>(0u);
    for (var k = 0u; k < iterations.x; k++) { p = next(next(next(next(p)))); }
    out[0] = p.x + p.y;
}
"#;

pub(super) const SUBGROUP: &str = r#"
@group(0) @binding(0) var<storage, read_write> out: array<atomic<u32>, 2>;
@compute @workgroup_size(256)
fn main(@builtin(subgroup_size) s: u32) {
    atomicMin(&out[0], s);
    atomicMax(&out[1], s);
}
"#;

/// A two-entry timestamp query set, its resolve buffer, ns per tick.
type Stamps = (wgpu::QuerySet, wgpu::Buffer, f64);

/// A pipeline with the resources it runs on.
pub(super) type Kernel = (wgpu::ComputePipeline, wgpu::BindGroup);

/// The opened device, with the one way it times a dispatch.
pub(super) struct Bench {
    pub(super) device: wgpu::Device,
    pub(super) queue: wgpu::Queue,
    pub(super) limits: wgpu::Limits,
    pub(super) features: wgpu::Features,
    stamps: Option<Stamps>,
    errors: ErrorSink,
    /// How times are taken, for the method lines.
    pub(super) clock: &'static str,
}

impl Bench {
    pub(super) fn open() -> R<(Bench, wgpu::Adapter)> {
        let adapter = open_adapter()?;
        let wanted = wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP;
        let features = adapter.features() & (wanted | wgpu::Features::TIMESTAMP_QUERY);
        let (device, queue, errors) = open_device(&adapter, features)?;
        // lavapipe's timestamps stop bracketing dispatches once a texture
        // has been used (Mesa 22.3), so a CPU driver keeps the wall clock.
        let cpu = adapter.get_info().device_type == wgpu::DeviceType::Cpu;
        let timed = !cpu && features.contains(wgpu::Features::TIMESTAMP_QUERY);
        let stamps = timed.then(|| {
            let ty = wgpu::QueryType::Timestamp;
            let set = device.create_query_set(&wgpu::QuerySetDescriptor {
                label: None,
                ty,
                count: 2,
            });
            let usage = wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC;
            let resolve = buffer(&device, 16, usage);
            (set, resolve, queue.get_timestamp_period() as f64)
        });
        let clock = match stamps {
            Some(_) => "timed by timestamp queries around the pass",
            None => "timed by the wall clock around submit and wait",
        };
        let limits = device.limits();
        let gpu = Bench {
            device,
            queue,
            limits,
            features,
            stamps,
            errors,
            clock,
        };
        Ok((gpu, adapter))
    }

    pub(super) fn pipeline(
        &self,
        src: &str,
        constants: &[(&str, f64)],
    ) -> R<wgpu::ComputePipeline> {
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let source = wgpu::ShaderSource::Wgsl(src.into());
        let checks = wgpu::ShaderRuntimeChecks::unchecked();
        // SAFETY: every index the kernels use is in bounds by construction
        // (rings hold indices inside their buffer, grids cover their
        // buffers exactly) and every loop is bounded by a count, so the
        // checks wgpu would add would only slow what is measured.
        let module = unsafe {
            let desc = wgpu::ShaderModuleDescriptor {
                label: None,
                source,
            };
            self.device.create_shader_module_trusted(desc, checks)
        };
        let compilation_options = wgpu::PipelineCompilationOptions {
            constants,
            ..Default::default()
        };
        let desc = wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options,
            cache: None,
        };
        let pipeline = self.device.create_compute_pipeline(&desc);
        match pollster::block_on(scope.pop()) {
            Some(e) => Err(format!("a probe kernel does not compile: {e}")),
            None => Ok(pipeline),
        }
    }

    pub(super) fn bind<'a>(
        &self,
        p: &wgpu::ComputePipeline,
        res: &[wgpu::BindingResource<'a>],
    ) -> Kernel {
        let entry = |(binding, r): (u32, &wgpu::BindingResource<'a>)| wgpu::BindGroupEntry {
            binding,
            resource: r.clone(),
        };
        let entries: Vec<_> = (0..).zip(res).map(entry).collect();
        let layout = p.get_bind_group_layout(0);
        let desc = wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &entries,
        };
        (p.clone(), self.device.create_bind_group(&desc))
    }

    fn wait(&self) -> R<()> {
        let done = self.device.poll(wgpu::PollType::wait_indefinitely());
        done.map_err(|e| format!("the GPU did not finish: {e}"))?;
        let mut errors = self.errors.lock().map_err(|e| e.to_string())?;
        match errors.is_empty() {
            true => Ok(()),
            false => Err(errors.drain(..).collect::<Vec<_>>().join("; ")),
        }
    }

    /// The bytes of a small buffer.
    pub(super) fn read(&self, src: &wgpu::Buffer) -> R<Vec<u8>> {
        let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        let staging = buffer(&self.device, src.size(), usage);
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(src, 0, &staging, 0, src.size());
        self.queue.submit([enc.finish()]);
        let slice = staging.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| drop(tx.send(r)));
        self.wait()?;
        let mapped = rx.recv().map_err(|e| e.to_string())?;
        mapped.map_err(|e| format!("cannot read back: {e}"))?;
        let data = slice.get_mapped_range().map_err(|e| e.to_string())?;
        Ok(data.to_vec())
    }

    /// Seconds one dispatch of `grid` workgroups takes, and its wall time.
    pub(super) fn time<'a>(&'a self, (p, g): &Kernel, grid: (u32, u32)) -> R<(f64, f64)> {
        let mut enc = self.device.create_command_encoder(&Default::default());
        let writes = |(query_set, ..): &'a Stamps| wgpu::ComputePassTimestampWrites {
            query_set,
            beginning_of_pass_write_index: Some(0),
            end_of_pass_write_index: Some(1),
        };
        let timestamp_writes = self.stamps.as_ref().map(writes);
        let desc = wgpu::ComputePassDescriptor {
            label: None,
            timestamp_writes,
        };
        let mut pass = enc.begin_compute_pass(&desc);
        pass.set_pipeline(p);
        pass.set_bind_group(0, g, &[]);
        pass.dispatch_workgroups(grid.0, grid.1, 1);
        drop(pass);
        if let Some((set, resolve, _)) = &self.stamps {
            enc.resolve_query_set(set, 0..2, resolve, 0);
        }
        let start = Instant::now();
        self.queue.submit([enc.finish()]);
        self.wait()?;
        let wall = start.elapsed().as_secs_f64();
        let Some((_, resolve, period_ns)) = &self.stamps else {
            return Ok((wall, wall));
        };
        let b = self.read(resolve)?;
        let tick = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        let stamp = tick(8).saturating_sub(tick(0)) as f64 * period_ns * 1e-9;
        Ok((stamp, wall))
    }

    /// The fastest of `reps` dispatches (which drops a cold first one). A
    /// long dispatch shows whether timestamps bracket the work.
    pub(super) fn best(&self, kernel: &Kernel, grid: (u32, u32), reps: usize) -> R<f64> {
        let (mut best, mut wall) = (f64::MAX, f64::MAX);
        for _ in 0..reps {
            let (t, w) = self.time(kernel, grid)?;
            (best, wall) = (best.min(t), wall.min(w));
        }
        match wall > 0.005 && best < 0.5 * wall {
            true => Err(format!(
                "timestamps read {best:.4} s for a {wall:.4} s dispatch"
            )),
            false => Ok(best),
        }
    }

    pub(super) fn storage(&self, size: u64) -> wgpu::Buffer {
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        buffer(&self.device, size, usage | wgpu::BufferUsages::COPY_SRC)
    }

    pub(super) fn texture(
        &self,
        width: u32,
        height: u32,
        format: wgpu::TextureFormat,
    ) -> wgpu::Texture {
        let size = wgpu::Extent3d {
            width,
            height,
            depth_or_array_layers: 1,
        };
        self.device.create_texture(&wgpu::TextureDescriptor {
            label: None,
            size,
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format,
            usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
            view_formats: &[],
        })
    }
}

pub(super) fn buffer(device: &wgpu::Device, size: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
    let desc = wgpu::BufferDescriptor {
        label: None,
        size,
        usage,
        mapped_at_creation: false,
    };
    device.create_buffer(&desc)
}

pub(super) fn bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}
