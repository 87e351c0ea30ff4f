// Runs the SDK, compiled into test/fixture.ts, in Node with a fake host: its readers,
// writers and verdicts, and that a million calls do not grow its memory (the incremental
// runtime frees what each call allocates; the stub runtime would not). Then the same with the
// inbox (docs/ABI.md, "The inbox" and "Batches"): the fake host writes each message into the
// plugin's inbox and reads back its write lists, and fails the test on a host call that the
// inbox should have saved.
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
  const h = { msg, config, reason: "", payload: null, emitted: [], logs: [], calls: [], inbox: 0 };
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
  // The batch's current message when a host function is called (docs/ABI.md, "Batches").
  const current = () => h.batch ? new DataView(mem.buffer).getUint32(h.inbox + 4, true) : 0;
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
      v1_emit: (t, tl, p, pl) => h.emitted.push({ topic: str(t, tl), payload: str(p, pl), headers: {}, current: current() }) - 1,
      v1_emit_header: (i, k, kl, v, vl) => { h.emitted[i].headers[str(k, kl)] = str(v, vl); return 0; },
      v1_msg_key: (b, c) => copy(h.msg.key ?? "", b, c),
      v1_msg_set_key: (p, n) => { h.key = str(p, n); return h.key.includes("\n") ? -1 : 0; },
      v1_emit_key: (i, p, n) => { h.emitted[i].key = str(p, n); return 0; },
    },
  };
  // Every host call is noted by name.
  for (const [name, f] of Object.entries(h.imports.tinybroker)) {
    h.imports.tinybroker[name] = (...args) => { h.calls.push(name); return f(...args); };
  }
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
  assert.deepEqual(verdict(exports.tb_v1_on_publish()), { action: 0, arg: 0 });
  assert.equal(h.payload, "héllo:body");
  assert.deepEqual(h.emitted, [{ topic: "t.copy", payload: "body", headers: { from: "t.echo" }, current: 0 }]);
});

test("values longer than the scratch buffer are read whole", () => {
  const long = "x".repeat(5000), payload = "y".repeat(40000);
  const { h, exports } = load({ topic: "t.echo", payload, headers: { h: long } });
  exports.tb_v1_on_publish();
  assert.equal(h.payload, long + ":" + payload);
});

test("a missing header is null", () => {
  const { h, exports } = load({ topic: "t.echo", payload: "", headers: {} });
  exports.tb_v1_on_publish();
  assert.equal(h.payload, "<none>:");
});

test("tenant filter: headerIs and the drop and pass verdicts", () => {
  for (const [headers, want, reason] of [[{ tenant: "acme" }, 0, ""], [{ tenant: "acm" }, 1, "wrong tenant"],
    [{ tenant: "acmex" }, 1, "wrong tenant"], [{}, 1, "wrong tenant"]]) {
    const { h, exports } = load({ topic: "t.tenant", payload: "", headers });
    assert.equal(verdict(exports.tb_v1_on_publish()).action, want, JSON.stringify(headers));
    assert.equal(h.reason, reason);
  }
});

test("reject packs its code and sets the reason", () => {
  const { h, exports } = load({ topic: "t.reject", payload: "", headers: {} });
  assert.deepEqual(verdict(exports.tb_v1_on_publish()), { action: 2, arg: 7 });
  assert.equal(h.reason, "no t.reject");
});

test("the key is read, set and given to an emit", () => {
  const { h, exports } = load({ topic: "t.key", payload: "", headers: { tenant: "acme" }, key: "pub" });
  assert.deepEqual(verdict(exports.tb_v1_on_publish()), { action: 0, arg: 0 });
  assert.equal(h.key, "acme");
  assert.deepEqual(h.emitted, [{ topic: "t.keyed", payload: "pub|0", headers: {}, current: 0, key: "e-pub" }]);
  const bad = load({ topic: "t.key", payload: "", headers: { tenant: "a\nb" } });
  bad.exports.tb_v1_on_publish();
  assert.deepEqual(bad.h.emitted[0].payload, "|-1");
});

