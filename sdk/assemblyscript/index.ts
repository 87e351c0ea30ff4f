// tinybroker plugin ABI v1 for AssemblyScript (docs/ABI.md is the contract).
//
// A plugin's entry file re-exports the version marker and the inbox, exports the hooks it
// implements, and takes batches with its own tb_on_publish:
//
//   import { msg, config, publishBatch, Publish } from "tinybroker";
//   export { tinybroker_abi_v1, tb_v1_inbox } from "tinybroker";
//
//   export function tb_on_publish(): i64 {
//     const want = config.get("tenant");
//     if (want != null && msg.headerIs("tenant", want)) return Publish.pass();
//     return Publish.drop("wrong tenant");
//   }
//
//   export function tb_v1_on_publish_batch(): i32 { return publishBatch(tb_on_publish); }
//
// Build with the incremental runtime (a garbage collector: what a call allocates is freed)
// and this package's abort, which logs the message and traps:
//
//   asc plugin.ts -o plugin.wasm -O3 --runtime incremental --use abort=~lib/tinybroker/index/abort
//
// With tb_v1_inbox exported (docs/ABI.md, "The inbox") the broker writes each call's message
// into a buffer of the plugin's before the call: the readers read it there, and payload and
// header changes and the reason go back in the inbox's write list, with no host call. A
// broker that never calls tb_v1_inbox (one older than the inbox), or an entry file that does
// not export it, gets host calls: readers read through a 1 KiB static scratch buffer, so a
// value that fits costs one host call and one allocation (the string or array returned); a
// longer one a second host call. Either way, strings cross the boundary as UTF-8, payloads as
// Uint8Array, and writers return a Status (0 = OK, negative = refused).

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

// Whether abort() is logging, declared before any global that allocates (and might abort).
let aborting = false;

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

// ---- the inbox (docs/ABI.md, "The inbox" and "Batches") ----

// A record's layout: little-endian u32s at fixed offsets from its start, (offset, length)
// pairs of its values (offsets from the record's start too), then the header table.
const IN_WRITES_PTR: usize = 0;
const IN_WRITES_COUNT: usize = 4;
const IN_HOOK: usize = 8;
const IN_MAX_MESSAGE: usize = 12;
const IN_MAX_HEADER: usize = 16;
const IN_ATTEMPT: usize = 20;
const IN_IN_FLIGHT: usize = 24; // a u64
const IN_TOPIC: usize = 32;
const IN_PAYLOAD: usize = 40;
const IN_ID: usize = 48;
const IN_SUB: usize = 56;
const IN_GROUP: usize = 64;
const IN_REASON: usize = 72;
const IN_HEADER_COUNT: usize = 80;
const IN_HEADERS: usize = 88; // entries of IN_ENTRY bytes: name (offset, length), value (offset, length)
const IN_ENTRY: usize = 16;
const ABSENT: u32 = 0xFFFFFFFF;

const HOOK_PUBLISH: u32 = 2;
const HOOK_REDELIVER: u32 = 4;

// A batch: a header (count, current), count entries (record offset, record length, u64
// verdict), then the records.
const BATCH_COUNT: usize = 0;
const BATCH_CURRENT: usize = 4;
const BATCH_ENTRIES: usize = 16;
const BATCH_ENTRY: usize = 16;
const ENTRY_VERDICT: usize = 8;

// The write list's records: five u32s, an operation and two (pointer, length) pairs.
const WRITE_SIZE: usize = 20;
const OP_SET_PAYLOAD: u32 = 1;
const OP_SET_HEADER: u32 = 2;
const OP_DEL_HEADER: u32 = 3;
const OP_SET_REASON: u32 = 4;

// The inbox: 0 until the broker asks for one (a broker without the inbox never does), and
// then the readers and writers use it instead of host calls. inboxBuf keeps it alive.
let inboxBuf: ArrayBuffer | null = null;
let inbox: usize = 0;
let inboxSize: usize = 0;
// The record the readers read: the inbox in a single call, message i's record in a batch.
let rec: usize = 0;

