// ircc's bundle runtime for WebGPU in the browser (spec/plan.md): an ES
// module without dependencies.
//
//   import * as ircc from "./ircc.js";
//   const model = await ircc.load("bundles/swin/");
//   const outputs = await model.run({ input: new Float32Array(3 * 224 * 224) });
//
// `load` fetches plan.json, weights.safetensors and the WGSL modules, checks
// them as `ircc run DIR` does (`Plan::check`) before allocating anything,
// and creates every buffer, pipeline and bind group once; `run` writes the
// inputs, submits the plan's dispatches in chunks as it encodes them (as
// `ircc run` does: the GPU starts on the first while the rest are encoded)
// and reads the outputs back, allocating no GPU object.

/** Dispatches in a run's first submission (ircc_plan::FIRST_CHUNK). */
const FIRST_CHUNK = 4;

/**
 * The exclusive end of each chunk a run of `count` dispatches is submitted
 * in, as ircc_plan::submission_ends gives them: FIRST_CHUNK, then each
 * chunk twice the one before, the last ending at `count` ([0] for none).
 * @param {number} count
 * @returns {number[]}
 */
export function submissionEnds(count) {
  const ends = [Math.min(FIRST_CHUNK, count)];
  while (ends[ends.length - 1] < count) ends.push(Math.min(2 * ends[ends.length - 1] + FIRST_CHUNK, count));
  return ends;
}

/** Bytes a dtype's element takes in memory (spec/plan.md). */
const DTYPE_BYTES = { f32: 4, f16: 2, i32: 4, i8: 1, ui8: 1 };
/** safetensors' name of each dtype. */
const SAFETENSORS_DTYPE = { f32: "F32", f16: "F16", i32: "I32", i8: "I8", ui8: "U8" };
const KINDS = ["input", "weight", "constant", "intermediate", "texture", "output"];
const FLOATS = ["f64", "f32", "f16", "bf16"];
const ELEMS = [...FLOATS, "i64", "i32", "i16", "i8", "i4", "i2", "ui64", "ui32", "ui16", "ui8", "ui4", "ui2", "i1"];
/** The access each kind of buffer may be bound with. */
const ACCESS = {
  input: "read", weight: "read", constant: "read",
  intermediate: "read_write", output: "read_write", texture: "texture|storage_texture",
};
const TEXEL_FORMAT = { rgba32f: "rgba32float", rgba16f: "rgba16float" };
/** The largest text file read (`--max-source-bytes`' default). */
const MAX_SOURCE_BYTES = 16 << 20;
/**
 * Bounds on what a bundle from elsewhere may ask for, as `ircc run DIR`
 * has (`--max-bytes`, `--max-invocations`): its buffers' bytes and the
 * invocations of all its dispatches together.
 */
export const LIMITS = { maxBytes: 16 * 2 ** 30, maxInvocations: 2 ** 34 };
/** Weights-file bytes allowed beyond its tensors (header, alignment). */
const WEIGHTS_SLACK = 256 << 20;
/** Control characters but tab and line ends (and C1 controls). */
const CONTROL = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]/;

/** A value from a file, quoted for a message whatever it is. */
const show = (v) => {
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return "a value";
  }
};

/** A bundle that cannot run here: `where` names the file or field. */
export class BundleError extends Error {
  constructor(where, what) {
    super(`${where}: ${what}`);
    this.name = "BundleError";
  }
}

/**
 * Loads the bundle at `baseUrl` (a folder URL, ending in '/') onto a WebGPU
 * device: the given one, or one requested from `navigator.gpu` with the
 * features and limits the bundle needs.
 * @param {string} baseUrl
 * @param {{device?: GPUDevice, fetch?: typeof fetch}} [options]
 * @returns {Promise<Model>}
 */