test("the whole config is unescaped", () => {
  const { h, exports } = load({ topic: "t.config", payload: "", headers: {} });
  exports.tb_v1_on_publish();
  assert.equal(h.payload, "a\nb|multi,tenant");
});

test("a delay of 0 ms is sent as 1 ms, a valid verdict", () => {
  const { exports } = load({ topic: "t", payload: "", headers: {} });
  assert.deepEqual(verdict(exports.tb_v1_on_redeliver()), { action: 1, arg: 1 });
});

test("init refuses with a reason", () => {
  const { h, exports } = load({ topic: "t", payload: "", headers: {} }, { refuse: "1" });
  assert.equal(exports.tb_v1_init(), 1);
  assert.equal(h.reason, "refused");
});

test("an abort logs its message at error level and traps", () => {
  const { h, exports } = load({ topic: "t.abort", payload: "", headers: {} });
  assert.throws(() => exports.tb_v1_on_publish(), WebAssembly.RuntimeError);
  assert.equal(h.logs.length, 1);
  assert.equal(h.logs[0][0], 4);
  assert.match(h.logs[0][1], /^plugin aborted: boom at test\/fixture\.ts:\d+:\d+$/);
});

test("a million calls do not grow memory", () => {
  const { h, exports } = load({ topic: "t.echo", payload: "p".repeat(200), headers: { h: "v".repeat(300) } });
  for (let i = 0; i < 10000; i++) exports.tb_v1_on_publish();
  const warm = exports.memory.buffer.byteLength;
  for (let i = 0; i < 1000000; i++) {
    h.emitted.length = 0;
    exports.tb_v1_on_publish();
  }
  assert.equal(exports.memory.buffer.byteLength, warm, `memory grew from ${warm} to ${exports.memory.buffer.byteLength} bytes`);
});

// ---- the inbox ----

const enc = new TextEncoder(), dec = new TextDecoder();
const HOOKS = { init: 1, publish: 2, ack: 3, redeliver: 4 };
const ABSENT = 0xffffffff;
const OPS = { 1: "set_payload", 2: "set_header", 3: "del_header", 4: "set_reason" };

// record lays out one call's inbox as docs/ABI.md does, its offsets from its own start: the
// header fields, the header table sorted by name, then the values.
function record(m) {
  const names = Object.keys(m.headers ?? {}).sort((a, b) => Buffer.compare(enc.encode(a), enc.encode(b)));
  const fixed = 88 + 16 * names.length;
  const values = [];
  let pos = fixed;
  const head = new DataView(new ArrayBuffer(fixed));
  const value = (dv, at, v) => {
    if (v == null) { dv.setUint32(at, 0, true); dv.setUint32(at + 4, ABSENT, true); return; }
    const b = typeof v === "string" ? enc.encode(v) : v;
    dv.setUint32(at, pos, true);
    dv.setUint32(at + 4, b.length, true);
    values.push(b);
    pos += b.length;
  };
  head.setUint32(8, HOOKS[m.hook ?? "publish"], true);
  head.setUint32(12, m.maxMessage ?? 1 << 20, true);
  head.setUint32(16, m.maxHeader ?? 1 << 16, true);
  head.setUint32(20, m.attempt ?? 0, true);
  head.setBigUint64(24, BigInt(m.inFlight ?? 0), true);
  value(head, 32, m.topic ?? "");
  value(head, 40, m.payload ?? "");
  value(head, 48, m.id ?? null);
  value(head, 56, m.sub ?? "");
  value(head, 64, m.group ?? "");
  value(head, 72, m.reason ?? "");
  head.setUint32(80, names.length, true);
  names.forEach((k, i) => { value(head, 88 + 16 * i, k); value(head, 96 + 16 * i, m.headers[k]); });
  const out = new Uint8Array((pos + 7) & ~7);
  out.set(new Uint8Array(head.buffer));
  let at = fixed;
  for (const v of values) { out.set(v, at); at += v.length; }
  return out;
}

