// ropekit-webgpu.js — runs ropekit's WebGPU kernel packages (build/webgpu-packages/OP/, generated
// from the WGSL the C host uses) in a browser or any WebGPU JavaScript host. Dependency-free ES
// module; the browser counterpart of include/ropekit_webgpu.h.
//
//   import { createRunner, loadPackage } from "./ropekit-webgpu.js";
//   const rk = await createRunner();                       // navigator.gpu adapter and device
//   const pkg = await loadPackage("webgpu-packages/rotary_embedding");
//   const { y } = await rk.run(pkg, { x, cos_cache, sin_cache, position_ids }, { num_heads: 8 });
//   // tensors: { dtype: "float32" | "float16" | "bfloat16" | "int64", shape: [...], data }
//
// data is a typed array (Float32Array; Uint16Array holding float16/bfloat16 bits; BigInt64Array,
// Int32Array or an Array for int64 position ids, which stay on the host) or a GPUBuffer (device
// tensors; outputs may be given as { dtype, shape, data: GPUBuffer } to be written in place of
// new buffers). Tensors are contiguous (row-major). A call is validated against the package's
// manifest with ropekit's rules and messages (src/core/validate.c) before anything reaches the
// GPU: a bad call throws RopekitError { status, message } and dispatches nothing (position ids
// out of range included). The variant is the manifest's one whose `when` holds for the call and
// the adapter (shader-f16, limits); outputs come back as typed arrays when every input was one,
// else as GPUBuffers. Results are the CPU reference's bits (tests/browser runs every shared case).

export class RopekitError extends Error {
  constructor(status, message) {
    super(message);
    this.name = "RopekitError";
    this.status = status;
  }
}

const SIZE = { float32: 4, float16: 2, bfloat16: 2, int64: 8 };
const FLOATS = ["float32", "float16", "bfloat16"];

function fail(status, msg) { throw new RopekitError("ROPEKIT_ERROR_" + status, msg); }
const fmtShape = (s) => "(" + s.join(", ") + (s.length === 1 ? ",)" : ")");

/** Load a package folder (URL): its manifest and the WGSL of every variant. */
export async function loadPackage(url, fetchFn = globalThis.fetch) {
  const base = url.endsWith("/") ? url : url + "/";
  const res = await fetchFn(base + "manifest.json");
  if (!res.ok) fail("INVALID_ARGUMENT", `${base}manifest.json: HTTP ${res.status}`);
  const manifest = await res.json();
  const wgsl = new Map();
  await Promise.all(manifest.variants.map(async (v) => {
    const r = await fetchFn(base + v.wgsl);
    if (!r.ok) fail("INVALID_ARGUMENT", `${base}${v.wgsl}: HTTP ${r.status}`);
    wgsl.set(v.name, await r.text());
  }));
  return { url: base, manifest, wgsl };
}

/** A runner on a device; options: { device, adapter, disableF16 }. */
export async function createRunner(options = {}) {
  let { adapter, device } = options;
  if (!device) {
    if (!globalThis.navigator?.gpu) fail("UNSUPPORTED", "WebGPU is not available (navigator.gpu)");
    adapter = adapter ?? (await navigator.gpu.requestAdapter());
    if (!adapter) fail("UNSUPPORTED", "no WebGPU adapter");
    const want = [];
    if (adapter.features.has("shader-f16") && !options.disableF16) want.push("shader-f16");
    const lim = adapter.limits;
    device = await adapter.requestDevice({
      requiredFeatures: want,
      requiredLimits: {
        maxStorageBufferBindingSize: lim.maxStorageBufferBindingSize,
        maxBufferSize: lim.maxBufferSize,
        maxComputeInvocationsPerWorkgroup: lim.maxComputeInvocationsPerWorkgroup,
        maxComputeWorkgroupSizeX: lim.maxComputeWorkgroupSizeX,
        maxStorageBuffersPerShaderStage: lim.maxStorageBuffersPerShaderStage,
      },
    });
  }
  return new Runner(device, adapter, options);
}

// ---- validation: ropekit's rules and messages -------------------------------------------------

