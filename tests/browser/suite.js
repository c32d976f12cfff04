// The browser suite (driven by run_browser_tests.py): every case of every package's test.json
// (the shared vectors, every operator and dtype) through js/ropekit-webgpu.js, compared bit for
// bit with the CPU reference's outputs; then contract errors (position ids out of range must
// throw before any dispatch). Results go to window.__result.
import { createRunner, loadPackage, RopekitError } from "../../js/ropekit-webgpu.js";

const params = new URLSearchParams(location.search);
const OPS = (params.get("ops") ?? "rotary_embedding,ms_rotary_embedding,mrotary_embedding,qknorm_rotary_embedding,inverse_rotary_regroup").split(",");
const PKG = params.get("packages") ?? "/build/webgpu-packages";
const log = (s) => { document.getElementById("log").textContent += s + "\n"; };

function decode(t) {
  if (t.absent) return null;
  const bin = atob(t.data);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; ++i) bytes[i] = bin.charCodeAt(i);
  const data = t.dtype === "float32" ? new Float32Array(bytes.buffer) : t.dtype === "int64" ? new BigInt64Array(bytes.buffer) : new Uint16Array(bytes.buffer);
  return { dtype: t.dtype, shape: t.shape, data };
}

async function main() {
  const res = { passed: 0, failed: 0, failures: [], variants: {}, ops: {}, ms: {} };
  const rk = await createRunner({ disableF16: params.get("f16") === "0" });
  res.adapter = rk.info();
  res.shaderF16 = rk.hasF16;
  const check = (ok, msg) => { if (ok) res.passed++; else { res.failed++; if (res.failures.length < 40) res.failures.push(msg); } };
  for (const op of OPS) {
    const t0 = performance.now();
    const pkg = await loadPackage(`${PKG}/${op}`);
    const tests = await (await fetch(`${PKG}/${op}/test.json`)).json();
    let n = 0;
    for (const c of tests.cases) {
      const inputs = {};
      for (const t of c.inputs) inputs[t.name] = decode(t);
      let got;
      try {
        got = await rk.run(pkg, inputs, c.attributes);
      } catch (e) {
        check(false, `${op} #${c.index}: ${e.message} (${c.describe})`);
        continue;
      }
      res.variants[rk.lastVariant] = (res.variants[rk.lastVariant] ?? 0) + 1;
      for (const o of c.outputs) {
        const want = decode(o).data, have = got[o.name];
        const a = new Uint8Array(want.buffer), b = have ? new Uint8Array(have.buffer, have.byteOffset, have.byteLength) : new Uint8Array(0);
        let bad = a.length === b.length ? 0 : -1, first = -1;
        if (bad === 0) for (let i = 0; i < a.length; ++i) if (a[i] !== b[i]) { if (first < 0) first = i; bad++; }
        check(bad === 0, `${op} #${c.index} ${o.name}: ${bad < 0 ? `length ${b.length} != ${a.length}` : `${bad} bytes differ, first at byte ${first}`} (variant ${rk.lastVariant}; ${c.describe})`);
      }
      n++;
      if (n % 20 === 0) console.log(`progress ${op}: ${n} cases, ${Math.round(performance.now() - t0)} ms`);
    }
    res.ops[op] = n;
    res.ms[op] = Math.round(performance.now() - t0);
  }

  // contract errors: thrown before any dispatch, with ropekit's message
  const pkg = await loadPackage(`${PKG}/rotary_embedding`);
  const B = 1, S = 2, N = 2, H = 8, P = 4;
  const X = { dtype: "float32", shape: [B, S, N * H], data: new Float32Array(B * S * N * H).fill(1) };
  const cs = { dtype: "float32", shape: [P, H / 2], data: new Float32Array(P * H / 2).fill(0.5) };
  const expectError = async (what, call, status, text) => {
    const before = rk.dispatches;
    try {
      await call();
      check(false, `${what}: no error`);
    } catch (e) {
      check(e instanceof RopekitError && e.status === status && e.message.includes(text) && rk.dispatches === before,
        `${what}: got ${e.status} '${e.message}' (dispatches ${rk.dispatches - before}), want ${status} '${text}'`);
    }
  };
  await expectError("position id past the table", () => rk.run(pkg, { x: X, cos_cache: cs, sin_cache: cs,
    position_ids: { dtype: "int64", shape: [B, S], data: new BigInt64Array([0n, 4n]) } }, { num_heads: N }),
    "ROPEKIT_ERROR_POSITION_OUT_OF_RANGE", "position_ids[0][1] = 4 is outside cos_cache rows [0, 4)");
  await expectError("negative position id", () => rk.run(pkg, { x: X, cos_cache: cs, sin_cache: cs,
    position_ids: { dtype: "int64", shape: [B, S], data: new BigInt64Array([-1n, 0n]) } }, { num_heads: N }),
    "ROPEKIT_ERROR_POSITION_OUT_OF_RANGE", "position_ids[0][0] = -1 is outside");
  await expectError("rank-3 x without num_heads", () => rk.run(pkg, { x: X, cos_cache: cs, sin_cache: cs,
    position_ids: { dtype: "int64", shape: [B, S], data: new BigInt64Array([0n, 1n]) } }, {}),
    "ROPEKIT_ERROR_INVALID_ATTRIBUTE", "num_heads is required (> 0) for rank-3 x");
  await expectError("odd rotary_embedding_dim", () => rk.run(pkg, { x: X, cos_cache: cs, sin_cache: cs,
    position_ids: { dtype: "int64", shape: [B, S], data: new BigInt64Array([0n, 1n]) } }, { num_heads: N, rotary_embedding_dim: 3 }),
    "ROPEKIT_ERROR_INVALID_ATTRIBUTE", "rotary_embedding_dim = 3 is odd");
  await expectError("table width", () => rk.run(pkg, { x: X, cos_cache: { ...cs, shape: [P * 2, H / 4] }, sin_cache: { ...cs, shape: [P * 2, H / 4] },
    position_ids: { dtype: "int64", shape: [B, S], data: new BigInt64Array([0n, 1n]) } }, { num_heads: N }),
    "ROPEKIT_ERROR_SHAPE", "cos_cache: shape (8, 2), expected (?, 4)");
  const ms = await loadPackage(`${PKG}/ms_rotary_embedding`);
  await expectError("offset past the table", () => rk.run(ms, { input: X, cos_cache: cs, sin_cache: cs,
    position_ids: { dtype: "int64", shape: [1], data: new BigInt64Array([3n]) } }, { num_heads: N }),
    "ROPEKIT_ERROR_POSITION_OUT_OF_RANGE", "position offset 3 with sequence length 2");
  const mr = await loadPackage(`${PKG}/mrotary_embedding`);
  await expectError("MRoPE stream id", () => rk.run(mr, { input: X, cos_cache: cs, sin_cache: cs,
    position_ids: { dtype: "int64", shape: [3, B, S], data: new BigInt64Array([0n, 1n, 0n, 9n, 0n, 0n]) } }, { num_heads: N, mrope_section: [2, 1, 1] }),
    "ROPEKIT_ERROR_POSITION_OUT_OF_RANGE", "position_ids[1][0][1] = 9 is outside cos_cache rows [0, 4)");
  window.__result = res;
}
main().catch((e) => { window.__result = { passed: 0, failed: 1, failures: [String(e.stack ?? e)] }; });
