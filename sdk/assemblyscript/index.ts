// tinybroker plugin ABI v1 for AssemblyScript (docs/ABI.md is the contract).
//
// A plugin's entry file re-exports the version marker and exports the hooks it implements:
//
//   import { msg, config, Publish } from "tinybroker";
//   export { tinybroker_abi_v1 } from "tinybroker";
//
//   export function tb_on_publish(): i64 {
//     const want = config.get("tenant");
//     if (want != null && msg.headerIs("tenant", want)) return Publish.pass();
//     return Publish.drop("wrong tenant");
//   }
//
// Build with the incremental runtime (a garbage collector: what a call allocates is freed)
// and this package's abort, which logs the message and traps:
//
//   asc plugin.ts -o plugin.wasm -O --runtime incremental --use abort=tinybroker/abort
//
// Strings cross the boundary as UTF-8; payloads as Uint8Array. Readers read through a 1 KiB
// static scratch buffer, so a value that fits costs one host call and one allocation (the
// string or array returned); a longer one a second host call. Writers return a Status
// (0 = OK, negative = refused).

// ---- host functions (module "tinybroker") ----

// @ts-ignore: decorator
@external("tinybroker", "v1_log") declare function v1_log(level: i32, ptr: usize, len: usize): void;
// @ts-ignore: decorator
@external("tinybroker", "v1_now") declare function v1_now(): i64;
// @ts-ignore: decorator
@external("tinybroker", "v1_config") declare function v1_config(buf: usize, cap: usize): i32;
// @ts-ignore: decorator
@external("tinybroker", "v1_config_get") declare function v1_config_get(key: usize, keyLen: usize, buf: usize, cap: usize): i32;
// @ts-ignore: decorator
@external("tinybroker", "v1_set_reason") declare function v1_set_reason(ptr: usize, len: usize): void;
// @ts-ignore: decorator
@external("tinybroker", "v1_msg_topic") declare function v1_msg_topic(buf: usize, cap: usize): i32;
// @ts-ignore: decorator
@external("tinybroker", "v1_msg_payload") declare function v1_msg_payload(buf: usize, cap: usize): i32;
// @ts-ignore: decorator
@external("tinybroker", "v1_msg_header") declare function v1_msg_header(key: usize, keyLen: usize, buf: usize, cap: usize): i32;
// @ts-ignore: decorator
@external("tinybroker", "v1_msg_header_count") declare function v1_msg_header_count(): i32;
// @ts-ignore: decorator
@external("tinybroker", "v1_msg_header_name") declare function v1_msg_header_name(index: i32, buf: usize, cap: usize): i32;
// @ts-ignore: decorator
@external("tinybroker", "v1_msg_id") declare function v1_msg_id(buf: usize, cap: usize): i32;
// @ts-ignore: decorator
@external("tinybroker", "v1_msg_set_topic") declare function v1_msg_set_topic(ptr: usize, len: usize): i32;
// @ts-ignore: decorator
@external("tinybroker", "v1_msg_set_payload") declare function v1_msg_set_payload(ptr: usize, len: usize): i32;
// @ts-ignore: decorator
@external("tinybroker", "v1_msg_set_header") declare function v1_msg_set_header(key: usize, keyLen: usize, val: usize, valLen: usize): i32;
// @ts-ignore: decorator
@external("tinybroker", "v1_msg_del_header") declare function v1_msg_del_header(key: usize, keyLen: usize): i32;
// @ts-ignore: decorator
@external("tinybroker", "v1_event_subscription") declare function v1_event_subscription(buf: usize, cap: usize): i32;
// @ts-ignore: decorator
@external("tinybroker", "v1_event_group") declare function v1_event_group(buf: usize, cap: usize): i32;
// @ts-ignore: decorator
@external("tinybroker", "v1_event_attempt") declare function v1_event_attempt(): i32;
// @ts-ignore: decorator
@external("tinybroker", "v1_event_in_flight_ns") declare function v1_event_in_flight_ns(): i64;
// @ts-ignore: decorator
@external("tinybroker", "v1_event_reason") declare function v1_event_reason(buf: usize, cap: usize): i32;
// @ts-ignore: decorator
@external("tinybroker", "v1_emit") declare function v1_emit(topic: usize, topicLen: usize, payload: usize, payloadLen: usize): i32;
// @ts-ignore: decorator
@external("tinybroker", "v1_emit_header") declare function v1_emit_header(handle: i32, key: usize, keyLen: usize, val: usize, valLen: usize): i32;

/** The version marker the broker looks for: re-export it from the plugin's entry file. */
export function tinybroker_abi_v1(): void {}

// ---- buffers ----

/** The size of the static buffer every reader tries first. */
export const SCRATCH_BYTES: i32 = 1024;
const scratch: usize = memory.data(SCRATCH_BYTES);