export async function load(baseUrl, options = {}) {
  const get = options.fetch ?? fetch;
  const base = new URL(baseUrl, globalThis.location?.href);
  base.search = "";
  base.hash = "";
  if (!base.pathname.endsWith("/")) base.pathname += "/";
  const fetched = async (name, as, limit) => {
    let bytes;
    try {
      const url = new URL(name, base);
      if (!url.href.startsWith(base.href) || url.href === base.href) {
        throw new BundleError(name, "is not a file in the bundle's folder");
      }
      const response = await get(url);
      if (!response.ok) throw new BundleError(name, `cannot be fetched: HTTP ${response.status}`);
      const length = Number(response.headers?.get("content-length") ?? NaN);
      if (length > limit) throw new BundleError(name, `${length} bytes, over the ${limit} it may have`);
      bytes = new Uint8Array(await response.arrayBuffer());
    } catch (e) {
      if (e instanceof BundleError) throw e;
      throw new BundleError(name, `cannot be fetched: ${e.message}`);
    }
    if (bytes.length > limit) throw new BundleError(name, `${bytes.length} bytes, over the ${limit} it may have`);
    if (as === "bytes") return bytes;
    let text;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    } catch {
      throw new BundleError(name, "is not UTF-8 text");
    }
    if (CONTROL.test(text)) throw new BundleError(name, "holds control characters");
    return text;
  };
  let plan;
  try {
    plan = JSON.parse(await fetched("plan.json", "text", MAX_SOURCE_BYTES));
  } catch (e) {
    if (e instanceof BundleError) throw e;
    throw new BundleError("plan.json", `not JSON: ${e.message}`);
  }
  checkPlan(plan);
  const weights = plan.weights ?? "weights.safetensors";
  const stored = plan.buffers.filter((b) => b.kind === "weight" || b.kind === "constant");
  const needed = stored.reduce((n, b) => n + b.bytes, 0);
  const tensors = stored.length
    ? readSafetensors(await fetched(weights, "bytes", needed + WEIGHTS_SLACK), weights)
    : new Map();
  checkWeights(plan, tensors);
  const sources = new Map();
  for (const d of plan.dispatches) {
    if (!sources.has(d.shader)) sources.set(d.shader, await fetched(d.shader, "text", MAX_SOURCE_BYTES));
  }
  const needs = webgpuNeeds(plan, [...sources.values()]);
  // As ircc's reader: null is no field, and an empty `unavailable` none.
  const said = plan.webgpu === null ? undefined : plan.webgpu;
  if (said !== undefined) {
    const { unavailable, ...rest } = said ?? {};
    const stated = Array.isArray(unavailable) && unavailable.length === 0 ? rest : said;
    if (canonical(stated) !== canonical(needs)) {
      throw new BundleError("plan.json: webgpu", `says the plan needs ${canonical(said)}; its dispatches and shaders need ${canonical(needs)}`);
    }
  }
  const device = options.device ?? (await requestDevice(needs));
  device.pushErrorScope("out-of-memory");
  device.pushErrorScope("validation");
  let model;
  try {
    model = new Model(device, plan, tensors, sources);
    for (const [name, module] of model.modules) {
      const errors = (await module.getCompilationInfo()).messages.filter((m) => m.type === "error");
      if (errors.length) throw new BundleError(name, `line ${errors[0].lineNum}: ${errors[0].message}`);
    }
  } finally {
    const invalid = await device.popErrorScope();
    const memory = await device.popErrorScope();
    if (invalid ?? memory) throw new BundleError("WebGPU", (invalid ?? memory).message);
  }
  return model;
}

/**
 * Checks what `Plan::check` checks before anything is allocated; throws a
 * BundleError naming the field.
 */
