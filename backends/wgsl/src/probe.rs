//! The device probe: measures the figures of a device profile
//! (`spec/devices/NAME.toml`, read by `DeviceProfile::parse`) on the
//! adapter wgpu opens, in the manner of ArchProbe (Romou §3). Limits are
//! queried; bandwidth, arithmetic peaks, compute units and caches are timed
//! with small kernels. Every figure keeps a line saying how it was obtained,
//! and one whose curve shows no clear answer is left out with the reason,
//! never guessed. `quick` shrinks every size so that a CPU driver
//! (lavapipe) finishes in seconds.

mod gpu;

use std::collections::BTreeMap;

use gpu::{
    Bench, CHASE, COPY, FMA, Kernel, SUBGROUP, TEXTURE_CHASE, TEXTURE_COPY, WIDTH, buffer, bytes,
};

type R<T> = Result<T, String>;

/// A measured or queried figure.
pub struct Figure {
    pub value: f64,
    /// One line saying how it was measured or queried.
    pub method: String,
}

/// What the probe found on one adapter.
pub struct Probe {
    pub adapter: String,
    pub driver: String,
    pub vendor: String,
    pub vendor_method: String,
    /// Figures by profile field; the two flags are 1.0 (true) or 0.0.
    pub figures: BTreeMap<&'static str, Figure>,
    /// Why each optional figure that is absent was left out.
    pub missing: BTreeMap<&'static str, String>,
    pub texture_formats: Vec<String>,
    pub formats_method: String,
    /// The cooperative-matrix configurations the adapter lists.
    pub cooperative_matrix: Vec<ircc_dialects::kernel::CooperativeMatrix>,
}

/// The profile's figures in its order: `_gbs` and `_gflops` are rates, the
/// two flags booleans, the rest counts. The flags, `compute_units`,
/// `subgroup_size` and `memory_bandwidth_gbs` are required; the probe
/// always sets them.
const FIELDS: &str = "compute_units alus_per_unit subgroup_size max_workgroup_invocations \
    registers_per_unit l1_bytes l1_line_bytes l1_serves_buffers autobroadcast l2_bytes \
    l2_line_bytes local_memory_bytes load_width memory_bandwidth_gbs texture_bandwidth_gbs peak_f32_gflops \
    peak_f16_gflops max_texture_extent max_storage_buffers";
const FLAGS: [&str; 2] = ["l1_serves_buffers", "autobroadcast"];