function tensor(t, name, optional = false) {
  if (t === undefined || t === null) {
    if (optional) return null;
    fail("NULL_POINTER", `${name}: tensor is missing`);
  }
  if (!(t.dtype in SIZE)) fail("DTYPE", `${name}: unknown dtype ${t.dtype}`);
  if (!Array.isArray(t.shape) || t.shape.length < 1 || t.shape.length > 4)
    fail("SHAPE", `${name}: rank ${t.shape?.length} is outside [1, 4]`);
  t.shape.forEach((d, i) => {
    if (!Number.isInteger(d) || d < 0) fail("SHAPE", `${name}: shape[${i}] = ${d} is negative`);
  });
  const n = t.shape.reduce((a, b) => a * b, 1);
  const isBuf = typeof GPUBuffer !== "undefined" && t.data instanceof GPUBuffer;
  if (!isBuf) {
    const have = t.data?.length;
    if (have === undefined) fail("NULL_POINTER", `${name}: data is missing but the tensor has ${n} elements`);
    if (have < n) fail("SHAPE", `${name}: ${have} elements of data for shape ${fmtShape(t.shape)} (${n})`);
  } else if (t.data.size < n * SIZE[t.dtype]) {
    fail("SHAPE", `${name}: GPUBuffer of ${t.data.size} bytes for shape ${fmtShape(t.shape)} (${n * SIZE[t.dtype]} bytes)`);
  }
  return t;
}
function floatDtype(t, name) {
  if (!FLOATS.includes(t.dtype)) fail("DTYPE", `${name}: dtype ${t.dtype} is not float32, float16 or bfloat16`);
}
function dtypeIs(t, name, want) {
  if (t.dtype !== want) fail("DTYPE", `${name}: dtype is ${t.dtype}, must be ${want}`);
}
function shapeIs(t, name, want, what) {
  const ok = t.shape.length === want.length && want.every((w, i) => w < 0 || t.shape[i] === w);
  if (!ok) {
    const exp = "(" + want.map((w) => (w < 0 ? "?" : String(w))).join(", ") + (want.length === 1 ? ",)" : ")");
    fail("SHAPE", `${name}: shape ${fmtShape(t.shape)}, expected ${exp} ${what}`);
  }
}
function attrsOf(manifest, given = {}) {
  const a = {};
  for (const d of manifest.attributes) a[d.name] = d.default;
  for (const [k, v] of Object.entries(given)) {
    if (!(k in a)) fail("INVALID_ATTRIBUTE", `unknown attribute ${k} for ${manifest.op}`);
    a[k] = v;
  }
  for (const d of manifest.attributes)
    if (a[d.name] === null || a[d.name] === undefined) fail("INVALID_ATTRIBUTE", `${d.name} is required`);
  return a;
}
const idsOf = (t) => (t.data instanceof BigInt64Array ? Array.from(t.data, Number) : Array.from(t.data, Number));

