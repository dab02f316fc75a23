//! The OpenCL runtime: a [`Session`] builds a plan's program once, creates
//! its buffers and images, uploads the weights, binds every kernel's
//! arguments, and then runs the plan many times: one in-order queue, one
//! enqueue per dispatch. A compiler error names the kernel and the line of
//! the program it is on.
//!
//! Intermediates share whole buffers ([`Plan::allocations`]), never parts
//! of one: NVIDIA's OpenCL driver crashed releasing sub-buffers that
//! overlap (a segmentation fault once the outputs were read, on most
//! models), which pooling by offsets makes.

use std::ptr;
use std::sync::OnceLock;
use std::time::Instant;

use ircc_core::{ElemType, StoredTensor, Tensor};
use ircc_plan::host::{from_bytes, input_bytes, stored_to_bytes, to_bytes};
use ircc_plan::{BufferKind, Plan, Timing};
use opencl3::command_queue::{CL_QUEUE_PROFILING_ENABLE, CommandQueue};
use opencl3::context::Context;
use opencl3::device::{CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_GPU, Device, get_all_devices};
use opencl3::kernel::Kernel;
use opencl3::memory::{
    Buffer, CL_FLOAT, CL_HALF_FLOAT, CL_MEM_OBJECT_IMAGE2D, CL_MEM_READ_WRITE, CL_RGBA, ClMem,
    Image,
};
use opencl3::program::Program;
use opencl3::types::{CL_BLOCKING, cl_image_desc, cl_image_format};

type R<T> = Result<T, String>;

/// Where the runtime finds a weight by name.
pub type Weights<'a> = dyn Fn(&str) -> R<StoredTensor> + 'a;

/// The buffer of plan buffer `id`, which the host writes or reads.
fn host_buffer<'a>(
    memories: &'a mut [Memory],
    shared: &'a mut [Buffer<u8>],
    id: usize,
) -> R<&'a mut Buffer<u8>> {
    match &mut memories[id] {
        Memory::Buffer(b) => Ok(b),
        Memory::Shared(i) => Ok(&mut shared[*i]),
        Memory::Image(_) => Err("a host-visible tensor is held in an image".to_string()),
    }
}

/// A plan's tensor on the device.
enum Memory {
    Buffer(Buffer<u8>),
    Image(Image),
    /// An intermediate, in the shared allocation of this index.
    Shared(usize),
}

pub struct Session {
    queue: CommandQueue,
    plan: Plan,
    memories: Vec<Memory>,
    /// The buffers intermediates share, which [`Memory::Shared`] indexes.
    shared: Vec<Buffer<u8>>,
    kernels: Vec<Kernel>,
    /// Kept alive for the kernels made from it.
    _program: Option<Program>,
    output_elems: Vec<ElemType>,
    pub device: String,
    pub platform: String,
}

