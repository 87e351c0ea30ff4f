// Runs the SDK, compiled into test/fixture.ts, in Node with a fake host: its readers,
// writers and verdicts, and that a million calls do not grow its memory (the incremental
// runtime frees what each call allocates; the stub runtime would not).
import { test } from "node:test";
import assert from "node:assert/strict";
import asc from "assemblyscript/asc";

async function compile(runtime) {
  let binary;
  const { error, stderr } = await asc.main([
    "test/fixture.ts", "-O3", "--runtime", runtime, "--use", "abort=index/abort", "-o", "fixture.wasm",
  ], { writeFile(name, contents) { if (name.endsWith(".wasm")) binary = contents; } });
  if (error) throw new Error(`asc: ${error.message}\n${stderr.toString()}`);
  return new WebAssembly.Module(binary);
}

// A fake host: one message, a config, and what the plugin wrote.
function host(msg, config) {
  const enc = new TextEncoder(), dec = new TextDecoder();
  const h = { msg, config, reason: "", payload: null, emitted: [], logs: [] };
  let mem;
  const bytes = (p, n) => new Uint8Array(mem.buffer, p, n);
  const str = (p, n) => dec.decode(bytes(p, n));
  const copy = (value, buf, cap) => {
    if (value == null) return -1;
    const b = typeof value === "string" ? enc.encode(value) : value;
    bytes(buf, Math.min(b.length, cap)).set(b.subarray(0, cap));
    return b.length;
  };
  const configText = () => Object.keys(h.config).sort().map(k => `${k}=${h.config[k].replace(/\\/g, "\\\\").replace(/\n/g, "\\n")}\n`).join("");
  h.imports = {
    tinybroker: {
      v1_log: (l, p, n) => h.logs.push([l, str(p, n)]),
      v1_now: () => 0n,
      v1_config: (b, c) => copy(configText(), b, c),
      v1_config_get: (k, kl, b, c) => copy(h.config[str(k, kl)], b, c),
      v1_set_reason: (p, n) => { h.reason = str(p, n); },
      v1_msg_topic: (b, c) => copy(h.msg.topic, b, c),
      v1_msg_payload: (b, c) => copy(h.msg.payload, b, c),
      v1_msg_header: (k, kl, b, c) => copy(h.msg.headers[str(k, kl)], b, c),
      v1_msg_header_count: () => Object.keys(h.msg.headers).length,
      v1_msg_header_name: (i, b, c) => copy(Object.keys(h.msg.headers).sort()[i], b, c),
      v1_msg_id: (b, c) => copy("", b, c),
      v1_msg_set_topic: () => 0,
      v1_msg_set_payload: (p, n) => { h.payload = str(p, n); return 0; },
      v1_msg_set_header: () => 0,
      v1_msg_del_header: () => 0,
      v1_event_subscription: (b, c) => copy("", b, c),
      v1_event_group: (b, c) => copy("", b, c),
      v1_event_attempt: () => 0,
      v1_event_in_flight_ns: () => 0n,
      v1_event_reason: (b, c) => copy("", b, c),
      v1_emit: (t, tl, p, pl) => h.emitted.push({ topic: str(t, tl), payload: str(p, pl), headers: {} }) - 1,
      v1_emit_header: (i, k, kl, v, vl) => { h.emitted[i].headers[str(k, kl)] = str(v, vl); return 0; },
    },
  };
  h.bind = (instance) => { mem = instance.exports.memory; return instance.exports; };
  return h;
}

// TB_AS_RUNTIME=stub npm test shows the last test failing: the stub runtime never frees.
const incremental = await compile(process.env.TB_AS_RUNTIME ?? "incremental");
const config = { tenant: "acme", multi: "a\nb" };

function load(msg, cfg = config) {
  const h = host(msg, cfg);
  const exports = h.bind(new WebAssembly.Instance(incremental, h.imports));
  return { h, exports };
}

const verdict = (v) => ({ action: Number(v & 0xffffffffn), arg: Number(v >> 32n) });

test("reads a header, the payload, and writes them", () => {
  const { h, exports } = load({ topic: "t.echo", payload: "body", headers: { h: "héllo" } });
  assert.deepEqual(verdict(exports.tb_on_publish()), { action: 0, arg: 0 });
  assert.equal(h.payload, "héllo:body");
  assert.deepEqual(h.emitted, [{ topic: "t.copy", payload: "body", headers: { from: "t.echo" } }]);
});

test("values longer than the scratch buffer are read whole", () => {
  const long = "x".repeat(5000), payload = "y".repeat(40000);
  const { h, exports } = load({ topic: "t.echo", payload, headers: { h: long } });
  exports.tb_on_publish();
  assert.equal(h.payload, long + ":" + payload);
});

test("a missing header is null", () => {
  const { h, exports } = load({ topic: "t.echo", payload: "", headers: {} });
  exports.tb_on_publish();
  assert.equal(h.payload, "<none>:");
});

test("tenant filter: headerIs and the drop and pass verdicts", () => {
  for (const [headers, want, reason] of [[{ tenant: "acme" }, 0, ""], [{ tenant: "acm" }, 1, "wrong tenant"],
    [{ tenant: "acmex" }, 1, "wrong tenant"], [{}, 1, "wrong tenant"]]) {
    const { h, exports } = load({ topic: "t.tenant", payload: "", headers });
    assert.equal(verdict(exports.tb_on_publish()).action, want, JSON.stringify(headers));
    assert.equal(h.reason, reason);
  }
});

test("reject packs its code and sets the reason", () => {
  const { h, exports } = load({ topic: "t.reject", payload: "", headers: {} });
  assert.deepEqual(verdict(exports.tb_on_publish()), { action: 2, arg: 7 });
  assert.equal(h.reason, "no t.reject");
});

test("the whole config is unescaped", () => {
  const { h, exports } = load({ topic: "t.config", payload: "", headers: {} });
  exports.tb_on_publish();
  assert.equal(h.payload, "a\nb|multi,tenant");
});

test("a delay of 0 ms is sent as 1 ms, a valid verdict", () => {
  const { exports } = load({ topic: "t", payload: "", headers: {} });
  assert.deepEqual(verdict(exports.tb_on_redeliver()), { action: 1, arg: 1 });
});

test("init refuses with a reason", () => {
  const { h, exports } = load({ topic: "t", payload: "", headers: {} }, { refuse: "1" });
  assert.equal(exports.tb_init(), 1);
  assert.equal(h.reason, "refused");
});

test("an abort logs its message at error level and traps", () => {
  const { h, exports } = load({ topic: "t.abort", payload: "", headers: {} });
  assert.throws(() => exports.tb_on_publish(), WebAssembly.RuntimeError);
  assert.equal(h.logs.length, 1);
  assert.equal(h.logs[0][0], 4);
  assert.match(h.logs[0][1], /^plugin aborted: boom at test\/fixture\.ts:\d+:\d+$/);
});

test("a million calls do not grow memory", () => {
  const { h, exports } = load({ topic: "t.echo", payload: "p".repeat(200), headers: { h: "v".repeat(300) } });
  for (let i = 0; i < 10000; i++) exports.tb_on_publish();
  const warm = exports.memory.buffer.byteLength;
  for (let i = 0; i < 1000000; i++) {
    h.emitted.length = 0;
    exports.tb_on_publish();
  }
  assert.equal(exports.memory.buffer.byteLength, warm, `memory grew from ${warm} to ${exports.memory.buffer.byteLength} bytes`);
});