export function checkPlan(plan) {
  const fail = (where, what) => {
    throw new BundleError(`plan.json: ${where}`, what);
  };
  const only = (where, object, allowed) => {
    if (typeof object !== "object" || object === null || Array.isArray(object)) fail(where, "not an object");
    for (const key of Object.keys(object)) {
      if (!allowed.includes(key)) fail(where, `unknown field '${key}'`);
    }
  };
  const count = (where, v) => {
    if (!Number.isSafeInteger(v) || v < 0) fail(where, `${JSON.stringify(v)} is not a count`);
    return v;
  };
  if (typeof plan !== "object" || plan === null) fail("the plan", "not an object");
  if (plan.version !== 1) fail("version", `version ${show(plan.version)} of the plan format; this runtime reads version 1`);
  only("the plan", plan, ["version", "language", "weights", "precision", "target", "webgpu", "pool_bytes",
    "buffers", "inputs", "outputs", "output_names", "dispatches"]);
  // No string holds a control character, even escaped: names are echoed.
  const strings = (where, v) => {
    if (typeof v === "string" && CONTROL.test(v)) fail(where, "a string holds a control character");
    if (typeof v === "object" && v !== null) for (const [k, w] of Object.entries(v)) strings(`${where}.${k}`, w);
  };
  strings("plan", plan);
  if (plan.language !== "wgsl") fail("language", `${show(plan.language)}: the browser runs WGSL bundles only`);
  if (plan.precision !== "f32" && plan.precision !== "f16") fail("precision", `${show(plan.precision)} is neither f32 nor f16`);
  if (plan.weights !== undefined && typeof plan.weights !== "string") fail("weights", "not a file name");
  count("pool_bytes", plan.pool_bytes);
  for (const key of ["buffers", "inputs", "outputs", "output_names", "dispatches"]) {
    if (!Array.isArray(plan[key])) fail(key, "not a list");
  }
  plan.buffers.forEach((b, i) => {
    const at = `buffers[${i}]`;
    only(at, b, ["id", "name", "kind", "shape", "dtype", "elem", "bytes", "pool_offset", "tensor", "texels", "texel_format"]);
    if (b.id !== i) fail(`${at}.id`, `${b.id}, where the buffer's place is ${i}`);
    if (typeof b.name !== "string") fail(`${at}.name`, "not a string");
    if (!KINDS.includes(b.kind)) fail(`${at}.kind`, `unknown kind ${show(b.kind)}`);
    if (!ELEMS.includes(b.elem)) fail(`${at}.elem`, `unknown element type ${show(b.elem)}`);
    const dtype = storage(b.elem, plan.precision, b.kind);
    if (b.dtype !== dtype) fail(`${at}.dtype`, `${show(b.dtype)}, where ${b.elem} in a buffer of kind ${b.kind} is stored as ${dtype}`);
    if (!Array.isArray(b.shape)) fail(`${at}.shape`, "not a list");
    const elements = b.shape.reduce((n, d, k) => n * count(`${at}.shape[${k}]`, d), 1);
    const size = DTYPE_BYTES[b.dtype];
    const expect = size === 1 ? Math.ceil(Math.max(elements, 1) / 4) * 4 : Math.max(elements, 1) * size;
    const bytes = count(`${at}.bytes`, b.bytes);
    if (bytes !== expect) fail(`${at}.bytes`, `${bytes}, where its shape and dtype take ${expect}`);
    if (b.kind === "intermediate") {
      const offset = count(`${at}.pool_offset`, b.pool_offset);
      if (offset % 256 !== 0) fail(`${at}.pool_offset`, `${offset} is not a multiple of 256`);
      if (offset + bytes > plan.pool_bytes) fail(`${at}.pool_offset`, `the tensor ends at ${offset + bytes}, past the pool's ${plan.pool_bytes} bytes`);
    } else if (b.pool_offset !== undefined) {
      fail(`${at}.pool_offset`, `given for a buffer of kind ${b.kind}`);
    }
    if ((b.kind === "weight" || b.kind === "constant") !== (typeof b.tensor === "string")) {
      fail(`${at}.tensor`, b.tensor === undefined ? "missing" : `given for a buffer of kind ${b.kind}`);
    }
    if (b.kind === "texture") {
      if (!Array.isArray(b.texels) || b.texels.length !== 2) fail(`${at}.texels`, "not [width, height]");
      b.texels.forEach((t, k) => {
        if (count(`${at}.texels[${k}]`, t) < 1) fail(`${at}.texels[${k}]`, "zero");
      });
      const format = { f32: "rgba32f", f16: "rgba16f" }[b.dtype];
      if (b.texel_format !== format) fail(`${at}.texel_format`, `${show(b.texel_format)}, where a texture of ${b.dtype} is ${format}`);
    } else if (b.texels !== undefined || b.texel_format !== undefined) {
      fail(`${at}.texels`, `given for a buffer of kind ${b.kind}`);
    }
  });
  const kind = (list, i, wanted) => {
    const id = plan[list][i];
    const b = Number.isSafeInteger(id) ? plan.buffers[id] : undefined;
    if (!b || b.kind !== wanted) fail(`${list}[${i}]`, `${JSON.stringify(id)} is not a buffer of kind ${wanted}`);
    return id;
  };
  const inputs = plan.inputs.map((_, i) => kind("inputs", i, "input"));
  if (new Set(inputs).size !== inputs.length) fail("inputs", "names a buffer twice");
  if (inputs.length !== plan.buffers.filter((b) => b.kind === "input").length) fail("inputs", "does not name every input buffer");
  plan.outputs.forEach((_, i) => kind("outputs", i, "output"));
  if (plan.output_names.length !== plan.outputs.length) fail("output_names", `${plan.output_names.length} names for ${plan.outputs.length} outputs`);
  plan.output_names.forEach((n, i) => {
    if (typeof n !== "string") fail(`output_names[${i}]`, "not a string");
  });
  const bytes = plan.pool_bytes + plan.buffers.reduce((n, b) => n + (b.kind === "intermediate" ? 0 : b.bytes), 0);
  if (bytes > LIMITS.maxBytes) fail("buffers", `${bytes} bytes in all, over the ${LIMITS.maxBytes} a bundle may allocate (ircc.LIMITS)`);
  let invocations = 0;
  plan.dispatches.forEach((d, i) => {
    const at = `dispatches[${i}]`;
    only(at, d, ["kernel", "shader", "entry", "template", "workgroup_size", "workgroups", "bindings"]);
    for (const key of ["kernel", "shader", "entry", "template"]) {
      if (typeof d[key] !== "string") fail(`${at}.${key}`, "not a string");
    }
    if (d.shader === "" || d.shader.includes("/") || d.shader.includes("\\") || d.shader.startsWith(".")) {
      fail(`${at}.shader`, `${show(d.shader)} is not a file in the bundle's folder`);
    }
    if (d.entry !== "main") fail(`${at}.entry`, `${show(d.entry)}: a WGSL module's entry point is main`);
    for (const key of ["workgroup_size", "workgroups"]) {
      if (!Array.isArray(d[key]) || d[key].length !== 3) fail(`${at}.${key}`, "not three sizes");
      d[key].forEach((n, k) => {
        if (count(`${at}.${key}[${k}]`, n) < 1) fail(`${at}.${key}[${k}]`, "zero");
        if (n > 0xffffffff) fail(`${at}.${key}[${k}]`, `${n} is past u32`);
      });
    }
    invocations += [...d.workgroup_size, ...d.workgroups].reduce((a, n) => a * n, 1);
    if (invocations > LIMITS.maxInvocations) {
      fail(at, `the dispatches so far run ${invocations} invocations, over the ${LIMITS.maxInvocations} a bundle may run (ircc.LIMITS)`);
    }
    if (!Array.isArray(d.bindings)) fail(`${at}.bindings`, "not a list");
    const seen = new Set();
    d.bindings.forEach((bd, k) => {
      const where = `${at}.bindings[${k}]`;
      only(where, bd, ["binding", "buffer", "access"]);
      if (count(`${where}.binding`, bd.binding) > 1000) fail(`${where}.binding`, `${bd.binding} is past WebGPU's bindings`);
      if (seen.has(bd.binding)) fail(`${where}.binding`, `binding ${bd.binding} twice`);
      seen.add(bd.binding);
      const b = plan.buffers[bd.buffer];
      if (!Number.isSafeInteger(bd.buffer) || !b) fail(`${where}.buffer`, `no buffer ${JSON.stringify(bd.buffer)}`);
      if (!ACCESS[b.kind].split("|").includes(bd.access)) fail(`${where}.access`, `${show(bd.access)} for a buffer of kind ${b.kind}`);
    });
  });
}