// loadInbox instantiates the fixture as a broker with the inbox does: it asks for an inbox
// first, and again whenever a message does not fit.
function loadInbox(cfg = config) {
  const h = host({ topic: "", payload: "", headers: {} }, cfg);
  const exports = h.bind(new WebAssembly.Instance(incremental, h.imports));
  let size = 4096;
  h.inbox = exports.tb_v1_inbox(size);
  assert.equal(h.inbox % 8, 0, "the inbox is 8-aligned");
  const view = () => new DataView(exports.memory.buffer);
  const put = (bytes) => {
    if (bytes.length > size) {
      while (size < bytes.length) size *= 2;
      h.inbox = exports.tb_v1_inbox(size);
      assert.equal(h.inbox % 8, 0, "the inbox is 8-aligned");
    }
    new Uint8Array(exports.memory.buffer, h.inbox, bytes.length).set(bytes);
  };
  // The write list of the record at ptr, as [op, a, b] with a and b decoded.
  const writes = (ptr) => {
    const dv = view(), list = dv.getUint32(ptr, true), n = dv.getUint32(ptr + 4, true), out = [];
    for (let i = 0; i < n; i++) {
      const r = list + 20 * i, s = (at) => dec.decode(new Uint8Array(exports.memory.buffer, dv.getUint32(r + at, true), dv.getUint32(r + at + 4, true)));
      const w = [OPS[dv.getUint32(r, true)] ?? "op " + dv.getUint32(r, true), s(4)];
      if (dv.getUint32(r, true) == 2) w.push(s(12));
      out.push(w);
    }
    return out;
  };
  // One call of hook with message m: its verdict and write list.
  const call = (hook, m) => {
    h.batch = false;
    put(record({ hook, ...m }));
    const fn = { init: "tb_v1_init", publish: "tb_v1_on_publish", ack: "tb_v1_on_ack", redeliver: "tb_v1_on_redeliver" }[hook];
    const v = exports[fn]();
    return { verdict: typeof v === "bigint" ? verdict(v) : v, writes: writes(h.inbox) };
  };
  // One batch of messages: each one's verdict and write list, read once the call returned.
  const batch = (msgs) => {
    h.batch = true;
    const recs = msgs.map((m) => record({ hook: "publish", ...m }));
    const table = 16 + 16 * msgs.length;
    const total = recs.reduce((n, r) => n + r.length, table);
    const b = new Uint8Array(total), dv = new DataView(b.buffer);
    dv.setUint32(0, msgs.length, true);
    let at = table;
    recs.forEach((r, i) => {
      dv.setUint32(16 + 16 * i, at, true);
      dv.setUint32(20 + 16 * i, r.length, true);
      b.set(r, at);
      at += r.length;
    });
    put(b);
    const rc = exports.tb_v1_on_publish_batch();
    const out = view();
    const results = msgs.map((_, i) => ({
      verdict: verdict(out.getBigUint64(h.inbox + 24 + 16 * i, true)),
      writes: writes(h.inbox + out.getUint32(h.inbox + 16 + 16 * i, true)),
    }));
    return { rc, results, bytes: b };
  };
  return { h, exports, call, batch, put };
}

// The host functions that the inbox replaces: an inbox build calls none of them.
const SAVED = ["v1_msg_topic", "v1_msg_payload", "v1_msg_header", "v1_msg_header_count", "v1_msg_header_name",
  "v1_msg_id", "v1_msg_set_payload", "v1_msg_set_header", "v1_msg_del_header", "v1_set_reason", "v1_event_subscription",
  "v1_event_group", "v1_event_attempt", "v1_event_in_flight_ns", "v1_event_reason"];
const saved = (h) => h.calls.filter((c) => SAVED.includes(c));

test("inbox: readers read the message from it, writers list their writes", () => {
  const { h, call } = loadInbox();
  const long = "x".repeat(5000), payload = "y".repeat(40000);
  assert.deepEqual(call("publish", { topic: "t.echo", payload, headers: { h: long } }),
    { verdict: { action: 0, arg: 0 }, writes: [["set_payload", long + ":" + payload]] });
  assert.deepEqual(h.emitted, [{ topic: "t.copy", payload, headers: { from: "t.echo" }, current: 0 }]);
  assert.deepEqual(call("publish", { topic: "t.echo", payload: "", headers: {} }).writes, [["set_payload", "<none>:"]]);
  assert.deepEqual(saved(h), []);
});