/** The broker asks for an inbox of `size` bytes, between calls: re-export it from the entry
 *  file to have the message written into memory before each call (docs/ABI.md, "The inbox").
 *  The last inbox becomes garbage. */
export function tb_v1_inbox(size: u32): usize {
  const buf = new ArrayBuffer(<i32>size + 8);
  inboxBuf = buf;
  inbox = (changetype<usize>(buf) + 7) & ~7; // the ABI wants a multiple of 8
  inboxSize = size;
  rec = inbox;
  return inbox;
}

/** Whether the broker writes the message into the inbox: the readers and writers of the
 *  payload, headers and reason then make no host call. */
export function inboxActive(): bool {
  return inbox != 0;
}

function u32At(off: usize): u32 {
  return load<u32>(rec + off);
}

function fieldLen(off: usize): u32 {
  return load<u32>(rec + off + 4);
}

function fieldPtr(off: usize): usize {
  return rec + <usize>load<u32>(rec + off);
}

function fieldString(off: usize): string | null {
  const n = fieldLen(off);
  return n == ABSENT ? null : String.UTF8.decodeUnsafe(fieldPtr(off), n);
}

function fieldStringOrEmpty(off: usize): string {
  const s = fieldString(off);
  return s == null ? "" : s;
}

// Whether the value at off is exactly the UTF-8 bytes of s (false if absent).
// @ts-ignore: decorator
@inline function fieldIs(off: usize, s: string): bool {
  const n = fieldLen(off);
  return n != ABSENT && bytesAre(fieldPtr(off), <usize>n, changetype<usize>(s), <usize>s.length);
}

// Whether the n bytes at p are the UTF-8 bytes of the string at q, of units units. An ASCII
// string, the usual name or value, is compared unit by unit, with no encoding and no call:
// its UTF-8 bytes are its units, and any other string's UTF-8 is longer than its units (so
// n == units means equal only if every unit is ASCII and matches). The string comes as a
// pointer, not a reference: a function that takes none needs no frame on the runtime's shadow
// stack, which costs more than this comparison.
function bytesAre(p: usize, n: usize, q: usize, units: usize): bool {
  if (n < units) return false;
  if (n > units) return bytesAreEncoded(p, n, q);
  for (let i: usize = 0; i < n; i++) {
    const c = <u32>load<u16>(q + (i << 1));
    if (c >= 0x80 || c != <u32>load<u8>(p + i)) return false;
  }
  return true;
}

// bytesAre for a string that is not ASCII: encoded, then compared.
function bytesAreEncoded(p: usize, n: usize, q: usize): bool {
  encode(changetype<string>(q), encodeVal, false);
  return n == encLen && memory.compare(p, encPtr, n) == 0;
}

// The order of the n bytes at p against the ASCII string at q, of units units, as
// memory.compare would give it against the string's UTF-8 bytes (which are its units).
function compareAscii(p: usize, n: usize, q: usize, units: usize): i32 {
  const m = min(n, units);
  for (let i: usize = 0; i < m; i++) {
    const a = <i32>load<u8>(p + i), b = <i32>load<u16>(q + (i << 1));
    if (a != b) return a - b;
  }
  return n < units ? -1 : n > units ? 1 : 0;
}

// The header entry whose name is name, or 0: a binary search, the table being sorted by name.
// @ts-ignore: decorator
@inline function findHeader(name: string): usize {
  return findHeaderAt(changetype<usize>(name), <usize>name.length);
}