function rotaryCommon(x, xName, y, a) {
  floatDtype(x, xName);
  const r = x.shape.length;
  if (r !== 3 && r !== 4) fail("SHAPE", `${xName}: rank must be 3 (B, S, N*H) or 4 (B, N, S, H), got ${r}`);
  if (a.interleaved !== 0 && a.interleaved !== 1)
    fail("INVALID_ATTRIBUTE", `interleaved = ${a.interleaved}, must be 0 or 1`);
  if (a.num_heads < 0) fail("INVALID_ATTRIBUTE", `num_heads = ${a.num_heads} is negative`);
  let N, H, B, S;
  if (r === 3) {
    if (a.num_heads === 0) fail("INVALID_ATTRIBUTE", `num_heads is required (> 0) for rank-3 ${xName}`);
    if (x.shape[2] % a.num_heads !== 0)
      fail("SHAPE", `${xName}: hidden size ${x.shape[2]} is not a multiple of num_heads = ${a.num_heads}`);
    [B, S] = x.shape;
    N = a.num_heads;
    H = x.shape[2] / N;
  } else {
    [B, N, S, H] = x.shape;
    if (a.num_heads !== 0 && a.num_heads !== N)
      fail("INVALID_ATTRIBUTE", `num_heads = ${a.num_heads} does not match ${xName}.shape[1] = ${N}`);
  }
  let R = a.rotary_embedding_dim;
  if (R < 0) fail("INVALID_ATTRIBUTE", `rotary_embedding_dim = ${R} is negative`);
  if (R === 0) R = H;
  if (R === 0) fail("SHAPE", `${xName}: head size is 0, nothing to rotate`);
  if (R > H) fail("INVALID_ATTRIBUTE", `rotary_embedding_dim = ${R} exceeds the head size ${H}`);
  if (R % 2 !== 0) {
    if (a.rotary_embedding_dim !== 0)
      fail("INVALID_ATTRIBUTE", `rotary_embedding_dim = ${R} is odd; the rotary width must be even`);
    fail("INVALID_ATTRIBUTE", `rotary_embedding_dim = 0 means the head size ${R}, which is odd; the rotary ` +
      "width must be even (set rotary_embedding_dim to an even width to copy the last channel)");
  }
  if (y) {
    if (y.dtype !== x.dtype) fail("DTYPE", `y: dtype ${y.dtype} differs from ${xName} dtype ${x.dtype}`);
    shapeIs(y, "y", x.shape, "(the shape of the input)");
  }
  // canonical (b, s, n, channel) strides of a contiguous tensor
  const xs = r === 4 ? [N * S * H, H, S * H, 1] : [S * N * H, N * H, H, 1];
  return { B, S, N, H, R, xs, dtype: x.dtype, interleaved: a.interleaved };
}
function tables(c, s, T, want, what) {
  tensor(c, "cos_cache");
  tensor(s, "sin_cache");
  if (c.dtype !== T && c.dtype !== "float32")
    fail("DTYPE", `cos_cache: dtype ${c.dtype} must be the input's (${T}) or float32`);
  if (s.dtype !== c.dtype) fail("DTYPE", `sin_cache: dtype ${s.dtype} differs from cos_cache dtype ${c.dtype}`);
  shapeIs(c, "cos_cache", want, what);
  shapeIs(s, "sin_cache", c.shape, "(the shape of the cos table)");
}
function msExtras(a, p) {
  if (a.is_packed_batching !== 0)
    fail("UNSUPPORTED", `is_packed_batching = ${a.is_packed_batching}: only 0 is supported`);
  if (a.inverse !== 0 && a.inverse !== 1) fail("INVALID_ATTRIBUTE", `inverse = ${a.inverse}, must be 0 or 1`);
  if (!Number.isFinite(a.scale)) fail("INVALID_ATTRIBUTE", "scale is not finite");
  p.inverse = a.inverse;
  p.scale = Math.fround(a.scale);
  p.applyScale = p.scale !== 1;
}
function mropeStream(sec, layout, k) {
  if (layout === 0) return k < sec[0] ? 0 : k < sec[0] + sec[1] ? 1 : 2;
  if (k % 3 === 1 && k < 3 * sec[1]) return 1;
  if (k % 3 === 2 && k < 3 * sec[2]) return 2;
  return 0;
}
function checkIds(p) {
  const { B, S } = p;
  const check = (stream) => {
    const base = stream >= 0 ? stream * B * S : 0;
    for (let b = 0; b < B; ++b)
      for (let s = 0; s < S; ++s) {
        const v = p.ids[base + b * S + s];
        if (v >= 0 && v < p.rows) continue;
        if (stream >= 0)
          fail("POSITION_OUT_OF_RANGE", `position_ids[${stream}][${b}][${s}] = ${v} is outside cos_cache rows [0, ${p.rows})`);
        fail("POSITION_OUT_OF_RANGE", `position_ids[${b}][${s}] = ${v} is outside cos_cache rows [0, ${p.rows})`);
      }
  };
  if (p.rowsMode === "table3d") return;
  if (p.rowsMode === "offset") {
    const off = p.ids[0];
    if (off < 0 || p.S > p.rows || off > p.rows - p.S)
      fail("POSITION_OUT_OF_RANGE", `position offset ${off} with sequence length ${p.S} needs rows [${off}, ${off} + ${p.S}), cos_cache has rows [0, ${p.rows})`);
    p.offset = off;
  } else if (p.rowsMode === "mrope") {
    const used = [0, 0, 0];
    for (let k = 0; k < p.R / 2; ++k) used[mropeStream(p.sec, p.mlayout, k)] = 1;
    for (let st = 0; st < 3; ++st) if (used[st]) check(st);
  } else check(-1);
}