/** How an element type is stored (the kernel dialect's `storage`). */
function storage(elem, precision, kind) {
  if (FLOATS.includes(elem)) return precision;
  const readOnly = ["input", "weight", "constant"].includes(kind);
  if (readOnly && ["i8", "i4", "i2"].includes(elem)) return "i8";
  if (readOnly && ["ui8", "ui4", "ui2"].includes(elem)) return "ui8";
  return "i32";
}

/** Every weight and constant in the weights file, as the plan says. */
function checkWeights(plan, tensors) {
  const file = plan.weights ?? "weights.safetensors";
  for (const b of plan.buffers) {
    if (b.kind !== "weight" && b.kind !== "constant") continue;
    const t = tensors.get(b.tensor);
    const where = `${file}: tensor ${show(b.tensor)}`;
    if (!t) throw new BundleError(where, "missing");
    if (t.dtype !== SAFETENSORS_DTYPE[b.dtype]) throw new BundleError(where, `dtype ${show(t.dtype)}, where the plan says ${b.dtype}`);
    if (show(t.shape) !== show(b.shape)) throw new BundleError(where, `shape ${show(t.shape)}, where the plan says ${show(b.shape)}`);
    const elements = b.shape.reduce((n, d) => n * d, 1);
    if (t.bytes.length !== elements * DTYPE_BYTES[b.dtype]) throw new BundleError(where, `${t.bytes.length} bytes for ${elements} elements`);
  }
}

/**
 * The tensors of a safetensors file, checked: its header's length and
 * JSON, and every tensor's offsets inside the data.
 * @returns {Map<string, {dtype: string, shape: number[], bytes: Uint8Array}>}
 */