fn kib(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b % 1024 == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

impl Probe {
    fn set(&mut self, field: &'static str, value: f64, method: impl Into<String>) {
        let method = method.into();
        self.figures.insert(field, Figure { value, method });
    }

    fn miss(&mut self, field: &'static str, why: impl Into<String>) {
        self.missing.insert(field, why.into());
    }
}

/// Copy bandwidth through buffers and through an rgba32f texture: both
/// kernels read and write the same bytes, one vec4 an invocation.
fn bandwidth(gpu: &Bench, out: &mut Probe, quick: bool) -> R<()> {
    let (want, reps) = match quick {
        true => (64u64 << 20, 3),
        false => (256 << 20, 10),
    };
    let l = &gpu.limits;
    let width = 4096.min(l.max_texture_dimension_2d);
    let row = width as u64 * 16 * 16; // one row of 16x16 workgroups
    let size = want.min(l.max_storage_buffer_binding_size.min(l.max_buffer_size)) / row * row;
    let height = (size / row * 16) as u32;
    let grid = (width / 16, height / 16);
    let gbs = |kernel| Ok::<_, String>(2.0 * size as f64 / gpu.best(&kernel, grid, reps)? / 1e9);
    let how = |what: String| {
        let size = kib(size);
        format!(
            "micro-benchmark: {what} into a {size} buffer, one vec4<f32> an invocation, (bytes \
             read + written) / time, best of {reps}, {}",
            gpu.clock
        )
    };
    let (src, dst) = (gpu.storage(size), gpu.storage(size));
    let copy = gpu.pipeline(COPY, &[])?;
    let copy = gpu.bind(&copy, &[src.as_entire_binding(), dst.as_entire_binding()]);
    let what = format!("copy of a {} buffer", kib(size));
    out.set("memory_bandwidth_gbs", gbs(copy)?, how(what));
    if height > l.max_texture_dimension_2d {
        out.miss("texture_bandwidth_gbs", "the copy does not fit one texture");
        return Ok(());
    }
    let texture = gpu.texture(width, height, wgpu::TextureFormat::Rgba32Float);
    let view = texture.create_view(&Default::default());
    let load = gpu.pipeline(TEXTURE_COPY, &[])?;
    let res = [
        wgpu::BindingResource::TextureView(&view),
        dst.as_entire_binding(),
    ];
    let load = gpu.bind(&load, &res);
    let what = format!("textureLoad of a {width}x{height} rgba32f texture");
    out.set("texture_bandwidth_gbs", gbs(load)?, how(what));
    Ok(())
}

/// The load width of the best cache bandwidth (Romou §4.2 prunes kernels
/// that load in other widths): a 16 KiB buffer read as f32, vec2 and vec4
/// by enough workgroups to fill any GPU; the narrowest width within a
/// tenth of the best bandwidth, since a device that does not care should
/// not have a width forced on its kernels.
fn load_width(gpu: &Bench, out: &mut Probe, quick: bool) -> R<()> {
    let (groups, iters, reps) = if quick {
        (64u32, 256u32, 3)
    } else {
        (4096, 1024, 5)
    };
    let bytes = 16384u64;
    let dst = gpu.storage(groups as u64 * 256 * 16);
    let src = gpu.storage(bytes);
    let mut rates = Vec::new();
    for (width, ty) in [(1u32, "f32"), (2, "vec2<f32>"), (4, "vec4<f32>")] {
        let words = bytes / (4 * width as u64);
        let constants = [("ITERS", iters as f64), ("WORDS", words as f64)];
        let p = gpu.pipeline(&format!("alias V = {ty};\n{WIDTH}"), &constants)?;
        let k = gpu.bind(&p, &[src.as_entire_binding(), dst.as_entire_binding()]);
        let t = gpu.best(&k, (groups, 1), reps)?;
        let read = groups as f64 * 256.0 * iters as f64 * 4.0 * width as f64;
        rates.push((width, read / t / 1e9));
    }
    let best = rates.iter().map(|r| r.1).fold(0.0, f64::max);
    let width = rates.iter().find(|r| r.1 >= 0.9 * best).map_or(4, |r| r.0);
    let curve: Vec<String> = rates
        .iter()
        .map(|(w, r)| format!("{w}: {r:.0} GB/s"))
        .collect();
    let how = format!(
        "micro-benchmark: {groups} workgroups of 256 invocations each loading {iters} elements \
         of a {} buffer as f32, vec2<f32> and vec4<f32>, bytes read / time, best of {reps}, {}; \
         the narrowest width within 10% of the best ({})",
        kib(bytes),
        gpu.clock,
        curve.join(", ")
    );
    out.set("load_width", width as f64, how);
    Ok(())
}

/// The FMA kernel for `groups` workgroups of `wg` invocations.
fn fma(gpu: &Bench, half: bool, wg: u32, iters: u32, groups: u32) -> R<Kernel> {
    let alias = match half {
        true => "enable f16;\nalias T = f16;\n",
        false => "alias T = f32;\n",
    };
    let constants = [("WG", wg as f64), ("ITERS", iters as f64)];
    let p = gpu.pipeline(&format!("{alias}{FMA}"), &constants)?;
    let result = gpu.storage(groups as u64 * wg as u64 * 16);
    Ok(gpu.bind(&p, &[result.as_entire_binding()]))
}

/// Peak arithmetic: 8 vec4 FMA chains (64 flops a step) in every
/// invocation of enough workgroups to fill any GPU.
fn peak(gpu: &Bench, out: &mut Probe, half: bool, quick: bool) -> R<()> {
    let (groups, iters, reps) = if quick { (64, 256, 3) } else { (8192, 4096, 5) };
    let t = gpu.best(&fma(gpu, half, 256, iters, groups)?, (groups, 1), reps)?;
    let ty = if half { "f16" } else { "f32" };
    let how = format!(
        "micro-benchmark: {groups} workgroups of 256 invocations, each 8 independent vec4<{ty}> \
         fma chains of {iters} steps (2 flops a lane a step), flops / time, best of {reps}, {}",
        gpu.clock
    );
    let gflops = groups as f64 * 256.0 * iters as f64 * 64.0 / t / 1e9;
    out.set(
        ["peak_f32_gflops", "peak_f16_gflops"][half as usize],
        gflops,
        how,
    );
    Ok(())
}

/// ArchProbe's unit count: a workgroup of fixed FMA work keeps one unit
/// busy, so time holds while each new workgroup finds an idle unit and
/// steps up once two must share one. The step must hold at the next count
/// too, and twice the units must take twice the time.
fn compute_units(gpu: &Bench, out: &mut Probe, quick: bool) -> R<()> {
    let wg = gpu.limits.max_compute_invocations_per_workgroup.min(1024);
    let (most, iters, reps) = (if quick { 64 } else { 1024 }, 1024, 3);
    let kernel = fma(gpu, false, wg, iters, 2 * most + 1)?;
    let t = |n: u32| gpu.best(&kernel, (n, 1), reps);
    let t1 = t(1)?;
    let (mut n, mut last) = (2, t1);
    while n <= most {
        last = t(n)?;
        if last > 1.5 * t1 && t(n + 1)? > 1.5 * t1 {
            let units = n - 1;
            let double = t(2 * units)? / t1;
            let how = format!(
                "micro-benchmark (ArchProbe): 1, 2, 3, ... workgroups of {wg} invocations, each 8 \
                 vec4 fma chains of {iters} steps, best of {reps}; the count before time first \
                 exceeds 1.5x that of one workgroup ({:.0} us), {} workgroups taking {double:.2}x, {}",
                t1 * 1e6,
                2 * units,
                gpu.clock
            );
            if (1.5..2.5).contains(&double) {
                out.set("compute_units", units as f64, how);
                return Ok(());
            }
            break;
        }
        n += 1;
    }
    // No clean step: estimate how many workgroups run at once from the
    // throughput of the last count swept.
    let n = n.min(most);
    let units = (n as f64 * t1 / last).round().max(1.0);
    let how = format!(
        "estimate: {n} workgroups of {wg} fma invocations did {units:.0}x the work of one in the \
         same time (the sweep 1..{n} showed no clean step, so a concurrency, not a count)"
    );
    out.set("compute_units", units, how);
    Ok(())
}

/// The subgroup size kernels get, or the adapter's smallest.
fn subgroup(gpu: &Bench, out: &mut Probe, info: &wgpu::AdapterInfo) -> R<()> {
    let (lo, hi) = (info.subgroup_min_size, info.subgroup_max_size);
    if !gpu.features.contains(wgpu::Features::SUBGROUP) {
        let how = format!("queried: adapter subgroup_min_size (max {hi}); no SUBGROUP feature");
        out.set("subgroup_size", lo as f64, how);
        return Ok(());
    }
    let sizes = gpu.storage(8);
    gpu.queue.write_buffer(&sizes, 0, &bytes(&[u32::MAX, 0]));
    let p = gpu.pipeline(SUBGROUP, &[])?;
    gpu.time(&gpu.bind(&p, &[sizes.as_entire_binding()]), (1, 1))?;
    let b = gpu.read(&sizes)?;
    let word = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
    let how = format!(
        "measured: the smallest subgroup_size builtin in a 256-invocation workgroup (largest {}); \
         the adapter reports {lo}..{hi}",
        word(4)
    );
    out.set("subgroup_size", word(0) as f64, how);
    Ok(())
}

/// Shuffles with a xorshift generator: rings need an order, not quality.
fn shuffle<T>(v: &mut [T], seed: &mut u64) {
    for i in (1..v.len()).rev() {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        v.swap(i, (*seed % (i as u64 + 1)) as usize);
    }
}

/// A ring over `size` bytes: a u32 element every `stride` bytes, holding
/// the index of the next. Blocks of `block` bytes come in random order and
/// so do the elements inside each, which defeats stride prefetchers.
/// Returns the words and the number of elements.
fn ring(size: u64, stride: u64, block: u64, seed: &mut u64) -> (Vec<u32>, u32) {
    let mut blocks: Vec<u64> = (0..size / block).collect();
    shuffle(&mut blocks, seed);
    let mut order = Vec::new();
    for b in blocks {
        let start = order.len();
        order.extend((0..block / stride).map(|k| ((b * block + k * stride) / 4) as u32));
        shuffle(&mut order[start..], seed);
    }
    let mut words = vec![0u32; (size / 4) as usize];
    for (k, &e) in order.iter().enumerate() {
        words[e as usize] = order[(k + 1) % order.len()];
    }
    (words, order.len() as u32)
}

/// Footprints 1 KiB, 1.5 KiB, 2 KiB, 3 KiB, ... up to `max`.
fn footprints(max: u64) -> Vec<u64> {
    let all = (10..40).flat_map(|k| [1u64 << k, 3 << (k - 1)]);
    all.filter(|&f| f <= max).collect()
}

/// The cache levels of a latency curve (footprint, ns), each as its size
/// and latency (the median of its footprints). A level is left where the
/// next two footprints both take over 1.3x its latency, and its size is
/// the last footprint within 1.1x; the next level starts where the curve
/// flattens again (a rise under 10% a step).
fn levels(curve: &[(u64, f64)]) -> Vec<(u64, f64)> {
    let mut out = Vec::new();
    let (mut start, mut i) = (0, 1);
    while i < curve.len() {
        let mut level: Vec<f64> = curve[start..i].iter().map(|c| c.1).collect();
        level.sort_by(f64::total_cmp);
        let base = level[level.len() / 2];
        let beyond = |j: usize| curve.get(j).is_some_and(|c| c.1 > 1.3 * base);
        if !(beyond(i) && beyond(i + 1)) {
            i += 1;
            continue;
        }
        let end = (start..i).rev().find(|&j| curve[j].1 <= 1.1 * base);
        out.push((curve[end.unwrap_or(start)].0, base));
        while i + 1 < curve.len() && curve[i + 1].1 > 1.1 * curve[i].1 {
            i += 1;
        }
        (start, i) = (i, i + 1);
    }
    out
}

/// The line size in a stride curve (stride, ns): below the line a miss
/// is shared by the strides within a line, so latency rises with the
/// stride until the line and then holds (or falls, once the lines touched
/// fit a smaller cache). The line is the smallest stride that rises 70% of
/// the way from the first latency to the plateau (the second-highest), if
/// the rise is 1.25x, the highest point tops the plateau by under 20%
/// and the curve holds after it.
fn line(curve: &[(u64, f64)]) -> Option<u64> {
    let mut sorted: Vec<f64> = curve.iter().map(|c| c.1).collect();
    sorted.sort_by(f64::total_cmp);
    let (first, max) = (curve.first()?.1, *sorted.last()?);
    let top = sorted[sorted.len().checked_sub(2)?];
    let at = curve
        .iter()
        .position(|c| c.1 - first >= 0.7 * (top - first))?;
    let clear = top >= 1.25 * first && max <= 1.2 * top && at + 1 < curve.len();
    clear.then_some(curve[at].0)
}

/// Caches by pointer chasing, ArchProbe's way: latency against footprint
/// through buffers (sizes) and a texture (whether buffers see the first
/// level), then latency against stride just beyond each level (lines).
fn caches(gpu: &Bench, out: &mut Probe, quick: bool) -> R<()> {
    let (max, steps, reps, far) = match quick {
        true => (6u64 << 20, 1 << 17, 5, 4u64 << 20),
        false => (96 << 20, 1 << 13, 3, 16 << 20),
    };
    let max = max.min(gpu.limits.max_storage_buffer_binding_size);
    let uniform = wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST;
    let (count, result) = (buffer(&gpu.device, 16, uniform), gpu.storage(16));
    // Nanoseconds an access, as the difference of runs of `run` and
    // `2 * run` steps, at least a lap of the `lap`-element ring each, so
    // the second run's extra steps find the caches warm and launch costs
    // cancel. Short and long runs alternate, so a slow spell slows both.
    let chase = |p: &wgpu::ComputePipeline, ring: wgpu::BindingResource, lap: u32| {
        let kernel = gpu.bind(
            p,
            &[ring, result.as_entire_binding(), count.as_entire_binding()],
        );
        let run = steps.max(lap).next_multiple_of(32);
        let t = |n: u32| {
            let words = [n / 32, 0, 0, 0];
            gpu.queue.write_buffer(&count, 0, &bytes(&words));
            Ok::<_, String>(gpu.time(&kernel, (1, 1))?.0)
        };
        let (mut short, mut long) = (f64::MAX, f64::MAX);
        for _ in 0..reps {
            short = short.min(t(run)?);
            long = long.min(t(2 * run)?);
        }
        Ok::<_, String>((long - short) / run as f64 * 1e9)
    };
    let (p, ring_buffer) = (gpu.pipeline(CHASE, &[])?, gpu.storage(max));
    let mut seed = 0x9e37_79b9_7f4a_7c15;
    let sweep = |size: u64, stride: u64, block: u64, seed: &mut u64| {
        let (words, n) = ring(size, stride, block, seed);
        gpu.queue.write_buffer(&ring_buffer, 0, &bytes(&words));
        chase(&p, ring_buffer.as_entire_binding(), n)
    };
    let mut curve = Vec::new();
    for f in footprints(max) {
        curve.push((f, sweep(f, 64, 64, &mut seed)?));
    }
    let found = levels(&curve);
    let seen: Vec<String> = found
        .iter()
        .map(|(s, ns)| format!("{} ({ns:.1} ns)", kib(*s)))
        .collect();
    let how = format!(
        "micro-benchmark: pointer chase by one invocation through a random ring of u32 elements \
         64 B apart, footprints 1 KiB..{} at x1.5/x2 steps; ns an access = (time of 2N accesses - \
         time of N) / N, N = max({steps}, one lap), best of {reps}, {}; a level is left where the \
         next two footprints take over 1.3x its median latency, its size the last footprint \
         within 1.1x; levels: {}",
        kib(max),
        gpu.clock,
        seen.join(", ")
    );
    let fields = [("l1_bytes", "l1_line_bytes"), ("l2_bytes", "l2_line_bytes")];
    for (k, (size_field, line_field)) in fields.into_iter().enumerate() {
        let Some(&(size, _)) = found.get(k) else {
            out.miss(
                size_field,
                format!("no level {} in the chase {curve:.1?}", k + 1),
            );
            out.miss(line_field, format!("needs {size_field}"));
            continue;
        };
        out.set(
            size_field,
            size as f64,
            format!("{how}; this is level {}", k + 1),
        );
        // Latency against stride just beyond the level, 4 KiB blocks in
        // random order: a miss costs the next level once a line.
        let beyond = (4 * size).next_multiple_of(4096);
        if beyond > far.min(max) {
            let why = format!(
                "a chase over 4x {size_field} ({}) is past the budget",
                kib(beyond)
            );
            out.miss(line_field, why);
            continue;
        }
        let mut strides = Vec::new();
        for s in (3..10).map(|k| 1u64 << k) {
            strides.push((s, sweep(beyond, s, 4096, &mut seed)?));
        }
        let Some(l) = line(&strides) else {
            out.miss(
                line_field,
                format!("no clear step in the stride sweep {strides:.1?}"),
            );
            continue;
        };
        let how = format!(
            "micro-benchmark: pointer chase over {} (4x {size_field}) by strides 8..512 B, 4 KiB \
             blocks in random order, best of {reps}; the smallest stride whose latency rises 70% \
             of the way to the plateau (the miss granularity: a line, or a sector of one), ns by \
             stride {strides:.1?}",
            kib(beyond)
        );
        out.set(line_field, l as f64, how);
    }
    // Buffers use the first level if it is no larger than the texture
    // path's first level (2x allowed for the coarse footprint steps). The
    // texture ring takes every texel, so that its tiling does not matter;
    // a texel holds the next one's coordinates.
    let Some(&(l1, _)) = found.first() else {
        let why = "assumed true: the buffer chase showed no level to compare with the texture path";
        out.set("l1_serves_buffers", 1.0, why);
        return Ok(());
    };
    let p = gpu.pipeline(TEXTURE_CHASE, &[])?;
    let mut tcurve = Vec::new();
    for f in footprints(4 * l1) {
        let (words, texels) = ring(f, 8, 8, &mut seed);
        // Rows of a power of two that divides the ring, at most 256 wide,
        // so every texel the ring names is inside the texture.
        let width = (0..=8u32)
            .rev()
            .map(|k| 1u32 << k)
            .find(|w| texels % w == 0)
            .unwrap_or(1);
        let at = |w: &[u32]| [w[0] / 2 % width, w[0] / 2 / width];
        let data: Vec<u32> = words.chunks(2).flat_map(at).collect();
        let texture = gpu.texture(width, texels / width, wgpu::TextureFormat::Rg32Uint);
        let layout = wgpu::TexelCopyBufferLayout {
            bytes_per_row: Some(width * 8),
            ..Default::default()
        };
        let to = texture.as_image_copy();
        gpu.queue
            .write_texture(to, &bytes(&data), layout, texture.size());
        let view = texture.create_view(&Default::default());
        let ring = wgpu::BindingResource::TextureView(&view);
        tcurve.push((f, chase(&p, ring, texels)?));
    }
    let tex = levels(&tcurve).first().map(|l| l.0);
    let serves = tex.is_none_or(|t| l1 <= 2 * t);
    let tex = tex.map_or(format!("none up to {}", kib(4 * l1)), kib);
    let how = format!(
        "micro-benchmark: the buffer chase's first level ({}) against the same chase through an \
         rg32uint texture by textureLoad, whose first level is {tex}; true if the buffer's is at \
         most 2x the texture's",
        kib(l1)
    );
    out.set("l1_serves_buffers", serves as u8 as f64, how);
    Ok(())
}

/// Opens the first adapter as the project's runtime does (Vulkan unless
/// `WGPU_BACKEND` says otherwise) and measures a device profile. The full
/// sizes are a GPU's (an H100 takes about 15 s); `quick` is for lavapipe
/// (about 1.3 s on two cores), whose loop limit the full chase exceeds.
pub fn probe(quick: bool) -> R<Probe> {
    let (gpu, adapter) = Bench::open()?;
    let info = adapter.get_info();
    let (vendor, vendor_name) = match info.vendor {
        0x10de => ("nvidia", "NVIDIA"),
        0x1002 => ("amd", "AMD"),
        0x8086 => ("intel", "Intel"),
        0x13b5 => ("arm", "Arm"),
        0x5143 => ("qualcomm", "Qualcomm"),
        0x106b => ("apple", "Apple"),
        0x10005 => ("mesa", "Mesa"),
        _ => ("unknown", "not one the probe names"),
    };
    let formats = [
        (wgpu::TextureFormat::Rgba32Float, "rgba32f"),
        (wgpu::TextureFormat::Rgba16Float, "rgba16f"),
        (wgpu::TextureFormat::Rgba8Unorm, "rgba8"),
    ];
    let usable = |f: &&(wgpu::TextureFormat, &str)| {
        let features = adapter.get_texture_format_features(f.0);
        let write = wgpu::TextureFormatFeatureFlags::STORAGE_WRITE_ONLY
            | wgpu::TextureFormatFeatureFlags::STORAGE_READ_WRITE;
        let usage = wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::STORAGE_BINDING;
        features.allowed_usages.contains(usage) && features.flags.intersects(write)
    };
    let mut out = Probe {
        adapter: info.name.clone(),
        driver: format!("{} {}", info.driver, info.driver_info),
        vendor: vendor.into(),
        vendor_method: format!(
            "queried: adapter vendor ID {:#x} ({vendor_name})",
            info.vendor
        ),
        figures: BTreeMap::new(),
        missing: BTreeMap::new(),
        texture_formats: formats.iter().filter(usable).map(|f| f.1.into()).collect(),
        formats_method: "queried: adapter format features allow TEXTURE_BINDING (textureLoad) \
                         and a writable STORAGE_BINDING, of Rgba32Float, Rgba16Float, Rgba8Unorm"
            .into(),
        cooperative_matrix: crate::runtime::cooperative_matrices(&adapter),
    };
    macro_rules! queried {
        ($field:literal, $limit:ident) => {
            let how = concat!("queried: adapter limit ", stringify!($limit));
            out.set($field, gpu.limits.$limit as f64, how);
        };
    }
    queried!(
        "max_workgroup_invocations",
        max_compute_invocations_per_workgroup
    );
    queried!("local_memory_bytes", max_compute_workgroup_storage_size);
    queried!("max_texture_extent", max_texture_dimension_2d);
    queried!("max_storage_buffers", max_storage_buffers_per_shader_stage);
    subgroup(&gpu, &mut out, &info)?;
    bandwidth(&gpu, &mut out, quick)?;
    load_width(&gpu, &mut out, quick)?;
    peak(&gpu, &mut out, false, quick)?;
    match gpu.features.contains(wgpu::Features::SHADER_F16) {
        true => peak(&gpu, &mut out, true, quick)?,
        false => out.miss("peak_f16_gflops", "the adapter has no SHADER_F16"),
    }
    compute_units(&gpu, &mut out, quick)?;
    caches(&gpu, &mut out, quick)?;
    let why = "assumed true: WGSL cannot see how a scalar operand of vector arithmetic is issued";
    out.set("autobroadcast", 1.0, why);
    let why = "peak / (2 x clock x units) needs a clock, which Vulkan does not report";
    out.miss("alus_per_unit", why);
    out.miss("registers_per_unit", "not measured");
    Ok(out)
}

fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

impl Probe {
    /// The profile as `spec/devices/NAME.toml` holds it: each value after a
    /// `# method:` line, each figure left out named in `unknown` with why.
    pub fn to_profile_toml(&self, name: &str) -> String {
        let line = |s: &str| s.replace(['\n', '\r'], " ");
        let (adapter, driver) = (line(&self.adapter), line(&self.driver));
        let mut out = format!(
            "# Device profile measured by the device probe (ArchProbe's method) on {adapter}, \
             driver {driver}.\n\n# method: the name given to the probe\nname = {}\n\n\
             # method: {}\nvendor = {}\n\n",
            quoted(name),
            line(&self.vendor_method),
            quoted(&self.vendor)
        );
        let mut unknown = Vec::new();
        for field in FIELDS.split_whitespace() {
            let Some(f) = self.figures.get(field) else {
                let why = self.missing.get(field).map_or("not measured", |w| w);
                out += &format!("# {field}: left out ({})\n\n", line(why));
                unknown.push(quoted(field));
                continue;
            };
            let value = match field {
                _ if FLAGS.contains(&field) => (f.value != 0.0).to_string(),
                _ if field.ends_with("_gbs") || field.ends_with("_gflops") => {
                    format!("{:.1}", f.value)
                }
                _ => format!("{}", f.value.round() as u64),
            };
            out += &format!("# method: {}\n{field} = {value}\n\n", line(&f.method));
        }
        let formats: Vec<String> = self.texture_formats.iter().map(|f| quoted(f)).collect();
        if formats.is_empty() {
            unknown.push(quoted("texture_formats"));
        }
        let (how, formats) = (line(&self.formats_method), formats.join(", "));
        out += &format!("# method: {how}\ntexture_formats = [{formats}]\n\n");
        if !self.cooperative_matrix.is_empty() {
            let configs: Vec<String> = self
                .cooperative_matrix
                .iter()
                .map(|c| {
                    format!(
                        "{{ m = {}, n = {}, k = {}, operands = {}, accumulator = {} }}",
                        c.m,
                        c.n,
                        c.k,
                        quoted(&c.operands),
                        quoted(&c.accumulator)
                    )
                })
                .collect();
            out += &format!(
                "# method: queried: the adapter's cooperative-matrix properties (VK_KHR_cooperative_matrix) \
                 of float operands\ncooperative_matrix = [{}]\n\n",
                configs.join(", ")
            );
        }
        let unknown = unknown.join(", ");
        out + &format!(
            "# The optional figures the probe could not determine.\nunknown = [{unknown}]\n"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line of a profile is a comment, blank, or a value after a
    /// `# method:` line.
    fn every_value_has_a_method(text: &str) {
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if !l.is_empty() && !l.starts_with('#') && !l.starts_with("unknown") {
                assert!(lines[i - 1].starts_with("# method: "), "no method for {l}");
            }
        }
    }

    #[test]
    fn a_partial_probe_reads_as_a_profile() {
        let fig = |value: f64, method: &str| Figure {
            value,
            method: method.to_string(),
        };
        let figures = BTreeMap::from([
            ("compute_units", fig(2.0, "a\nsplit line")),
            ("subgroup_size", fig(8.0, "b")),
            ("memory_bandwidth_gbs", fig(22.25, "c")),
            ("l1_bytes", fig(32768.0, "d")),
            ("l1_serves_buffers", fig(0.0, "e")),
            ("autobroadcast", fig(1.0, "f")),
        ]);
        let p = Probe {
            adapter: "x \"quoted\"".into(),
            driver: "y".into(),
            vendor: "mesa".into(),
            vendor_method: "g".into(),
            figures,
            missing: BTreeMap::from([("l2_bytes", "no level".to_string())]),
            texture_formats: vec![],
            formats_method: "h".into(),
            cooperative_matrix: vec![ircc_dialects::kernel::CooperativeMatrix::f16_f32(16)],
        };
        let text = p.to_profile_toml("lava\"pipe");
        every_value_has_a_method(&text);
        let profile = ircc_dialects::kernel::DeviceProfile::parse(&text).unwrap();
        assert_eq!(profile.name, "lava\"pipe");
        assert_eq!((profile.compute_units, profile.l1_bytes), (2, Some(32768)));
        assert_eq!(profile.memory_bandwidth_gbs, 22.2);
        assert!(!profile.l1_serves_buffers && profile.autobroadcast);
        assert_eq!(profile.unknown.len(), 14);
        assert!(text.contains("# l2_bytes: left out (no level)"));
        assert_eq!(profile.cooperative_matrix, p.cooperative_matrix);
    }

    /// A curve over footprints or strides 1, 2, 4, ...
    fn curve(ns: &[f64]) -> Vec<(u64, f64)> {
        (0..).zip(ns).map(|(k, &ns)| (1 << k, ns)).collect()
    }

    #[test]
    fn levels_end_where_latency_jumps_and_settles() {
        let found = levels(&curve(&[2.0, 2.1, 2.0, 5.0, 9.0, 9.5, 30.0, 31.0]));
        assert_eq!(found, vec![(4, 2.0), (32, 9.5)]);
        // One noisy point is not a level, nor is a rise at the sweep's end.
        assert!(levels(&curve(&[2.0, 4.0, 2.0, 2.1, 9.0])).is_empty());
    }

    #[test]
    fn a_line_is_where_the_stride_curve_flattens() {
        assert_eq!(line(&curve(&[1.2, 1.6, 2.4, 4.0, 4.1, 4.0])), Some(8));
        assert_eq!(line(&curve(&[1.0, 1.05, 1.1])), None);
        assert_eq!(line(&curve(&[1.0, 2.0, 4.0])), None);
        assert_eq!(line(&curve(&[1.0, 2.0, 4.0, 4.0, 1.0])), Some(4));
    }

    #[test]
    fn a_ring_visits_every_element_once() {
        let (words, n) = ring(16384, 64, 4096, &mut 7);
        let (mut i, mut seen) = (0, std::collections::HashSet::new());
        while seen.insert(i) {
            i = words[i] as usize;
        }
        assert_eq!((n, seen.len(), i), (256, 256, 0));
    }
}