// The rotary plan of each of the three operators: validation, then the host-side facts.
const PLANS = {
  rotary_embedding(m, t, a) {
    if (a.inverse !== 0 && a.inverse !== 1) fail("INVALID_ATTRIBUTE", `inverse = ${a.inverse}, must be 0 or 1`);
    const x = tensor(t.x, "x");
    const p = rotaryCommon(x, "x", t.y ?? null, a);
    p.inverse = a.inverse;
    p.scale = 1;
    p.applyScale = false;
    const h = p.R / 2;
    const pos = tensor(t.position_ids, "position_ids", true);
    const c = t.cos_cache, s = t.sin_cache;
    if (pos) {
      tables(c, s, x.dtype, [-1, h], "(rows, rotary_embedding_dim/2) with position_ids");
      dtypeIs(pos, "position_ids", "int64");
      shapeIs(pos, "position_ids", [p.B, p.S], "(batch, sequence)");
      p.rowsMode = "ids2d";
      p.ids = idsOf(pos);
      p.rows = c.shape[0];
    } else {
      tables(c, s, x.dtype, [p.B, p.S, h], "(batch, sequence, rotary_embedding_dim/2) without position_ids");
      p.rowsMode = "table3d";
    }
    p.tdtype = c.dtype;
    p.tshape = c.shape;
    p.io = { x: x, cos: c, sin: s, yName: "y" };
    return p;
  },
  ms_rotary_embedding(m, t, a) {
    const x = tensor(t.input, "input");
    const p = rotaryCommon(x, "input", t.y ?? null, a);
    msExtras(a, p);
    const c = t.cos_cache, s = t.sin_cache;
    tables(c, s, x.dtype, [-1, p.R / 2], "(max_sequence_length, rotary_embedding_dim/2)");
    const pos = t.position_ids;
    if (pos === undefined || pos === null) fail("NULL_POINTER", "position_ids is required");
    tensor(pos, "position_ids");
    dtypeIs(pos, "position_ids", "int64");
    if (pos.shape.length === 1 && pos.shape[0] === 1) p.rowsMode = "offset";
    else {
      shapeIs(pos, "position_ids", [p.B, p.S], "(batch, sequence), or (1,) for an offset");
      p.rowsMode = "ids2d";
    }
    p.ids = idsOf(pos);
    p.rows = c.shape[0];
    p.tdtype = c.dtype;
    p.tshape = c.shape;
    p.io = { x: x, cos: c, sin: s, yName: "y" };
    return p;
  },
  mrotary_embedding(m, t, a) {
    const x = tensor(t.input, "input");
    const p = rotaryCommon(x, "input", t.y ?? null, a);
    msExtras(a, p);
    const h = p.R / 2;
    if (a.mrope_layout !== 0 && a.mrope_layout !== 1)
      fail("INVALID_ATTRIBUTE", `mrope_layout = ${a.mrope_layout}, must be 0 (sectioned) or 1 (interleaved)`);
    const sec = a.mrope_section;
    if (!Array.isArray(sec) || sec.length !== 3 || sec.some((v) => v < 0 || v > h) || sec[0] + sec[1] + sec[2] !== h)
      fail("INVALID_ATTRIBUTE", `mrope_section = [${sec}] must be non-negative and sum to rotary_embedding_dim/2 = ${h} (it is not doubled)`);
    const c = t.cos_cache, s = t.sin_cache;
    tables(c, s, x.dtype, [-1, h], "(max_sequence_length, rotary_embedding_dim/2)");
    const pos = t.position_ids;
    if (pos === undefined || pos === null) fail("NULL_POINTER", "position_ids is required");
    tensor(pos, "position_ids");
    dtypeIs(pos, "position_ids", "int64");
    shapeIs(pos, "position_ids", [3, p.B, p.S], "(3 streams, batch, sequence)");
    p.rowsMode = "mrope";
    p.sec = sec;
    p.mlayout = a.mrope_layout;
    p.ids = idsOf(pos);
    p.rows = c.shape[0];
    p.tdtype = c.dtype;
    p.tshape = c.shape;
    p.io = { x: x, cos: c, sin: s, yName: "y" };
    return p;
  },
};

function ropeDims(a) {
  if (!(a.num_heads > 0)) fail("INVALID_ATTRIBUTE", `num_heads = ${a.num_heads}, must be > 0`);
  if (!(a.head_dim > 0)) fail("INVALID_ATTRIBUTE", `head_dim = ${a.head_dim}, must be > 0`);
  if (a.rope_head_dim < 0 || a.rope_head_dim % 2 !== 0 || a.rope_head_dim > a.head_dim)
    fail("INVALID_ATTRIBUTE", `rope_head_dim = ${a.rope_head_dim}, must be even and in [0, head_dim = ${a.head_dim}]`);
}
function mTable(t, name, want, rope) {
  if (t === undefined || t === null) {
    if (rope === 0) return null;
    fail("NULL_POINTER", `${name} is required when rope_head_dim > 0`);
  }
  tensor(t, name);
  dtypeIs(t, name, "float32");
  shapeIs(t, name, want, "");
  return t;
}

// ---- the runner ------------------------------------------------------------------------------

const inRuns = (m, strides, base) => base % m === 0 && strides.every((s) => s % m === 0);
const isTyped = (d) => !(typeof GPUBuffer !== "undefined" && d instanceof GPUBuffer);

export class Runner {
  constructor(device, adapter, options = {}) {
    this.device = device;
    this.adapter = adapter ?? null;
    this.hasF16 = device.features.has("shader-f16") && !options.disableF16;
    this.limits = device.limits;
    this.pipelines = new Map();
    this.dispatches = 0; // dispatches issued (tests check that a refused call issues none)
    this.lastVariant = "";
  }

  /** Facts of the adapter for reports. */
  info() {
    const i = this.adapter?.info ?? {};
    return {
      vendor: i.vendor ?? "", architecture: i.architecture ?? "", device: i.device ?? "",
      description: i.description ?? "", isFallbackAdapter: i.isFallbackAdapter ?? null,
      features: [...this.device.features].sort(),
      limits: {
        maxStorageBufferBindingSize: this.limits.maxStorageBufferBindingSize,
        maxComputeWorkgroupsPerDimension: this.limits.maxComputeWorkgroupsPerDimension,
        maxComputeInvocationsPerWorkgroup: this.limits.maxComputeInvocationsPerWorkgroup,
        maxStorageBuffersPerShaderStage: this.limits.maxStorageBuffersPerShaderStage,
      },
    };
  }