export function readSafetensors(bytes, name) {
  const fail = (what) => {
    throw new BundleError(name, what);
  };
  if (bytes.length < 8) fail(`${bytes.length} bytes, too short for a safetensors header`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const length = view.getBigUint64(0, true);
  if (length > BigInt(bytes.length - 8)) fail(`a header of ${length} bytes in a file of ${bytes.length}`);
  let header;
  try {
    header = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(8, 8 + Number(length))));
  } catch (e) {
    fail(`its header is not JSON: ${e.message}`);
  }
  if (typeof header !== "object" || header === null || Array.isArray(header)) fail("its header is not an object");
  const data = bytes.subarray(8 + Number(length));
  const tensors = new Map();
  for (const [key, t] of Object.entries(header)) {
    if (key === "__metadata__") continue;
    const [begin, end] = t?.data_offsets ?? [];
    if (!Number.isSafeInteger(begin) || !Number.isSafeInteger(end) || begin < 0 || end < begin || end > data.length) {
      fail(`tensor '${key}': data_offsets ${JSON.stringify(t?.data_offsets)} outside its ${data.length} bytes of data`);
    }
    tensors.set(key, { dtype: t.dtype, shape: t.shape, bytes: data.subarray(begin, end) });
  }
  return tensors;
}

/**
 * The WebGPU specification's default limits that a plan can pass: every
 * adapter gives these without being asked (backends/plan/src/webgpu.rs).
 */
export const DEFAULT_LIMITS = {
  maxStorageBuffersPerShaderStage: 8, maxStorageTexturesPerShaderStage: 4,
  maxSampledTexturesPerShaderStage: 16, maxBindingsPerBindGroup: 1000,
  maxStorageBufferBindingSize: 134217728, maxBufferSize: 268435456, maxTextureDimension2D: 8192,
  maxComputeWorkgroupSizeX: 256, maxComputeWorkgroupSizeY: 256, maxComputeWorkgroupSizeZ: 64,
  maxComputeInvocationsPerWorkgroup: 256, maxComputeWorkgroupsPerDimension: 65535,
};
/** The WGSL extensions ircc's shaders enable, and WebGPU's feature for each (none: no WebGPU device has it). */
const EXTENSIONS = [["f16", "shader-f16"], ["subgroups", "subgroups"], ["wgpu_cooperative_matrix", null]];

/**
 * What a plan asks of a WebGPU device beyond the defaults, as plan.json's
 * `webgpu` says it (spec/plan.md): the features its shaders' `enable`
 * directives need, the limits above the defaults with the values needed,
 * and the extensions no WebGPU device has.
 */
export function webgpuNeeds(plan, sources) {
  const enables = (text, name) => text.split("\n").some((line) => {
    const list = /^enable (.*);$/.exec(line.trim().replace(/\s+;$/, ";"));
    return list !== null && list[1].split(",").some((e) => e.trim() === name);
  });
  const needs = { features: [], limits: {} };
  const unavailable = [];
  for (const [extension, feature] of EXTENSIONS) {
    if (!sources.some((s) => enables(s, extension))) continue;
    if (feature) needs.features.push(feature);
    else unavailable.push(extension);
  }
  needs.features.sort();
  const most = (values) => values.reduce((a, b) => Math.max(a, b), 0);
  const ds = plan.dispatches;
  const buffers = plan.buffers.filter((b) => b.kind !== "texture");
  const bound = (accesses) => most(ds.map((d) => d.bindings.filter((b) => accesses.includes(b.access)).length));
  const wanted = {
    maxStorageBuffersPerShaderStage: bound(["read", "read_write"]),
    maxStorageTexturesPerShaderStage: bound(["storage_texture"]),
    maxSampledTexturesPerShaderStage: bound(["texture"]),
    maxBindingsPerBindGroup: most(ds.flatMap((d) => d.bindings.map((b) => b.binding + 1))),
    maxStorageBufferBindingSize: most(buffers.map((b) => b.bytes)),
    maxBufferSize: most([plan.pool_bytes, ...buffers.map((b) => b.bytes)]),
    maxTextureDimension2D: most(plan.buffers.flatMap((b) => b.texels ?? [])),
    maxComputeWorkgroupSizeX: most(ds.map((d) => d.workgroup_size[0])),
    maxComputeWorkgroupSizeY: most(ds.map((d) => d.workgroup_size[1])),
    maxComputeWorkgroupSizeZ: most(ds.map((d) => d.workgroup_size[2])),
    maxComputeInvocationsPerWorkgroup: most(ds.map((d) => d.workgroup_size.reduce((a, b) => a * b, 1))),
    maxComputeWorkgroupsPerDimension: most(ds.flatMap((d) => d.workgroups)),
  };
  for (const name of Object.keys(wanted).sort()) {
    if (wanted[name] > DEFAULT_LIMITS[name]) needs.limits[name] = wanted[name];
  }
  if (unavailable.length) needs.unavailable = unavailable;
  return needs;
}