test("inbox: headers by index (sorted by name) and by name, many of them", () => {
  const { h, call } = loadInbox();
  const headers = { b: "2", a: "1", "c-long": "three", empty: "", "é": "ü" };
  for (let i = 0; i < 40; i++) headers["k" + i] = "v" + i;
  const names = Object.keys(headers).sort((a, b) => Buffer.compare(enc.encode(a), enc.encode(b)));
  const want = names.map((k) => k + "=" + headers[k]).join(",") + ",missing=null,topicIs=10";
  assert.deepEqual(call("publish", { topic: "t.headers", headers }).writes, [["set_payload", want]]);
  assert.deepEqual(call("publish", { topic: "t.headers" }).writes, [["set_payload", "missing=null,topicIs=10"]]);
  assert.deepEqual(saved(h), []);
});

test("inbox: writes the host would refuse are refused, not listed", () => {
  const { h, call } = loadInbox();
  const got = call("publish", { topic: "t.limits", headers: { big: "b".repeat(100) }, maxHeader: 100, maxMessage: 199 });
  assert.equal(h.emitted[0].payload, "-1,-2,-2,-2,0,0,0"); // INVALID, TOO_LARGE x3, then OK
  assert.deepEqual(got, {
    verdict: { action: 1, arg: 0 },
    writes: [["set_header", "k", "é"], ["del_header", "gone"], ["set_payload", "raw"], ["set_reason", "limits"]],
  });
  // At the limits exactly: a header of max_header_bytes with its name, a payload of max_message_bytes.
  h.emitted.length = 0;
  call("publish", { topic: "t.limits", headers: { big: "b".repeat(99) }, maxHeader: 100, maxMessage: 198 });
  assert.equal(h.emitted[0].payload, "-1,0,0,0,0,0,0");
  assert.deepEqual(saved(h), []);
});

test("inbox: on_ack and on_redeliver read the event; changes not allowed there are refused", () => {
  const { h, call } = loadInbox();
  const ack = call("ack", { topic: "jobs.1", id: "id-7", sub: "s", group: "g", attempt: 3, inFlight: 2n ** 40n + 5n });
  assert.deepEqual(ack, { verdict: { action: 0, arg: 0 }, writes: [] });
  assert.equal(h.emitted[0].payload, `id-7|s|g|3|${2 ** 40 + 5}|-3|-3`);
  const re = call("redeliver", { topic: "jobs.1", id: "id-7", reason: "ack deadline exceeded" });
  assert.deepEqual(re, { verdict: { action: 1, arg: 1 }, writes: [["set_header", "why", "ack deadline exceeded"]] });
  assert.equal(h.emitted[1].payload, "-3");
  assert.deepEqual(saved(h), []);
});

test("inbox: tb_v1_init gives its reason in the write list; config values are read once", () => {
  const { h, exports, call } = loadInbox({ refuse: "1", tenant: "acme" });
  assert.deepEqual(call("init", {}), { verdict: 1, writes: [["set_reason", "refused"]] });
  for (let i = 0; i < 3; i++) call("publish", { topic: "t.tenant", headers: { tenant: "acme" } });
  assert.deepEqual(h.calls.filter((c) => c == "v1_config_get"), ["v1_config_get", "v1_config_get"]); // refuse, tenant
  assert.deepEqual(saved(h), []);
  assert.ok(exports);
});

test("inbox: each call's write list starts empty", () => {
  const { call } = loadInbox();
  assert.deepEqual(call("publish", { topic: "t.reject" }).writes, [["set_reason", "no t.reject"]]);
  assert.deepEqual(call("publish", { topic: "t.tenant", headers: { tenant: "acme" } }).writes, []);
  assert.deepEqual(call("publish", { topic: "t.tenant" }).writes, [["set_reason", "wrong tenant"]]);
});