// findHeader for the string at q, of units units (a pointer: see bytesAre).
function findHeaderAt(q: usize, units: usize): usize {
  for (let i: usize = 0; i < units; i++) {
    if (load<u16>(q + (i << 1)) >= 0x80) return findHeaderEncoded(q);
  }
  // ASCII, the usual name: compared with no encoding and no call.
  let lo: u32 = 0, hi = u32At(IN_HEADER_COUNT);
  while (lo < hi) {
    const mid = lo + ((hi - lo) >> 1);
    const e = IN_HEADERS + <usize>mid * IN_ENTRY;
    const c = compareAscii(fieldPtr(e), <usize>fieldLen(e), q, units);
    if (c == 0) return e;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return 0;
}

// findHeader for a name that is not ASCII: encoded, then compared.
function findHeaderEncoded(q: usize): usize {
  encode(changetype<string>(q), encodeKey, true);
  const k = encPtr, kl = encLen;
  let lo: u32 = 0, hi = u32At(IN_HEADER_COUNT);
  while (lo < hi) {
    const mid = lo + ((hi - lo) >> 1);
    const e = IN_HEADERS + <usize>mid * IN_ENTRY;
    const nl = <usize>fieldLen(e);
    let c = memory.compare(fieldPtr(e), k, min(nl, kl));
    if (c == 0) c = nl < kl ? -1 : nl > kl ? 1 : 0;
    if (c == 0) return e;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return 0;
}

// The write list of the call (or of the batch, message after message): records of
// WRITE_SIZE bytes in writesBuf, kept across calls, and the bytes they point to, copied into
// the arena, where nothing moves until the call ends. The broker zeroes a record's
// writes_count before each call: the first write of a call, seeing 0, starts a new list; a
// batch starts one for all its messages.
const KEEP_WRITES: i32 = 64 << 10;
let writesBuf: ArrayBuffer | null = null;
let nwrites: u32 = 0;
let first: u32 = 0; // the current message's first record
let batching = false;

// The arena: a static area, then chunks that are garbage once the next call has begun.
const AREA_BYTES: usize = 4096;
const area: usize = memory.data(<i32>AREA_BYTES, 8);
let top: usize = area;
let end: usize = area + AREA_BYTES;
const held = new Array<ArrayBuffer>();

function resetWrites(): void {
  nwrites = 0;
  first = 0;
  top = area;
  end = area + AREA_BYTES;
  if (held.length != 0) held.length = 0;
  const w = writesBuf;
  if (w != null && w.byteLength > KEEP_WRITES) writesBuf = null;
}

// Called by every writer that lists a write, before it copies anything.
function writing(): void {
  if (!batching && u32At(IN_WRITES_COUNT) == 0) resetWrites();
}

// n bytes of the arena, valid until the call ends.
function reserve(n: usize): usize {
  if (end - top < n) {
    const size = max<usize>(n, AREA_BYTES);
    const chunk = new ArrayBuffer(<i32>size);
    held.push(chunk);
    top = changetype<usize>(chunk);
    end = top + size;
  }
  const p = top;
  top += n;
  return p;
}

// Copies n bytes at p into the arena and returns where.
function stash(p: usize, n: usize): usize {
  if (n == 0) return 0;
  const q = reserve(n);
  memory.copy(q, p, n);
  return q;
}

// s's UTF-8 bytes in the arena, at encPtr, encLen.
function stashString(s: string): void {
  const units = s.length;
  if (units == 0) {
    encPtr = 0;
    encLen = 0;
    return;
  }
  const p = reserve(<usize>units * 3);
  const q = changetype<usize>(s);
  let i: i32 = 0;
  for (; i < units; i++) { // ASCII, the usual header name or value: copied with no call
    const c = load<u16>(q + (<usize>i << 1));
    if (c >= 0x80) break;
    store<u8>(p + <usize>i, <u8>c);
  }
  encLen = i == units ? <usize>units : String.UTF8.encodeUnsafe(q, units, p);
  encPtr = p;
  top = p + encLen; // give back what the encoding did not use
}

function listWrite(op: u32, a: usize, al: usize, b: usize, bl: usize): void {
  let buf = writesBuf;
  const cap = buf == null ? 0 : <u32>(<usize>buf.byteLength / WRITE_SIZE);
  if (nwrites == cap) {
    const grown = new ArrayBuffer(<i32>(<usize>max<u32>(16, cap * 2) * WRITE_SIZE));
    if (buf != null) memory.copy(changetype<usize>(grown), changetype<usize>(buf), <usize>nwrites * WRITE_SIZE);
    writesBuf = buf = grown;
  }
  const base = changetype<usize>(buf);
  const r = base + <usize>nwrites * WRITE_SIZE;
  store<u32>(r, op);
  store<u32>(r, <u32>a, 4);
  store<u32>(r, <u32>al, 8);
  store<u32>(r, <u32>b, 12);
  store<u32>(r, <u32>bl, 16);
  nwrites++;
  // The list of the message so far: a batch's are given again once it ends (the buffer may
  // have moved since).
  store<u32>(rec + IN_WRITES_PTR, <u32>(base + <usize>first * WRITE_SIZE));
  store<u32>(rec + IN_WRITES_COUNT, nwrites - first);
}

function mayChangeHeaders(): bool {
  const h = u32At(IN_HOOK);
  return h == HOOK_PUBLISH || h == HOOK_REDELIVER;
}

// The writers check what the broker would refuse (a write list has no statuses): each
// returns the status the host function would have.

function inboxSetPayload(p: usize, n: usize): i32 {
  if (u32At(IN_HOOK) != HOOK_PUBLISH) return Status.NOT_ALLOWED;
  if (n > <usize>u32At(IN_MAX_MESSAGE)) return Status.TOO_LARGE;
  writing();
  listWrite(OP_SET_PAYLOAD, stash(p, n), n, 0, 0);
  return Status.OK;
}

function inboxSetPayloadString(s: string): i32 {
  if (u32At(IN_HOOK) != HOOK_PUBLISH) return Status.NOT_ALLOWED;
  if (<usize>String.UTF8.byteLength(s) > <usize>u32At(IN_MAX_MESSAGE)) return Status.TOO_LARGE;
  writing();
  stashString(s);
  listWrite(OP_SET_PAYLOAD, encPtr, encLen, 0, 0);
  return Status.OK;
}

function inboxSetHeader(name: string, value: string): i32 {
  if (!mayChangeHeaders()) return Status.NOT_ALLOWED;
  if (name.length == 0) return Status.INVALID;
  writing();
  stashString(name); // then measured: a header refused leaves only arena space, reclaimed at the next call
  const k = encPtr, kl = encLen;
  stashString(value);
  if (<u64>kl + <u64>encLen > <u64>u32At(IN_MAX_HEADER)) return Status.TOO_LARGE;
  listWrite(OP_SET_HEADER, k, kl, encPtr, encLen);
  return Status.OK;
}

function inboxDelHeader(name: string): i32 {
  if (!mayChangeHeaders()) return Status.NOT_ALLOWED;
  writing();
  stashString(name);
  listWrite(OP_DEL_HEADER, encPtr, encLen, 0, 0);
  return Status.OK;
}

function inboxSetReason(reason: string): void {
  writing();
  stashString(reason);
  listWrite(OP_SET_REASON, encPtr, encLen, 0, 0);
}

/** Runs `onPublish`, the plugin's own tb_on_publish, on each message of a batch (docs/ABI.md,
 *  "Batches"), as the broker would call it on that message alone: the readers read that
 *  message, host calls (setTopic, emit, log) act on it, and its changes are its own. Export
 *  it from the entry file, with the inbox:
 *
 *    export function tb_v1_on_publish_batch(): i32 { return publishBatch(tb_on_publish); }
 *
 *  Returns 0, or 1 to decline a batch this SDK cannot read (the broker then calls
 *  tb_on_publish on each message). */
// @ts-ignore: decorator
@inline export function publishBatch(onPublish: () => i64): i32 {
  const n = batchBegin();
  if (n < 0) return 1;
  for (let i = 0; i < n; i++) {
    batchMessage(i);
    batchVerdict(i, onPublish());
  }
  batchEnd(n);
  return 0;
}

function batchEntry(i: i32): usize {
  return inbox + BATCH_ENTRIES + <usize>i * BATCH_ENTRY;
}

// Checks the batch's layout and starts its write list; returns its count, or -1 to decline.
function batchBegin(): i32 {
  if (inbox == 0 || inboxSize < BATCH_ENTRIES) return -1;
  const n = load<u32>(inbox + BATCH_COUNT);
  const table = <u64>BATCH_ENTRIES + <u64>n * <u64>BATCH_ENTRY;
  if (table > <u64>inboxSize) return -1;
  for (let i: i32 = 0; i < <i32>n; i++) {
    const e = batchEntry(i);
    const at = <u64>load<u32>(e), len = <u64>load<u32>(e, 4);
    // A record is 8-aligned, after the table, inside the inbox, and a publish's.
    if ((at & 7) != 0 || at < table || len < <u64>IN_HEADERS || at + len > <u64>inboxSize ||
      load<u32>(inbox + <usize>at + IN_HOOK) != HOOK_PUBLISH) return -1;
  }
  resetWrites();
  batching = true;
  return <i32>n;
}

// Points the readers, the writers and the host (current) at message i.
function batchMessage(i: i32): void {
  rec = inbox + <usize>load<u32>(batchEntry(i));
  first = nwrites;
  store<u32>(inbox + BATCH_CURRENT, <u32>i);
}

function batchVerdict(i: i32, verdict: i64): void {
  store<i64>(batchEntry(i) + ENTRY_VERDICT, verdict);
  store<u32>(rec + IN_WRITES_COUNT, nwrites - first);
}

// Gives each record the address of its write list, now that the buffer will not move.
function batchEnd(n: i32): void {
  const base = changetype<usize>(writesBuf);
  let at: u32 = 0;
  for (let i = 0; i < n; i++) {
    const r = inbox + <usize>load<u32>(batchEntry(i));
    const count = load<u32>(r + IN_WRITES_COUNT);
    store<u32>(r + IN_WRITES_PTR, count == 0 ? 0 : <u32>(base + <usize>at * WRITE_SIZE));
    at += count;
  }
  batching = false;
  rec = inbox;
}

// ---- statuses and errors ----

/** The writers' statuses (docs/ABI.md). */
export namespace Status {
  /** Done. */
  export const OK: i32 = 0;
  /** Malformed: a bad topic, an empty or non-UTF-8 header. */
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
    if (inbox != 0) return fieldStringOrEmpty(IN_TOPIC);
    const s = readString(R_TOPIC);
    return s == null ? "" : s;
  }

  /** Whether the topic is exactly `t`; allocates nothing for short topics. */
  export function topicIs(t: string): bool {
    if (inbox != 0) return fieldIs(IN_TOPIC, t);
    const n = read(R_TOPIC);
    const ok = n >= 0 && bytesEqualLen(n, t);
    readBuf = null;
    return ok;
  }

  /** The payload. */
  export function payload(): Uint8Array {
    if (inbox != 0) {
      const n = fieldLen(IN_PAYLOAD);
      const out = new Uint8Array(n == ABSENT ? 0 : <i32>n);
      if (out.length != 0) memory.copy(out.dataStart, fieldPtr(IN_PAYLOAD), <usize>n);
      return out;
    }
    return readBytes(R_PAYLOAD);
  }

  /** The payload as a UTF-8 string. */
  export function payloadString(): string {
    if (inbox != 0) return fieldStringOrEmpty(IN_PAYLOAD);
    const s = readString(R_PAYLOAD);
    return s == null ? "" : s;
  }

  /** One header's value, or null if it is not set. */
  export function header(name: string): string | null {
    if (inbox != 0) {
      const e = findHeader(name);
      return e == 0 ? null : fieldString(e + 8);
    }
    encode(name, encodeKey, true);
    return readString(R_HEADER, encPtr, encLen);
  }

  /** Whether header `name` is set to exactly `value`; allocates nothing for short values. */
  export function headerIs(name: string, value: string): bool {
    if (inbox != 0) {
      const e = findHeader(name);
      return e != 0 && fieldIs(e + 8, value);
    }
    encode(name, encodeKey, true);
    const n = read(R_HEADER, encPtr, encLen);
    const ok = n >= 0 && bytesEqualLen(n, value);
    readBuf = null;
    return ok;
  }

  /** How many headers the message has. */
  export function headerCount(): i32 {
    if (inbox != 0) return <i32>u32At(IN_HEADER_COUNT);
    return v1_msg_header_count();
  }

  /** The name of header `index` (0-based, sorted by name), or null past the end. */
  export function headerName(index: i32): string | null {
    if (inbox != 0) {
      if (index < 0 || <u32>index >= u32At(IN_HEADER_COUNT)) return null;
      return fieldString(IN_HEADERS + <usize>index * IN_ENTRY);
    }
    return readString(R_HEADER_NAME, <usize>index);
  }

  /** The message's system_id in on_ack and on_redeliver; null in on_publish. */
  export function id(): string | null {
    const s = inbox != 0 ? fieldString(IN_ID) : readString(R_ID);
    return s == null || s.length == 0 ? null : s;
  }

  /** Routes the message to `t` instead (on_publish). */
  export function setTopic(t: string): i32 {
    encode(t, encodeVal, false);
    return v1_msg_set_topic(encPtr, encLen);
  }

  /** Replaces the payload (on_publish). */
  export function setPayload(p: Uint8Array): i32 {
    if (inbox != 0) return inboxSetPayload(p.dataStart, <usize>p.byteLength);
    return v1_msg_set_payload(p.dataStart, <usize>p.byteLength);
  }

  /** Replaces the payload with a string's UTF-8 bytes (on_publish). */
  export function setPayloadString(p: string): i32 {
    if (inbox != 0) return inboxSetPayloadString(p);
    encode(p, encodeVal, false);
    return v1_msg_set_payload(encPtr, encLen);
  }

  /** Adds or replaces a header (on_publish, on_redeliver). */
  export function setHeader(name: string, value: string): i32 {
    if (inbox != 0) return inboxSetHeader(name, value);
    encode(name, encodeKey, true);
    const k = encPtr, kl = encLen;
    encode(value, encodeVal, false);
    return v1_msg_set_header(k, kl, encPtr, encLen);
  }

  /** Removes a header; OK if it was not set (on_publish, on_redeliver). */
  export function delHeader(name: string): i32 {
    if (inbox != 0) return inboxDelHeader(name);
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
    if (inbox != 0) return fieldStringOrEmpty(IN_SUB);
    const s = readString(R_SUBSCRIPTION);
    return s == null ? "" : s;
  }
  /** The consumer group's name. */
  export function group(): string {
    if (inbox != 0) return fieldStringOrEmpty(IN_GROUP);
    const s = readString(R_GROUP);
    return s == null ? "" : s;
  }
  /** The delivery attempt that was acked, or that failed (1 = first). */
  export function attempt(): i32 {
    if (inbox != 0) return <i32>u32At(IN_ATTEMPT);
    return v1_event_attempt();
  }
  /** Nanoseconds from the acked delivery to its ack (on_ack). */
  export function inFlightNs(): i64 {
    if (inbox != 0) return load<i64>(rec + IN_IN_FLIGHT);
    return v1_event_in_flight_ns();
  }
  /** Why the message is redelivered (on_redeliver). */
  export function reason(): string {
    if (inbox != 0) return fieldStringOrEmpty(IN_REASON);
    const s = readString(R_REASON);
    return s == null ? "" : s;
  }
}

// ---- configuration ----

/** The plugin's config block. */
export namespace config {
  // Values read, by key: an instance's configuration never changes, and a filter that
  // compares a header with a config value would otherwise pay a host call per message.
  const CACHED = 32;
  const cachedKeys = new Array<string>();
  const cachedValues = new Array<string | null>();

  /** One value by key, or null if it is not set; read from the host once per key (for up to
   *  32 keys), then kept for the instance's life. */
  export function get(key: string): string | null {
    for (let i = 0, n = cachedKeys.length; i < n; i++) {
      if (cachedKeys[i] == key) return cachedValues[i];
    }
    encode(key, encodeKey, true);
    const v = readString(R_CONFIG_GET, encPtr, encLen);
    if (cachedKeys.length < CACHED) {
      cachedKeys.push(key);
      cachedValues.push(v);
    }
    return v;
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
  if (inbox != 0) {
    inboxSetReason(reason);
    return;
  }
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