/** JSON with each object's keys sorted, to compare two values. */
function canonical(v) {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
  if (typeof v === "object" && v !== null) {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(",")}}`;
  }
  return JSON.stringify(v);
}

/**
 * A device with what `needs` (webgpuNeeds) asks for; refused by name
 * where the adapter lacks a feature or limit.
 */
async function requestDevice(needs) {
  if (!globalThis.navigator?.gpu) throw new BundleError("WebGPU", "this browser has no navigator.gpu");
  if (needs.unavailable) {
    throw new BundleError("WebGPU", `the bundle's shaders enable ${needs.unavailable.join(", ")}, which WebGPU lacks: compile it with --device webgpu`);
  }
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) throw new BundleError("WebGPU", "no adapter");
  for (const feature of needs.features) {
    if (!adapter.features.has(feature)) throw new BundleError("WebGPU", `the adapter lacks '${feature}', which the bundle's shaders use`);
  }
  for (const [name, value] of Object.entries(needs.limits)) {
    if (value > adapter.limits[name]) {
      throw new BundleError("WebGPU", `the bundle needs ${name} ${value}; the adapter's is ${adapter.limits[name]} (WebGPU's default ${DEFAULT_LIMITS[name]}: compile with --device webgpu to stay within it)`);
    }
  }
  return adapter.requestDevice({ requiredFeatures: needs.features, requiredLimits: needs.limits });
}