test("batch: each message is decided as alone, its writes its own, host calls on it", () => {
  const { h, call, batch } = loadInbox();
  const msgs = [
    { topic: "t.reject" },
    { topic: "t.echo", payload: "one", headers: { h: "1" } },
    { topic: "t.tenant", headers: { tenant: "acme" } },
    { topic: "t.tenant", headers: { tenant: "globex" } },
    { topic: "t.headers", headers: { b: "2", a: "1" } },
    { topic: "t.echo", payload: "z".repeat(3000), headers: { h: "w".repeat(3000) } }, // past the static area
  ];
  for (let i = 0; i < 30; i++) msgs.push({ topic: "t.echo", payload: "p" + i, headers: { h: "h" + i } }); // past 16 records
  const alone = msgs.map((m) => call("publish", m));
  const emittedAlone = h.emitted.splice(0).map((e, i) => ({ ...e, current: i }));
  const { rc, results } = batch(msgs);
  assert.equal(rc, 0);
  assert.deepEqual(results, alone);
  // The emits of the echo messages, each made while its message was current.
  const echo = msgs.map((m, i) => [m, i]).filter(([m]) => m.topic == "t.echo").map(([, i]) => i);
  assert.deepEqual(h.emitted.map((e) => e.current), echo);
  assert.deepEqual(h.emitted.map(({ current, ...e }) => e), emittedAlone.map(({ current, ...e }) => e));
  assert.deepEqual(saved(h), []);
  // A single call after a batch reads the whole inbox again, and a second batch starts afresh.
  assert.deepEqual(call("publish", { topic: "t.reject" }), alone[0]);
  assert.deepEqual(batch([{ topic: "t.tenant", headers: { tenant: "acme" } }, { topic: "t.reject" }]).results, [alone[2], alone[0]]);
});

test("batch: a layout the SDK cannot read is declined before any message runs", () => {
  const { h, exports, batch, put } = loadInbox();
  const { bytes } = batch([{ topic: "t.echo" }, { topic: "t.echo" }]);
  h.emitted.length = 0;
  const dv = new DataView(bytes.buffer);
  for (const [what, edit] of [
    ["a misaligned record", (d) => d.setUint32(32, d.getUint32(32, true) + 4, true)],
    ["a record inside the table", (d) => d.setUint32(32, 16, true)],
    ["a record past the inbox", (d) => d.setUint32(36, 1 << 20, true)],
    ["a record too short", (d) => d.setUint32(36, 80, true)],
    ["a count past the inbox", (d) => d.setUint32(0, 1 << 28, true)],
    ["a record of another hook", (d) => d.setUint32(d.getUint32(32, true) + 8, 3, true)],
  ]) {
    const b = new Uint8Array(bytes), d = new DataView(b.buffer);
    edit(d);
    put(b);
    assert.equal(exports.tb_v1_on_publish_batch(), 1, what);
    assert.deepEqual(h.emitted, [], what);
  }
  assert.ok(dv);
});

test("a million inbox calls and 20,000 batches do not grow memory", () => {
  const { h, exports, call, batch } = loadInbox();
  const m = { topic: "t.echo", payload: "p".repeat(200), headers: { h: "v".repeat(300) } };
  const msgs = [m, { topic: "t.reject" }, { topic: "t.headers", headers: { a: "1", b: "x".repeat(300) } }, m];
  const frame = Array.from({ length: 32 }, (_, i) => msgs[i % msgs.length]);
  for (let i = 0; i < 10000; i++) call("publish", m);
  for (let i = 0; i < 1000; i++) batch(frame);
  call("publish", m);
  h.emitted.length = 0;
  const warm = exports.memory.buffer.byteLength;
  const words = new Uint32Array(exports.memory.buffer, h.inbox, 2);
  for (let i = 0; i < 1000000; i++) {
    if (i % 1000 == 0) h.emitted.length = 0;
    words[0] = words[1] = 0; // the broker writes the message before each call: the same one here
    exports.tb_v1_on_publish();
  }
  for (let i = 0; i < 20000; i++) {
    h.emitted.length = 0;
    h.calls.length = 0;
    batch(frame);
  }
  assert.equal(exports.memory.buffer.byteLength, warm, `memory grew from ${warm} to ${exports.memory.buffer.byteLength} bytes`);
});