// Strings handed to the host are encoded here when they fit (keys, names, short values),
// so that writing one allocates nothing; two areas, for a key and its value.
const ENCODE_BYTES: i32 = 512;
const encodeKey: usize = memory.data(ENCODE_BYTES);
const encodeVal: usize = memory.data(ENCODE_BYTES);

// A string's UTF-8 bytes: ptr/len valid until the next call with the same area. Long
// strings are encoded into a new buffer, kept alive in `keep` until the next encode.
let keepKey: ArrayBuffer | null = null;
let keepVal: ArrayBuffer | null = null;
let encPtr: usize = 0;
let encLen: usize = 0;

function encode(s: string, area: usize, key: bool): void {
  const units = s.length;
  if (units * 3 <= ENCODE_BYTES) {
    encPtr = area;
    encLen = String.UTF8.encodeUnsafe(changetype<usize>(s), units, area);
    return;
  }
  const buf = String.UTF8.encode(s);
  if (key) keepKey = buf; else keepVal = buf;
  encPtr = changetype<usize>(buf);
  encLen = <usize>buf.byteLength;
}

// Reads a value with the ABI's convention. Returns its length (-1: absent) and leaves its
// bytes at readPtr: the scratch buffer, or readBuf when longer.
let readBuf: ArrayBuffer | null = null;
let readPtr: usize = 0;

// The reader kinds, so that read can call the right host function without a closure.
const R_TOPIC = 0, R_PAYLOAD = 1, R_HEADER = 2, R_HEADER_NAME = 3, R_ID = 4, R_CONFIG = 5,
  R_CONFIG_GET = 6, R_SUBSCRIPTION = 7, R_GROUP = 8, R_REASON = 9;

function call(kind: i32, a: usize, b: usize, buf: usize, cap: usize): i32 {
  switch (kind) {
    case R_TOPIC: return v1_msg_topic(buf, cap);
    case R_PAYLOAD: return v1_msg_payload(buf, cap);
    case R_HEADER: return v1_msg_header(a, b, buf, cap);
    case R_HEADER_NAME: return v1_msg_header_name(<i32>a, buf, cap);
    case R_ID: return v1_msg_id(buf, cap);
    case R_CONFIG: return v1_config(buf, cap);
    case R_CONFIG_GET: return v1_config_get(a, b, buf, cap);
    case R_SUBSCRIPTION: return v1_event_subscription(buf, cap);
    case R_GROUP: return v1_event_group(buf, cap);
    default: return v1_event_reason(buf, cap);
  }
}

function read(kind: i32, a: usize = 0, b: usize = 0): i32 {
  readBuf = null;
  const n = call(kind, a, b, scratch, SCRATCH_BYTES);
  readPtr = scratch;
  if (n <= SCRATCH_BYTES) return n;
  const buf = new ArrayBuffer(n);
  readBuf = buf;
  readPtr = changetype<usize>(buf);
  const got = call(kind, a, b, readPtr, n);
  return got < n ? max(got, 0) : n;
}

function readString(kind: i32, a: usize = 0, b: usize = 0): string | null {
  const n = read(kind, a, b);
  if (n < 0) return null;
  const s = String.UTF8.decodeUnsafe(readPtr, n);
  readBuf = null;
  return s;
}

function readBytes(kind: i32): Uint8Array {
  const n = read(kind);
  if (n <= 0) return new Uint8Array(0);
  const out = new Uint8Array(n);
  memory.copy(out.dataStart, readPtr, n);
  readBuf = null;
  return out;
}

// ---- statuses and errors ----

/** The writers' statuses (docs/ABI.md). */
export namespace Status {
  /** Done. */
  export const OK: i32 = 0;
  /** Malformed: a bad topic, an empty header name. */
  export const INVALID: i32 = -1;
  /** Over max_message_bytes or max_header_bytes. */
  export const TOO_LARGE: i32 = -2;
  /** Not available in this hook. */
  export const NOT_ALLOWED: i32 = -3;
  /** max_emits for this call used up. */
  export const LIMIT: i32 = -4;

  /** A status's name, for logs. */
  export function name(status: i32): string {
    switch (status) {
      case OK: return "OK";
      case INVALID: return "ERR_INVALID";
      case TOO_LARGE: return "ERR_TOO_LARGE";
      case NOT_ALLOWED: return "ERR_NOT_ALLOWED";
      case LIMIT: return "ERR_LIMIT";
      default: return "status " + status.toString();
    }
  }
}

// ---- the message ----

/** The message of the hook, as it entered the call. */
export namespace msg {
  /** The topic. */
  export function topic(): string {
    const s = readString(R_TOPIC);
    return s == null ? "" : s;
  }

  /** Whether the topic is exactly `t`; allocates nothing for short topics. */
  export function topicIs(t: string): bool {
    const n = read(R_TOPIC);
    const ok = n >= 0 && bytesEqualLen(n, t);
    readBuf = null;
    return ok;
  }