/** A loaded bundle: its GPU objects, made once. */
export class Model {
  constructor(device, plan, tensors, sources) {
    this.device = device;
    this.plan = plan;
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
    const buffer = (size) =>
      device.createBuffer({ size: Math.max(4, Math.ceil(size / 4) * 4), usage });
    const pool = plan.pool_bytes > 0 ? buffer(plan.pool_bytes) : null;
    this.resources = plan.buffers.map((b) => {
      if (b.kind === "intermediate") return { buffer: pool, offset: b.pool_offset, size: Math.ceil(b.bytes / 4) * 4 };
      if (b.kind === "texture") {
        const texture = device.createTexture({
          size: b.texels, format: TEXEL_FORMAT[b.texel_format],
          usage: GPUTextureUsage.STORAGE_BINDING | GPUTextureUsage.TEXTURE_BINDING,
        });
        return { texture };
      }
      const own = buffer(b.bytes);
      if (b.kind === "weight" || b.kind === "constant") {
        // writeBuffer takes whole words: the tail is padded apart.
        const data = tensors.get(b.tensor).bytes;
        const whole = data.length - (data.length % 4);
        if (whole > 0) device.queue.writeBuffer(own, 0, data, 0, whole);
        if (whole < data.length) {
          const tail = new Uint8Array(4);
          tail.set(data.subarray(whole));
          device.queue.writeBuffer(own, whole, tail);
        }
      }
      return { buffer: own, offset: 0, size: Math.ceil(b.bytes / 4) * 4 };
    });
    this.readback = plan.outputs.map((id) => device.createBuffer({
      size: this.resources[id].size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    }));
    this.modules = new Map();
    for (const [name, code] of sources) {
      this.modules.set(name, device.createShaderModule({ label: name, code }));
    }
    this.steps = plan.dispatches.map((d) => {
      const pipeline = device.createComputePipeline({
        label: d.kernel, layout: "auto", compute: { module: this.modules.get(d.shader), entryPoint: d.entry },
      });
      const entries = d.bindings.map((bd) => {
        const r = this.resources[bd.buffer];
        const resource = r.texture ? r.texture.createView() : { buffer: r.buffer, offset: r.offset, size: r.size };
        return { binding: bd.binding, resource };
      });
      return { pipeline, group: device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries }), workgroups: d.workgroups };
    });
    this.staged = plan.inputs.map((id) => new Uint8Array(this.resources[id].size));
  }

  /**
   * Runs the model once: `inputs` maps each input's name to its elements
   * (Float32Array for floats, whatever the precision; Uint16Array of f16
   * bits where the bundle is f16; Int32Array for integers; Int8Array or
   * Uint8Array for byte dtypes). Returns each output's elements by name,
   * floats as Float32Array.
   * @param {Record<string, ArrayBufferView>} inputs
   * @returns {Promise<Record<string, Float32Array | Int32Array | Int8Array | Uint8Array>>}
   */
  run(inputs) {
    // Runs share their readback buffers: one at a time.
    const run = (this.last ?? Promise.resolve()).catch(() => {}).then(() => this.runNow(inputs));
    this.last = run;
    return run;
  }

  /** One run; `run` queues them. */
  async runNow(inputs) {
    const { plan, device } = this;
    const names = plan.inputs.map((id) => plan.buffers[id].name);
    for (const key of Object.keys(inputs)) {
      if (!names.includes(key)) throw new BundleError(`input '${key}'`, `the model has no such input (its inputs: ${names.join(", ")})`);
    }
    plan.inputs.forEach((id, i) => {
      const b = plan.buffers[id];
      const given = inputs[b.name];
      if (given === undefined) throw new BundleError(`input '${b.name}'`, "not given");
      device.queue.writeBuffer(this.resources[id].buffer, 0, encode(b, given, this.staged[i]));
    });
    device.pushErrorScope("validation");
    let error;
    try {
      this.submit();
    } finally {
      error = await device.popErrorScope();
    }
    if (error) throw new BundleError("WebGPU", error.message);
    const outputs = Object.create(null);
    for (const [i, id] of plan.outputs.entries()) {
      await this.readback[i].mapAsync(GPUMapMode.READ);
      outputs[plan.output_names[i]] = decode(plan.buffers[id], this.readback[i].getMappedRange());
      this.readback[i].unmap();
    }
    return outputs;
  }

  /**
   * Encodes the plan's dispatches, then the outputs' copies, submitting
   * each chunk (submissionEnds) as soon as it is encoded.
   */
  submit() {
    const { plan, device } = this;
    let start = 0;
    for (const end of submissionEnds(this.steps.length)) {
      const encoder = device.createCommandEncoder();
      const pass = encoder.beginComputePass();
      for (let i = start; i < end; i++) {
        const step = this.steps[i];
        pass.setPipeline(step.pipeline);
        pass.setBindGroup(0, step.group);
        pass.dispatchWorkgroups(...step.workgroups);
      }
      pass.end();
      if (end === this.steps.length) {
        plan.outputs.forEach((id, i) => {
          const r = this.resources[id];
          encoder.copyBufferToBuffer(r.buffer, r.offset, this.readback[i], 0, r.size);
        });
      }
      device.queue.submit([encoder.finish()]);
      start = end;
    }
  }

  /** `inputs`, or zeros of every input's shape and type. */
  inputsOrZeros(inputs) {
    return inputs ?? Object.fromEntries(this.plan.inputs.map((id) => {
      const b = this.plan.buffers[id];
      const n = b.shape.reduce((a, d) => a * d, 1);
      const Kind = { f32: Float32Array, f16: Float32Array, i32: Int32Array, i8: Int8Array, ui8: Uint8Array }[b.dtype];
      return [b.name, new Kind(n)];
    }));
  }

  /**
   * Times `runs` runs after one to warm up, on zero inputs unless given:
   * their median and fastest wall clock in milliseconds.
   */
  async bench(runs = 20, inputs = undefined) {
    const given = this.inputsOrZeros(inputs);
    await this.run(given);
    const times = [];
    for (let i = 0; i < runs; i++) {
      const start = performance.now();
      await this.run(given);
      times.push(performance.now() - start);
    }
    times.sort((a, b) => a - b);
    return { median_ms: times[Math.floor(times.length / 2)], min_ms: times[0], runs };
  }

  /**
   * Each dispatch's time in microseconds, after a run on `inputs` (zeros
   * unless given): the wall clock of the dispatch repeated back to back
   * in one compute pass, for at least `spanMs` milliseconds, less an empty
   * submission's, per repeat. Timestamp queries would time a dispatch
   * alone, but browsers round them to 100 us unless told otherwise: a
   * kernel of a few microseconds needs repeats either way. Repeating a
   * kernel rewrites what it wrote already (no kernel adds to its output),
   * and the next `run` computes everything afresh. A kernel reads what
   * the whole run left, where later kernels may have reused its inputs'
   * pool bytes: one whose work depends on values (a gather, a
   * suppression) is timed on those.
   * @returns {Promise<{kernel: string, template: string, us: number}[]>}
   */
  async profile(inputs = undefined, spanMs = 4) {
    await this.run(this.inputsOrZeros(inputs));
    const { device } = this;
    const submit = async (step, repeats) => {
      const start = performance.now();
      const encoder = device.createCommandEncoder();
      const pass = encoder.beginComputePass();
      if (step) {
        pass.setPipeline(step.pipeline);
        pass.setBindGroup(0, step.group);
        for (let r = 0; r < repeats; r++) pass.dispatchWorkgroups(...step.workgroups);
      }
      pass.end();
      device.queue.submit([encoder.finish()]);
      await device.queue.onSubmittedWorkDone();
      return performance.now() - start;
    };
    const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    const empties = [];
    for (let i = 0; i < 5; i++) empties.push(await submit(null, 0));
    const empty = median(empties);
    const times = [];
    for (const [i, step] of this.steps.entries()) {
      const once = Math.max(await submit(step, 1) - empty, 1e-3);
      const repeats = Math.min(Math.ceil(spanMs / once), 4096);
      const spent = median([await submit(step, repeats), await submit(step, repeats), await submit(step, repeats)]);
      const d = this.plan.dispatches[i];
      times.push({ kernel: d.kernel, template: d.template, us: (Math.max(spent - empty, 0) / repeats) * 1000 });
    }
    return times;
  }
}