  /** The variant whose `when` holds for these facts and this device. */
  pick(pkg, facts) {
    const f = { ...facts, "shader-f16": this.hasF16 };
    for (const v of pkg.manifest.variants) {
      let ok = true;
      for (const [k, want] of Object.entries(v.when)) {
        if (k === "limits") {
          for (const [l, min] of Object.entries(want)) if (!(this.limits[l] >= min)) ok = false;
        } else if (f[k] !== want) ok = false;
      }
      if (ok) return v;
    }
    fail("UNSUPPORTED", `${pkg.manifest.package}: no variant for ${JSON.stringify(f)}`);
  }

  // constants: the variant's pipeline-overridable constants for this call (rotary: RK_IL,
  // RK_COPY), one pipeline per set
  async pipeline(pkg, v, constants) {
    const key = pkg.url + v.name + (constants ? JSON.stringify(constants) : "");
    let p = this.pipelines.get(key);
    if (p) return p;
    const entries = pkg.manifest.bindings.map((b) => ({
      binding: b.binding, visibility: GPUShaderStage.COMPUTE,
      buffer: { type: b.kind === "uniform" ? "uniform" : b.kind === "storage" ? "storage" : "read-only-storage" },
    }));
    const layout = this.device.createBindGroupLayout({ entries });
    const module = this.device.createShaderModule({ code: pkg.wgsl.get(v.name) });
    let pipe;
    try {
      pipe = await this.device.createComputePipelineAsync({
        layout: this.device.createPipelineLayout({ bindGroupLayouts: [layout] }),
        compute: constants ? { module, entryPoint: "main", constants } : { module, entryPoint: "main" },
      });
    } catch (e) {
      const info = await module.getCompilationInfo();
      const msgs = info.messages.filter((x) => x.type === "error").map((x) => `${x.lineNum}:${x.linePos} ${x.message}`);
      fail("DEVICE", `${pkg.manifest.package}/${v.wgsl}: ${e.message} ${msgs.join("; ")}`);
    }
    p = { pipe, layout };
    this.pipelines.set(key, p);
    return p;
  }

  buffer(bytes, usage) {
    return this.device.createBuffer({ size: Math.max(16, Math.ceil(bytes / 4) * 4), usage });
  }

  // a device buffer for a tensor: its own GPUBuffer, or a new one holding the typed array
  upload(t, temps) {
    if (!t) {
      const b = this.buffer(16, GPUBufferUsage.STORAGE);
      temps.push(b);
      return b;
    }
    if (!isTyped(t.data)) return t.data;
    const n = t.shape.reduce((a, b) => a * b, 1);
    const bytes = n * SIZE[t.dtype];
    const b = this.buffer(bytes, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC);
    const src = t.data;
    const view = new Uint8Array(Math.ceil(Math.max(bytes, 16) / 4) * 4);
    view.set(new Uint8Array(src.buffer, src.byteOffset, bytes));
    this.device.queue.writeBuffer(b, 0, view);
    temps.push(b);
    return b;
  }

  grid(groups) {
    const m = this.limits.maxComputeWorkgroupsPerDimension;
    if (groups <= m) return [groups, 1, 1];
    if (groups <= m * m) {
      const x = Math.ceil(Math.sqrt(groups));
      return [x, Math.ceil(groups / x), 1];
    }
    const x = Math.ceil(Math.cbrt(groups));
    const yz = Math.ceil(groups / x);
    const y = Math.ceil(Math.sqrt(yz));
    return [x, y, Math.ceil(yz / y)];
  }