  /** The payload. */
  export function payload(): Uint8Array {
    return readBytes(R_PAYLOAD);
  }

  /** The payload as a UTF-8 string. */
  export function payloadString(): string {
    const s = readString(R_PAYLOAD);
    return s == null ? "" : s;
  }

  /** One header's value, or null if it is not set. */
  export function header(name: string): string | null {
    encode(name, encodeKey, true);
    return readString(R_HEADER, encPtr, encLen);
  }

  /** Whether header `name` is set to exactly `value`; allocates nothing for short values. */
  export function headerIs(name: string, value: string): bool {
    encode(name, encodeKey, true);
    const n = read(R_HEADER, encPtr, encLen);
    const ok = n >= 0 && bytesEqualLen(n, value);
    readBuf = null;
    return ok;
  }

  /** How many headers the message has. */
  export function headerCount(): i32 {
    return v1_msg_header_count();
  }

  /** The name of header `index` (0-based, sorted by name), or null past the end. */
  export function headerName(index: i32): string | null {
    return readString(R_HEADER_NAME, <usize>index);
  }

  /** The message's system_id in on_ack and on_redeliver; null in on_publish. */
  export function id(): string | null {
    const s = readString(R_ID);
    return s == null || s.length == 0 ? null : s;
  }

  /** Routes the message to `t` instead (on_publish). */
  export function setTopic(t: string): i32 {
    encode(t, encodeVal, false);
    return v1_msg_set_topic(encPtr, encLen);
  }

  /** Replaces the payload (on_publish). */
  export function setPayload(p: Uint8Array): i32 {
    return v1_msg_set_payload(p.dataStart, <usize>p.byteLength);
  }

  /** Replaces the payload with a string's UTF-8 bytes (on_publish). */
  export function setPayloadString(p: string): i32 {
    encode(p, encodeVal, false);
    return v1_msg_set_payload(encPtr, encLen);
  }

  /** Adds or replaces a header (on_publish, on_redeliver). */
  export function setHeader(name: string, value: string): i32 {
    encode(name, encodeKey, true);
    const k = encPtr, kl = encLen;
    encode(value, encodeVal, false);
    return v1_msg_set_header(k, kl, encPtr, encLen);
  }

  /** Removes a header; OK if it was not set (on_publish, on_redeliver). */
  export function delHeader(name: string): i32 {
    encode(name, encodeKey, true);
    return v1_msg_del_header(encPtr, encLen);
  }
}

function bytesEqualLen(n: i32, s: string): bool {
  const p = readPtr;
  encode(s, encodeVal, false);
  return <usize>n == encLen && memory.compare(p, encPtr, encLen) == 0;
}

// ---- the event of on_ack and on_redeliver ----

/** The delivery that on_ack and on_redeliver are about. */
export namespace event {
  /** The consumer group's subscription_id. */
  export function subscription(): string {
    const s = readString(R_SUBSCRIPTION);
    return s == null ? "" : s;
  }
  /** The consumer group's name. */
  export function group(): string {
    const s = readString(R_GROUP);
    return s == null ? "" : s;
  }
  /** The delivery attempt that was acked, or that failed (1 = first). */
  export function attempt(): i32 {
    return v1_event_attempt();
  }
  /** Nanoseconds from the acked delivery to its ack (on_ack). */
  export function inFlightNs(): i64 {
    return v1_event_in_flight_ns();
  }
  /** Why the message is redelivered (on_redeliver). */
  export function reason(): string {
    const s = readString(R_REASON);
    return s == null ? "" : s;
  }
}

// ---- configuration ----

/** The plugin's config block. */
export namespace config {
  /** One value by key, or null if it is not set. */
  export function get(key: string): string | null {
    encode(key, encodeKey, true);
    return readString(R_CONFIG_GET, encPtr, encLen);
  }

  /** The whole configuration as the ABI gives it: "key=value\n" lines sorted by key, with
   *  "\\", newline and carriage return escaped. */
  export function text(): string {
    const s = readString(R_CONFIG);
    return s == null ? "" : s;
  }

  /** The whole configuration, unescaped. */
  export function all(): Map<string, string> {
    return parse(text());
  }

  /** Decodes config.text(). */
  export function parse(t: string): Map<string, string> {
    const out = new Map<string, string>();
    const lines = t.split("\n");
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      if (line.length == 0) continue;
      const eq = line.indexOf("=");
      if (eq < 0) out.set(unescape(line), "");
      else out.set(unescape(line.substring(0, eq)), unescape(line.substring(eq + 1)));
    }
    return out;
  }

  function unescape(s: string): string {
    if (s.indexOf("\\") < 0) return s;
    let out = "";
    for (let i = 0; i < s.length; i++) {
      const c = s.charAt(i);
      if (c != "\\" || i + 1 == s.length) { out += c; continue; }
      i++;
      const e = s.charAt(i);
      out += e == "n" ? "\n" : e == "r" ? "\r" : e;
    }
    return out;
  }
}