/** `given`'s elements as buffer `b` stores them, in `into`. */
function encode(b, given, into) {
  const elements = b.shape.reduce((n, d) => n * d, 1);
  const where = `input '${b.name}'`;
  if (given.length !== elements) throw new BundleError(where, `${given.length} elements, where its shape ${JSON.stringify(b.shape)} has ${elements}`);
  const bytes = new Uint8Array(into.buffer);
  if (b.dtype === "f32") {
    if (!(given instanceof Float32Array)) throw new BundleError(where, "f32 elements are given as a Float32Array");
    bytes.set(new Uint8Array(given.buffer, given.byteOffset, given.byteLength));
  } else if (b.dtype === "f16") {
    const half = new Uint16Array(into.buffer, 0, elements);
    if (given instanceof Uint16Array) half.set(given);
    else if (given instanceof Float32Array) given.forEach((x, k) => { half[k] = toHalf(x); });
    else throw new BundleError(where, "f16 elements are given as a Float32Array or a Uint16Array of their bits");
  } else if (b.dtype === "i32") {
    if (!(given instanceof Int32Array)) throw new BundleError(where, "integers are given as an Int32Array");
    new Int32Array(into.buffer, 0, elements).set(given);
  } else {
    const Wanted = b.dtype === "i8" ? Int8Array : Uint8Array;
    if (!(given instanceof Wanted)) throw new BundleError(where, `${b.dtype} elements are given as a ${Wanted.name}`);
    new Wanted(into.buffer, 0, elements).set(given);
  }
  return into;
}

/** Buffer `b`'s elements from its mapped bytes, floats as f32. */
function decode(b, mapped) {
  const elements = b.shape.reduce((n, d) => n * d, 1);
  switch (b.dtype) {
    case "f32": return new Float32Array(mapped.slice(0, elements * 4));
    case "f16": return Float32Array.from(new Uint16Array(mapped, 0, elements), fromHalf);
    case "i32": return new Int32Array(mapped.slice(0, elements * 4));
    case "i8": return new Int8Array(mapped.slice(0, elements));
    default: return new Uint8Array(mapped.slice(0, elements));
  }
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The f16 bits nearest `x` (ties to even), as IEEE binary16. */
export function toHalf(x) {
  f32[0] = x;
  const bits = u32[0];
  const sign = (bits >>> 16) & 0x8000;
  const exponent = (bits >>> 23) & 0xff;
  let mantissa = bits & 0x7fffff;
  if (exponent === 0xff) return sign | 0x7c00 | (mantissa ? 0x200 : 0);
  let e = exponent - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mantissa |= 0x800000;
    const shift = 14 - e;
    const half = mantissa >>> shift;
    const rest = mantissa & ((1 << shift) - 1);
    const midway = 1 << (shift - 1);
    return sign | (half + (rest > midway || (rest === midway && half & 1) ? 1 : 0));
  }
  const half = (e << 10) | (mantissa >>> 13);
  const rest = mantissa & 0x1fff;
  return sign | (half + (rest > 0x1000 || (rest === 0x1000 && half & 1) ? 1 : 0));
}

/** The value of f16 bits `h`. */
export function fromHalf(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exponent = (h >>> 10) & 0x1f;
  const mantissa = h & 0x3ff;
  if (exponent === 0) return sign * mantissa * 2 ** -24;
  if (exponent === 0x1f) return mantissa ? NaN : sign * Infinity;
  return sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
}