  // one dispatch: params, bind group from the manifest's bindings, outputs read back when wanted
  async dispatch(pkg, v, params, buffers, invocations, outputs, readBack, constants) {
    const dev = this.device;
    if (invocations === 0) { // empty tensors: nothing to run
      const r = {};
      for (const o of outputs)
        r[o.name] = !readBack ? o.buffer : o.dtype === "float32" ? new Float32Array(o.bytes / 4) : new Uint16Array(o.bytes / 2);
      return r;
    }
    const { pipe, layout } = await this.pipeline(pkg, v, constants);
    dev.pushErrorScope("validation");
    const ubuf = this.buffer(params.byteLength, GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST);
    dev.queue.writeBuffer(ubuf, 0, params);
    const entries = [{ binding: 0, resource: { buffer: ubuf } }];
    buffers.forEach((b, i) => entries.push({ binding: i + 1, resource: { buffer: b } }));
    const bg = dev.createBindGroup({ layout, entries });
    const enc = dev.createCommandEncoder();
    const pass = enc.beginComputePass();
    pass.setPipeline(pipe);
    pass.setBindGroup(0, bg);
    const [gx, gy, gz] = this.grid(Math.ceil(invocations / v.dispatch.workgroup_size));
    pass.dispatchWorkgroups(gx, gy, gz);
    pass.end();
    this.dispatches++;
    const reads = [];
    if (readBack)
      for (const o of outputs) {
        const bytes = Math.ceil(o.bytes / 4) * 4;
        const rb = dev.createBuffer({ size: Math.max(bytes, 4), usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
        if (bytes > 0) enc.copyBufferToBuffer(o.buffer, 0, rb, 0, bytes);
        reads.push(rb);
      }
    dev.queue.submit([enc.finish()]);
    const err = await dev.popErrorScope();
    ubuf.destroy();
    if (err) fail("DEVICE", `${v.name}: ${err.message}`);
    this.lastVariant = v.name;
    const result = {};
    for (let i = 0; i < outputs.length; ++i) {
      const o = outputs[i];
      if (!readBack) {
        result[o.name] = o.buffer;
        continue;
      }
      await reads[i].mapAsync(GPUMapMode.READ);
      const raw = reads[i].getMappedRange().slice(0, o.bytes);
      reads[i].unmap();
      reads[i].destroy();
      result[o.name] = o.dtype === "float32" ? new Float32Array(raw) : new Uint16Array(raw);
    }
    return result;
  }

  outBuffer(given, name, dtype, shape, temps) {
    const n = shape.reduce((a, b) => a * b, 1);
    const bytes = n * SIZE[dtype];
    if (given && !isTyped(given.data)) return { name, dtype, bytes, buffer: given.data };
    const b = this.buffer(bytes, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST);
    temps.push(b);
    return { name, dtype, bytes, buffer: b, temp: true };
  }

  /** Run a package's operator on named inputs; returns the named outputs. */
  async run(pkg, tensors, attributes = {}) {
    const m = pkg.manifest;
    const a = attrsOf(m, attributes);
    const temps = [];
    try {
      if (PLANS[m.package]) return await this.rotary(pkg, PLANS[m.package](m, tensors, a), tensors);
      if (m.package === "qknorm_rotary_embedding") return await this.qknorm(pkg, tensors, a);
      if (m.package === "inverse_rotary_regroup") return await this.regroup(pkg, tensors, a);
      fail("UNSUPPORTED", `unknown package ${m.package}`);
    } finally {
      for (const b of temps) b.destroy();
    }
  }

  async rotary(pkg, p, t) {
    checkIds(p); // host ids: out of range -> error before any dispatch
    const temps = [];
    try {
      const { B, S, N, H, R, xs } = p;
      const outs = [this.outBuffer(t[p.io.yName], p.io.yName, p.dtype, p.io.x.shape, temps)];
      const readBack = [p.io.x, p.io.cos, p.io.sin].every((q) => isTyped(q.data)) && outs[0].temp;
      if (B === 0 || S === 0 || N === 0 || H === 0) return await this.dispatch(pkg, pkg.manifest.variants[0], new Uint32Array(36), [], 0, outs, readBack);
      const h = R / 2, es = SIZE[p.dtype], ve = 16 / es;
      const paired = (p.interleaved === 1 || h % 2 === 0) && (H - R) % 2 === 0 && inRuns(2, xs.slice(0, 3), 0);
      const vecOk = inRuns(ve, xs.slice(0, 3), 0) && (p.interleaved ? R % ve === 0 : h % ve === 0) && (H - R) % ve === 0;
      // tables read as 16-byte vectors (vec16 variants "-tv"): half-split, no scale, rows of whole
      // vectors (the runner's tables are contiguous) and, for MRoPE, one row per x vector
      // (sectioned layout, section boundaries on vector boundaries); as the C host (ops.c)
      const vt = 16 / SIZE[p.tdtype];
      const tvOk = vecOk && !p.interleaved && !p.applyScale && h % vt === 0 &&
        (p.rowsMode !== "mrope" || (Number(p.mlayout) === 0 && p.sec[0] % ve === 0 && (p.sec[0] + p.sec[1]) % ve === 0));
      const v = this.pick(pkg, {
        rows: p.rowsMode, dtype: p.dtype, table_dtype: p.tdtype, kernel: vecOk ? "vec16" : "element",
        table_loads: tvOk ? "vec16" : "element", paired,
      });
      const vec = v.dispatch.VE > 0; // exact32 variants are element kernels for every layout
      const sw = v.dispatch.SW, hg = v.dispatch.HG;
      const perUnit = vec ? ve : sw;
      const unitsRot = vec ? (p.interleaved ? R : h) / perUnit : p.interleaved ? h : h / sw;
      const units = unitsRot + (H - R) / perUnit;
      const ng = Math.ceil(N / hg);
      const total = B * S * ng * units;
      if (total > 0xffffffff) fail("UNSUPPORTED", `${total} invocations exceed the 32-bit index of the WebGPU kernels`);
      const two = p.tshape.length === 2;
      const prm = new Uint32Array(36);
      prm.set([0, 0, 0, 0, ...xs, ...xs, B, S, N, R, unitsRot, units, total,
        (p.interleaved ? 1 : 0) | (p.inverse ? 2 : 0) | (p.applyScale ? 4 : 0),
        two ? h : 0, 1, two ? h : 0, 1, two ? 0 : S * h, two ? 0 : h, two ? 0 : S * h, two ? 0 : h,
        p.rowsMode === "offset" ? p.offset : 0, p.sec ? p.sec[0] : 0, p.sec ? p.sec[1] : 0, p.mlayout ?? 0]);
      new Float32Array(prm.buffer, 32 * 4, 1)[0] = p.scale;
      prm[33] = ng;
      // divisors that are powers of two (units, head groups, S): log2 + 1 per byte (0: divide);
      // the vector kernel runs the rotations (unitsRot per token and head group), then the
      // copies of [R, H) (units - unitsRot): byte 0 for unitsRot, byte 3 for the copies, and
      // the rotation range's size
      [vec ? unitsRot : units, ng, S, vec ? units - unitsRot : 0].forEach((d, i) => {
        if (d > 0 && (d & (d - 1)) === 0) prm[34] |= (Math.log2(d) + 1) << (8 * i);
      });
      if (vec) prm[35] = B * S * ng * unitsRot;
      let ids = null;
      if (p.rowsMode === "ids2d" || p.rowsMode === "mrope") {
        const u = Uint32Array.from(p.ids);
        ids = this.buffer(u.byteLength, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST);
        this.device.queue.writeBuffer(ids, 0, u);
        temps.push(ids);
      }
      const bufs = [this.upload(p.io.x, temps), outs[0].buffer, this.upload(p.io.cos, temps), this.upload(p.io.sin, temps), ids ?? this.upload(null, temps)];
      if (bufs[0] === bufs[1]) { // in place on one GPUBuffer: read from a copy (a written buffer binds once)
        const copy = this.buffer(outs[0].bytes, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST);
        const enc = this.device.createCommandEncoder();
        enc.copyBufferToBuffer(bufs[0], 0, copy, 0, Math.ceil(outs[0].bytes / 4) * 4);
        this.device.queue.submit([enc.finish()]);
        temps.push(copy);
        bufs[0] = copy;
      }
      // interleaved or not and the copy range as constants of the pipeline: one path per
      // pipeline (SwiftShader runs both sides of every run-time branch)
      const constants = { RK_IL: p.interleaved ? 1 : 0, RK_COPY: units > unitsRot ? 1 : 0 };
      return await this.dispatch(pkg, v, prm, bufs, total, outs, readBack, constants);
    } finally {
      for (const b of temps) b.destroy();
    }
  }

  async qknorm(pkg, t, a) {
    ropeDims(a);
    if (a.simulate_fp8 !== 0 && a.simulate_fp8 !== 1) fail("INVALID_ATTRIBUTE", `simulate_fp8 = ${a.simulate_fp8}, must be 0 or 1`);
    const nh = a.num_heads, hd = a.head_dim, rd = a.rope_head_dim, nope = hd - rd;
    if (a.simulate_fp8 && nope % 64 !== 0)
      fail("INVALID_ATTRIBUTE", `simulate_fp8 needs head_dim - rope_head_dim = ${nope} to be a multiple of 64`);
    const eps = Math.fround(a.epsilon);
    if (!Number.isFinite(eps) || eps < 0) fail("INVALID_ATTRIBUTE", "epsilon must be finite and >= 0");
    const q = tensor(t.query, "query");
    floatDtype(q, "query");
    shapeIs(q, "query", [-1, -1, nh * hd], "(batch, sequence, num_heads*head_dim)");
    const [B, S] = q.shape, T = q.dtype;
    const kv = tensor(t.kv, "kv");
    dtypeIs(kv, "kv", T);
    shapeIs(kv, "kv", [B, S, hd], "(batch, sequence, head_dim)");
    const w = tensor(t.kv_norm_weight, "kv_norm_weight");
    dtypeIs(w, "kv_norm_weight", "float32");
    shapeIs(w, "kv_norm_weight", [hd], "(head_dim)");
    const c = mTable(t.cos, "cos", [B, S, rd], rd), s = mTable(t.sin, "sin", [B, S, rd], rd);
    for (const [name, shape] of [["query_out", [B, S, nh, hd]], ["kv_out", [B, S, hd]]]) {
      const o = t[name];
      if (o) {
        tensor(o, name);
        dtypeIs(o, name, T);
        shapeIs(o, name, shape, name === "kv_out" ? "(batch, sequence, head_dim)" : "(batch, sequence, num_heads, head_dim)");
      }
    }
    const temps = [];
    try {
      const outs = [this.outBuffer(t.query_out, "query_out", T, [B, S, nh, hd], temps), this.outBuffer(t.kv_out, "kv_out", T, [B, S, hd], temps)];
      const readBack = [q, kv, w].every((x) => isTyped(x.data)) && outs.every((o) => o.temp);
      const paired = nope % 2 === 0 && hd % 2 === 0;
      // the row kernel (64 invocations per row, 16-byte vectors) where head_dim is a multiple of
      // the vector's elements VE and at most 256 VE and the adapter has its limits, else the
      // element kernel (16 invocations per row)
      const VE = T === "float32" ? 4 : 8, vpt = Math.ceil(hd / VE / 64);
      let v = null;
      if (hd % VE === 0 && vpt <= 4) {
        try { v = this.pick(pkg, { kernel: "row", dtype: T, vpt }); } catch (e) { v = null; }
      }
      const row = v !== null;
      if (!row) v = this.pick(pkg, { kernel: "element", dtype: T, paired });
      const rows = B * S * (nh + 1);
      const prm = new Uint32Array(48);
      prm.set([0, 0, 0, 0, S * nh * hd, nh * hd, hd, 1, S * nh * hd, nh * hd, hd, 1, S * hd, hd, 1, 0, S * hd, hd, 1, 0,
        rd ? S * rd : 0, rd ? rd : 0, rd ? 1 : 0, 0, rd ? S * rd : 0, rd ? rd : 0, rd ? 1 : 0, 0,
        0, 1, 0, 0, B, S, nh, hd, rd, nope, a.simulate_fp8, rows]);
      new Float32Array(prm.buffer, 40 * 4, 1)[0] = eps;
      // 1/head_dim for a power of two (the row kernel's exact product), else 0
      if ((hd & (hd - 1)) === 0) new Float32Array(prm.buffer, 41 * 4, 1)[0] = 1 / hd;
      if (B === 0 || S === 0) return await this.dispatch(pkg, v, prm, [], 0, outs, readBack);
      const bufs = [this.upload(q, temps), this.upload(kv, temps), this.upload(w, temps),
        this.upload(rd ? c : null, temps), this.upload(rd ? s : null, temps), outs[0].buffer, outs[1].buffer];
      return await this.dispatch(pkg, v, prm, bufs, rows * (row ? 64 : 16), outs, readBack);
    } finally {
      for (const b of temps) b.destroy();
    }
  }

  async regroup(pkg, t, a) {
    ropeDims(a);
    const nh = a.num_heads, hd = a.head_dim, rd = a.rope_head_dim, nope = hd - rd, F = nh * hd, G = a.num_groups;
    if (!(G > 0) || F % G !== 0) fail("INVALID_ATTRIBUTE", `num_groups = ${G} must be > 0 and divide num_heads*head_dim = ${F}`);
    const x = tensor(t.input, "input");
    floatDtype(x, "input");
    shapeIs(x, "input", [-1, F], "(tokens, num_heads*head_dim)");
    const N = x.shape[0], gdim = F / G;
    const c = mTable(t.cos, "cos", [N, rd], rd), s = mTable(t.sin, "sin", [N, rd], rd);
    if (t.out) {
      tensor(t.out, "out");
      dtypeIs(t.out, "out", x.dtype);
      shapeIs(t.out, "out", [G, N, gdim], "(num_groups, tokens, group_dim)");
    }
    const temps = [];
    try {
      const outs = [this.outBuffer(t.out, "out", x.dtype, [G, N, gdim], temps)];
      const readBack = isTyped(x.data) && outs[0].temp;
      const pairs = gdim % 2 === 0 && nope % 2 === 0 && hd % 2 === 0;
      const v = this.pick(pkg, { dtype: x.dtype, pairs });
      const ue = v.dispatch.UE, units = F / ue, total = N * units;
      const prm = new Uint32Array(28);
      prm.set([0, 0, 0, 0, F, 1, 0, 0, N * gdim, gdim, 1, 0, rd ? rd : 0, rd ? 1 : 0, 0, 0, rd ? rd : 0, rd ? 1 : 0, 0, 0,
        N, F, hd, nope, gdim, units, total, 0]);
      if (N === 0) return await this.dispatch(pkg, v, prm, [], 0, outs, readBack);
      const bufs = [this.upload(x, temps), outs[0].buffer, this.upload(rd ? c : null, temps), this.upload(rd ? s : null, temps)];
      return await this.dispatch(pkg, v, prm, bufs, total, outs, readBack);
    } finally {
      for (const b of temps) b.destroy();
    }
  }
}