// ---- logging, time, reasons ----

/** The broker's log levels. */
export enum Level { Trace = 0, Debug = 1, Info = 2, Warn = 3, Error = 4 }

/** Logs a line through the broker's logger, tagged with the plugin's name. */
export function log(level: Level, line: string): void {
  encode(line, encodeVal, false);
  v1_log(level, encPtr, encLen);
}

/** Wall-clock time, nanoseconds since the Unix epoch. */
export function nowNs(): i64 {
  return v1_now();
}

/** The reason for this call's verdict; the last call wins. */
export function setReason(reason: string): void {
  encode(reason, encodeVal, false);
  v1_set_reason(encPtr, encLen);
}

// ---- emitting ----

/** A message emitted by emit(): status is its handle (>= 0) or why it was refused (< 0). */
export class Emitted {
  constructor(public status: i32) {}

  /** Whether the broker accepted the message. */
  get ok(): bool { return this.status >= 0; }

  /** Sets a header of the emitted message; returns a Status. If refused, the message still
   *  goes out without it. */
  header(name: string, value: string): i32 {
    if (this.status < 0) return this.status;
    encode(name, encodeKey, true);
    const k = encPtr, kl = encLen;
    encode(value, encodeVal, false);
    return v1_emit_header(this.status, k, kl, encPtr, encLen);
  }
}

/** Emits a message, published when the hook returns successfully (whatever its verdict),
 *  after the message itself. */
export function emit(topic: string, payload: Uint8Array): Emitted {
  encode(topic, encodeKey, true);
  return new Emitted(v1_emit(encPtr, encLen, payload.dataStart, <usize>payload.byteLength));
}

/** Emits a message whose payload is a string's UTF-8 bytes. */
export function emitString(topic: string, payload: string): Emitted {
  encode(topic, encodeKey, true);
  const t = encPtr, tl = encLen;
  encode(payload, encodeVal, false);
  return new Emitted(v1_emit(t, tl, encPtr, encLen));
}

// ---- verdicts ----

function verdict(action: u32, arg: u32): i64 {
  return <i64>(<u64>action | (<u64>arg << 32));
}

/** gRPC status codes for Publish.reject. */
export namespace Code {
  export const INVALID_ARGUMENT: u32 = 3;
  export const NOT_FOUND: u32 = 5;
  export const PERMISSION_DENIED: u32 = 7;
  export const RESOURCE_EXHAUSTED: u32 = 8;
  export const FAILED_PRECONDITION: u32 = 9;
  export const UNAVAILABLE: u32 = 14;
  export const UNAUTHENTICATED: u32 = 16;
}

/** The verdicts of tb_on_publish. */
export namespace Publish {
  /** Continue with the message as changed by this call. */
  export function pass(): i64 { return verdict(0, 0); }
  /** Drop the message, saying why. */
  export function drop(reason: string): i64 { setReason(reason); return verdict(1, 0); }
  /** Refuse the publish with gRPC status `code` (1-16, see Code) and a reason. */
  export function reject(code: u32, reason: string): i64 { setReason(reason); return verdict(2, code); }
}

/** The verdicts of tb_on_redeliver. */
export namespace Redeliver {
  /** The broker's default: redeliver, or dead-letter past max_deliveries. */
  export function redeliver(): i64 { return verdict(0, 0); }
  /** Redeliver after `ms` milliseconds (clamped to 1 .. 2^31-1). */
  export function delay(ms: u32): i64 { return verdict(1, max<u32>(1, min<u32>(ms, 0x7fffffff))); }
  /** Dead-letter now, saying why. */
  export function deadLetter(reason: string): i64 { setReason(reason); return verdict(2, 0); }
  /** Forget the message. */
  export function drop(): i64 { return verdict(3, 0); }
}

/** tb_init's answers: export function tb_init(): i32 { return Init.ok(); } */
export namespace Init {
  /** Accept the configuration. */
  export function ok(): i32 { return 0; }
  /** Refuse the load, saying why. */
  export function refuse(reason: string): i32 { setReason(reason); return 1; }
}

// ---- abort ----

let aborting = false;

/** The abort of `--use abort=tinybroker/abort`: logs the message at error level, then traps
 *  (the plugin's failure_policy decides the message's fate). */
export function abort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  if (!aborting) {
    aborting = true; // an abort while logging (out of memory) must not recurse
    const text = "plugin aborted: " + (message == null ? "" : message) + " at " +
      (fileName == null ? "?" : fileName) + ":" + line.toString() + ":" + column.toString();
    log(Level.Error, text);
  }
  unreachable();
}