fn cl_err(what: &str) -> impl Fn(opencl3::error_codes::ClError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Threads of one process take turns to enumerate devices: the ICD
/// loader's first enumeration is not thread-safe (two threads opening
/// PoCL at once, as `--device auto` and a session do in concurrent tests,
/// left one of them with no device).
static ENUMERATION: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The device `IRCC_OPENCL_DEVICE` names (a part of its name), else the
/// first GPU, else the first device of any kind.
fn pick_device() -> R<Device> {
    let _turn = ENUMERATION.lock().unwrap_or_else(|e| e.into_inner());
    let all = get_all_devices(CL_DEVICE_TYPE_ALL).map_err(|e| {
        format!(
            "no OpenCL device: {e} (is an ICD installed, e.g. Debian's pocl-opencl-icd, and libOpenCL.so.1?)"
        )
    })?;
    let devices: Vec<Device> = all.into_iter().map(Device::new).collect();
    if let Ok(want) = std::env::var("IRCC_OPENCL_DEVICE") {
        return devices
            .into_iter()
            .find(|d| d.name().is_ok_and(|n| n.contains(&want)))
            .ok_or_else(|| format!("no OpenCL device named like '{want}' (IRCC_OPENCL_DEVICE)"));
    }
    let gpu = devices
        .iter()
        .position(|d| d.dev_type().is_ok_and(|t| t & CL_DEVICE_TYPE_GPU != 0))
        .unwrap_or(0);
    devices
        .into_iter()
        .nth(gpu)
        .ok_or_else(|| "no OpenCL device".to_string())
}

/// The device a session would open, as `--device auto` matches profiles
/// against it.
pub fn adapter() -> R<ircc_dialects::kernel::Adapter> {
    let d = pick_device()?;
    let name = d.name().map_err(cl_err("the device's name"))?;
    Ok(ircc_dialects::kernel::Adapter {
        api: "opencl".into(),
        name,
        vendor_id: d.vendor_id().map_err(cl_err("the device's vendor"))?,
        device_id: 0,
        is_cpu: d
            .dev_type()
            .is_ok_and(|t| t & opencl3::device::CL_DEVICE_TYPE_CPU != 0),
        compute_units: d.max_compute_units().ok(),
        max_workgroup_invocations: d.max_work_group_size().ok().map(|n| n.min(1 << 30) as u32),
        local_memory_bytes: d.local_mem_size().ok(),
        max_texture_extent: d
            .image2d_max_width()
            .ok()
            .filter(|&w| w > 0)
            .map(|w| w.min(1 << 30) as u32),
        // A kernel's buffers are its arguments, which OpenCL bounds by
        // their bytes, not their number.
        max_storage_buffers: None,
        // OpenCL C has no cooperative matrices.
        cooperative_matrix: Vec::new(),
    })
}

/// The compiler's log with each error at `FILE:LINE:COL` (PoCL writes
/// `error: FILE:LINE:COL: message`, clang `FILE:LINE:COL: error: message`)
/// given as the kernel that line is in, the message and the line itself.
fn explain_build_log(log: &str, program: &str) -> String {
    let lines: Vec<&str> = program.lines().collect();
    let kernel_at = |line: usize| {
        lines[..line.min(lines.len())]
            .iter()
            .rev()
            .find_map(|l| l.strip_prefix("void "))
            .and_then(|l| l.split('(').next())
            .unwrap_or("the prelude")
    };
    let mut out = String::new();
    for l in log.lines().filter(|l| l.contains("error")) {
        let fields: Vec<&str> = l.split(':').collect();
        let number = |i: usize| fields.get(i).and_then(|f| f.trim().parse::<usize>().ok());
        let Some(at) = (0..fields.len()).find(|&i| number(i).is_some() && number(i + 1).is_some())
        else {
            continue;
        };
        let n = number(at).unwrap_or(0);
        let message = fields[at + 2..].join(":");
        let message = message.trim();
        let message = message.strip_prefix("error:").unwrap_or(message).trim();
        if n == 0 {
            continue;
        }
        out.push_str(&format!(
            "kernel {}, line {n}: {message}\n    {}\n",
            kernel_at(n),
            lines.get(n - 1).map_or("", |s| s.trim())
        ));
    }
    if out.is_empty() { log.to_string() } else { out }
}

fn build(context: &Context, source: &str, options: &str) -> R<Program> {
    Program::create_and_build_from_source(context, source, options).map_err(|e| {
        format!(
            "the OpenCL compiler refused the program:\n{}",
            explain_build_log(&e, source)
        )
    })
}

/// The device and its context, made once per process: a context is
/// costly (PoCL loads and links its kernel library into each), and every
/// session and check can share one.
struct Shared {
    device: Device,
    context: Context,
    name: String,
    platform: String,
}

fn shared() -> R<&'static Shared> {
    static SHARED: OnceLock<R<Shared>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let device = pick_device()?;
            let name = device.name().map_err(cl_err("device name"))?;
            let platform = opencl3::platform::Platform::new(
                device.platform().map_err(cl_err("device platform"))?,
            )
            .name()
            .unwrap_or_default();
            let context = Context::from_device(&device).map_err(cl_err("OpenCL context"))?;
            Ok(Shared {
                device,
                context,
                name,
                platform,
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Builds `source` on the device [`pick_device`] finds without running
/// it, as a validator of emitted programs; returns the device's name.
pub fn check_program(source: &str, options: &str) -> R<String> {
    let shared = shared()?;
    build(&shared.context, source, options)?;
    Ok(shared.name.clone())
}

impl Session {
    /// Builds `plan` (whose [`Plan::sources`] is the OpenCL C program) on
    /// the device [`pick_device`] finds, passing `options` to the compiler.
    pub fn new(
        plan: Plan,
        output_elems: Vec<ElemType>,
        weights: &Weights,
        options: &str,
    ) -> R<Session> {
        let Shared {
            device,
            context,
            name,
            platform,
        } = shared()?;
        #[allow(deprecated)] // clCreateCommandQueue: what OpenCL 1.2 devices have.
        let queue = CommandQueue::create_default(context, CL_QUEUE_PROFILING_ENABLE)
            .map_err(cl_err("OpenCL queue"))?;
        // A plan without dispatches (a model returning an input or a
        // weight) has no program to build.
        let program = match plan.sources.first() {
            Some((_, source)) => Some(build(context, source, options)?),
            None if plan.dispatches.is_empty() => None,
            None => return Err("the plan has no OpenCL program".to_string()),
        };
        let has_images = plan.buffers.iter().any(|b| b.texels.is_some());
        if has_images && !device.image_support().unwrap_or(false) {
            return Err(format!("OpenCL device '{name}' has no image support"));
        }
        let largest = plan.largest_bytes();
        let max_alloc = device
            .max_mem_alloc_size()
            .map_err(cl_err("device limits"))?;
        if largest > max_alloc {
            return Err(format!(
                "a {largest}-byte tensor exceeds the device's allocation limit of {max_alloc} bytes"
            ));
        }
        // SAFETY (every `unsafe` below): the host pointers passed are null
        // (no host memory is adopted), sizes come from the plan, and the
        // blocking writes read slices that live across the call.
        let create = |bytes: u64| unsafe {
            Buffer::<u8>::create(
                context,
                CL_MEM_READ_WRITE,
                bytes.max(4) as usize,
                ptr::null_mut(),
            )
            .map_err(cl_err("allocating a buffer"))
        };
        let mut in_shared = vec![None; plan.buffers.len()];
        let mut shared = Vec::new();
        for (i, a) in plan.allocations().into_iter().enumerate() {
            for id in a.buffers {
                in_shared[id] = Some(i);
            }
            shared.push(create(a.bytes)?);
        }
        let (max_w, max_h) = (
            device.image2d_max_width().unwrap_or(0) as u64,
            device.image2d_max_height().unwrap_or(0) as u64,
        );
        let mut memories = Vec::new();
        for b in &plan.buffers {
            if let Some([width, height]) = b.texels {
                if u64::from(width) > max_w || u64::from(height) > max_h {
                    return Err(format!(
                        "image '{}' of {width}x{height} texels exceeds the device's limit of {max_w}x{max_h}",
                        b.name
                    ));
                }
                let format = cl_image_format {
                    image_channel_order: CL_RGBA,
                    image_channel_data_type: if b.dtype == "f16" {
                        CL_HALF_FLOAT
                    } else {
                        CL_FLOAT
                    },
                };
                // SAFETY: cl_image_desc is plain data; zero is every
                // field's default.
                let mut desc: cl_image_desc = unsafe { std::mem::zeroed() };
                desc.image_type = CL_MEM_OBJECT_IMAGE2D;
                desc.image_width = width as usize;
                desc.image_height = height as usize;
                let image = unsafe {
                    Image::create(context, CL_MEM_READ_WRITE, &format, &desc, ptr::null_mut())
                }
                .map_err(cl_err("allocating an image"))?;
                memories.push(Memory::Image(image));
                continue;
            }
            if let Some(i) = in_shared[b.id] {
                memories.push(Memory::Shared(i));
                continue;
            }
            let size = b.bytes.div_ceil(4) * 4;
            let mut memory = create(size)?;
            let bytes = match b.kind {
                BufferKind::Weight => {
                    let t = weights(b.tensor_name())?;
                    Some(stored_to_bytes(&t, &b.dtype, size)?.to_vec())
                }
                BufferKind::Constant => plan
                    .constants
                    .get(&b.id)
                    .map(|t| to_bytes(t, &b.dtype, size))
                    .transpose()?,
                _ => None,
            };
            if let Some(bytes) = bytes {
                unsafe { queue.enqueue_write_buffer(&mut memory, CL_BLOCKING, 0, &bytes, &[]) }
                    .map_err(cl_err("uploading a weight"))?;
            }
            memories.push(Memory::Buffer(memory));
        }
        let mut kernels = Vec::new();
        for d in &plan.dispatches {
            let entry = d
                .entry
                .as_deref()
                .ok_or("a dispatch without an entry point")?;
            let kernel = Kernel::create(program.as_ref().ok_or("no program")?, entry)
                .map_err(cl_err(&format!("kernel {entry}")))?;
            for b in &d.bindings {
                let mem = match &memories[b.buffer] {
                    Memory::Buffer(m) => m.get(),
                    Memory::Image(m) => m.get(),
                    Memory::Shared(i) => shared[*i].get(),
                };
                unsafe { kernel.set_arg(b.binding as u32, &mem) }
                    .map_err(cl_err(&format!("kernel {entry}, argument {}", b.binding)))?;
            }
            kernels.push(kernel);
        }
        Ok(Session {
            queue,
            plan,
            memories,
            shared,
            kernels,
            _program: program,
            output_elems,
            device: name.clone(),
            platform: platform.clone(),
        })
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    fn upload_inputs(&mut self, inputs: &[Tensor]) -> R<()> {
        for (id, bytes) in input_bytes(&self.plan, inputs)? {
            let buffer = host_buffer(&mut self.memories, &mut self.shared, id)?;
            // SAFETY: a blocking write of a live slice.
            unsafe {
                self.queue
                    .enqueue_write_buffer(buffer, CL_BLOCKING, 0, &bytes, &[])
            }
            .map_err(cl_err("uploading an input"))?;
        }
        Ok(())
    }

    /// Enqueues every dispatch and waits for them; with `profile`, the
    /// time of each in microseconds. The queue is flushed at the end of
    /// each chunk of [`ircc_plan::submission_ends`], so that the device
    /// starts on the first while the rest are enqueued.
    fn submit(&self, profile: bool) -> R<Vec<f64>> {
        let mut events = Vec::new();
        let count = self.kernels.len();
        let mut flushes = ircc_plan::submission_ends(count).filter(|&end| end < count);
        let mut flush_at = flushes.next();
        for (i, (d, kernel)) in self.plan.dispatches.iter().zip(&self.kernels).enumerate() {
            let local: Vec<usize> = d.workgroup_size.iter().map(|&w| w as usize).collect();
            let global: Vec<usize> = d
                .workgroups
                .iter()
                .zip(&local)
                .map(|(&g, &l)| g as usize * l)
                .collect();
            // SAFETY: the sizes are arrays of three, as work_dim says, and
            // every argument was bound when the session was built.
            let event = unsafe {
                self.queue.enqueue_nd_range_kernel(
                    kernel.get(),
                    3,
                    ptr::null(),
                    global.as_ptr(),
                    local.as_ptr(),
                    &[],
                )
            }
            .map_err(|e| format!("kernel {}: {e}", d.kernel))?;
            if profile {
                events.push(event);
            }
            if flush_at == Some(i + 1) {
                self.queue.flush().map_err(cl_err("while running"))?;
                flush_at = flushes.next();
            }
        }
        self.queue.finish().map_err(cl_err("while running"))?;
        events
            .iter()
            .map(|e| {
                let start = e.profiling_command_start().map_err(cl_err("profiling"))?;
                let end = e.profiling_command_end().map_err(cl_err("profiling"))?;
                Ok(end.saturating_sub(start) as f64 / 1e3)
            })
            .collect()
    }

    /// Runs the model once on `inputs` and returns its outputs.
    pub fn run(&mut self, inputs: &[Tensor]) -> R<Vec<Tensor>> {
        self.upload_inputs(inputs)?;
        self.submit(false)?;
        let mut outs = Vec::new();
        for (k, &id) in self.plan.outputs.iter().enumerate() {
            let b = &self.plan.buffers[id];
            let shape: Vec<usize> = b.shape.iter().map(|&d| d as usize).collect();
            let mut data = vec![0u8; (b.bytes.div_ceil(4) * 4) as usize];
            let buffer = host_buffer(&mut self.memories, &mut self.shared, id)?;
            // SAFETY: a blocking read into a live slice of the buffer's size.
            unsafe {
                self.queue
                    .enqueue_read_buffer(buffer, CL_BLOCKING, 0, &mut data, &[])
            }
            .map_err(cl_err("reading an output"))?;
            outs.push(from_bytes(&data, &b.dtype, &shape, self.output_elems[k])?);
        }
        Ok(outs)
    }

    /// Times `runs` runs after `warmup` untimed ones, calling
    /// `progress(done, total)` after each; per-kernel times come from
    /// profiling events of up to ten more runs.
    pub fn time_with_progress(
        &mut self,
        inputs: &[Tensor],
        warmup: usize,
        runs: usize,
        progress: &mut dyn FnMut(usize, usize),
    ) -> R<Timing> {
        self.upload_inputs(inputs)?;
        let total = warmup + runs + runs.min(10);
        let mut done = 0;
        let mut step = |progress: &mut dyn FnMut(usize, usize)| {
            done += 1;
            progress(done, total);
        };
        for _ in 0..warmup {
            self.submit(false)?;
            step(progress);
        }
        let mut runs_ms = Vec::new();
        for _ in 0..runs {
            let start = Instant::now();
            self.submit(false)?;
            runs_ms.push(start.elapsed().as_secs_f64() * 1e3);
            step(progress);
        }
        let mut per_kernel_us = vec![Vec::new(); self.kernels.len()];
        for _ in 0..runs.min(10) {
            for (k, us) in self.submit(true)?.into_iter().enumerate() {
                per_kernel_us[k].push(us);
            }
            step(progress);
        }
        Ok(Timing {
            runs_ms,
            per_kernel_us,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::explain_build_log;

    #[test]
    fn build_errors_name_the_kernel_and_the_line() {
        let program = "// prelude\n\n__kernel void k0_exp(__global float* a0)\n{\n    a0[0] = nope;\n}\n\n__kernel\nvoid k1_add(__global float* a0)\n{\n    a0[1] = 2.0f +;\n}\n";
        // The kernel's name is on the `void` line, as the printer writes it.
        let program = program.replace("__kernel void k0_exp", "__kernel\nvoid k0_exp");
        let log = "error: /tmp/k.cl:6:13: use of undeclared identifier 'nope'\n<source>:12:19: error: expected expression\n2 errors generated.";
        let explained = explain_build_log(log, &program);
        assert!(
            explained.contains("kernel k0_exp, line 6: use of undeclared identifier 'nope'"),
            "{explained}"
        );
        assert!(explained.contains("a0[0] = nope;"), "{explained}");
        assert!(
            explained.contains("kernel k1_add, line 12: expected expression"),
            "{explained}"
        );
        // A log without locations comes back whole.
        assert_eq!(
            explain_build_log("CL_OUT_OF_HOST_MEMORY", &program),
            "CL_OUT_OF_HOST_MEMORY"
        );
    }
}
