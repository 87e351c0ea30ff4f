//! The inbox (docs/ABI.md, "The inbox"): the broker writes each call's message and event into
//! a buffer this crate gives it, before the call, and the readers find them there without a
//! host call; payload and header changes and the reason go back in the write list, applied
//! by the broker when the hook returns. A broker that never asks for the inbox gets the host
//! calls, as before (`active()` is false).
//!
//! A batch (docs/ABI.md, "Batches") is several such inboxes, records, in one: `batch` points
//! the readers at each record in turn and runs the plugin's on_publish on it, with the
//! message's index in the batch's `current` for host calls; every message's write list is
//! kept until the call returns.

use std::ptr::addr_of_mut;

// The inbox's layout: little-endian u32 fields at fixed offsets (docs/ABI.md): the write
// list's pointer and count, the hook, the limits, the event's attempt and time in flight.
#[cfg(feature = "inbox")]
const WRITES_PTR: usize = 0;
#[cfg(feature = "inbox")]
const WRITES_COUNT: usize = 4;
const HOOK: usize = 8;
const MAX_MESSAGE: usize = 12; // then max_header_bytes
const MAX_HEADER: usize = MAX_MESSAGE + 4;
const ATTEMPT: usize = 20; // then in_flight_ns, a u64
const IN_FLIGHT: usize = ATTEMPT + 4;
// Then (offset, length) pairs of the values, the header count and the header table.
pub(crate) const TOPIC: usize = 32;
pub(crate) const PAYLOAD: usize = 40;
pub(crate) const ID: usize = 48;
pub(crate) const SUB: usize = 56;
pub(crate) const GROUP: usize = 64;
pub(crate) const REASON: usize = 72;
const HEADER_COUNT: usize = 80; // then a reserved u32 and the table, 16 bytes an entry
const HEADERS: usize = HEADER_COUNT + 8;
const ENTRY: usize = 16;

/// The hooks that may change headers.
const HOOK_PUBLISH: u32 = 2;
const HOOK_REDELIVER: u32 = 4;

/// The write list's operations.
#[repr(u32)]
#[derive(Clone, Copy)]
enum Op {
    SetPayload = 1,
    SetHeader = 2,
    DelHeader = 3,
    SetReason = 4,
}

/// The inbox: 8-byte words, so that it is aligned as the ABI asks.
static mut INBOX: Vec<u64> = Vec::new();
/// The message the readers read: its record's offset and length in the inbox. The whole
/// inbox in a single call; record `i` while a batch runs message `i`.
static mut REC: (usize, usize) = (0, 0);
/// The write lists of the call in progress, one after the other (a batch's message `i`
/// lists its writes after message `i - 1`'s), and the bytes their records point to, one
/// after the other in ARENA. Until the call ends a record holds offsets into ARENA, so that
/// growing either Vec moves nothing a record has been given; `end` and `batch` turn them
/// into addresses and give each message's record its list. Both are kept until the next
/// call begins, and their capacity across calls (up to KEEP bytes): a message that writes
/// allocates nothing once an instance has served a few.
static mut WRITES: Vec<[u32; 5]> = Vec::new();
static mut ARENA: Vec<u8> = Vec::new();
/// Where the current message's writes start in WRITES.
static mut FIRST: usize = 0;
const KEEP: usize = 64 << 10;

/// The broker asks for an inbox of `size` bytes, between calls (exported with the feature
/// `inbox`).
#[cfg(feature = "inbox")]
#[no_mangle]
pub extern "C" fn tb_v1_inbox(size: u32) -> u32 {
    // SAFETY: one thread, and no reference to INBOX outlives a function of this module.
    let inbox = unsafe { &mut *addr_of_mut!(INBOX) };
    *inbox = vec![0u64; (size as usize + 7) / 8];
    unsafe { REC = (0, inbox.len() * 8) };
    inbox.as_ptr() as u32
}

/// The whole inbox.
fn whole() -> &'static [u8] {
    // SAFETY: as above; the host wrote the inbox before the call and does not touch it during.
    let inbox = unsafe { &*addr_of_mut!(INBOX) };
    unsafe { std::slice::from_raw_parts(inbox.as_ptr() as *const u8, inbox.len() * 8) }
}

/// The current message's record: the whole inbox, or one message of a batch.
fn bytes() -> &'static [u8] {
    let (at, len) = unsafe { REC };
    whole().get(at..at + len).unwrap_or_default()
}

pub(crate) fn active() -> bool {
    unsafe { !(*addr_of_mut!(INBOX)).is_empty() }
}

fn le32(b: &[u8], off: usize) -> u32 {
    // One bounds check for the four bytes (a trap past the record, as before).
    let w: [u8; 4] = b[off..off + 4].try_into().unwrap();
    u32::from_le_bytes(w)
}

fn u32_at(off: usize) -> u32 {
    le32(bytes(), off)
}

/// Writes a u32 at `off` from the inbox's start (the broker reads what the plugin writes
/// there: the write lists, a batch's current message and verdicts).
#[cfg(feature = "inbox")]
fn put32(off: usize, v: u32) {
    let inbox = unsafe { &mut *addr_of_mut!(INBOX) };
    let w = &mut inbox[off / 8];
    let shift = (off % 8) * 8; // off is a multiple of 4: the low or the high half
    *w = *w & !(0xFFFF_FFFFu64 << shift) | (v as u64) << shift;
}

/// The value whose (offset, length) pair is at `off`; None if absent.
pub(crate) fn field(off: usize) -> Option<&'static [u8]> {
    let (at, len) = (u32_at(off) as usize, u32_at(off + 4));
    if len == u32::MAX {
        return None;
    }
    bytes().get(at..at + len as usize)
}

pub(crate) fn attempt() -> u32 {
    u32_at(ATTEMPT)
}

pub(crate) fn in_flight_ns() -> u64 {
    u32_at(IN_FLIGHT) as u64 | (u32_at(IN_FLIGHT + 4) as u64) << 32
}

pub(crate) fn header_count() -> usize {
    u32_at(HEADER_COUNT) as usize
}

/// Header `i` (sorted by name) as (name, value).
pub(crate) fn header_at(i: usize) -> Option<(&'static [u8], &'static [u8])> {
    if i >= header_count() {
        return None;
    }
    let e = HEADERS + ENTRY * i;
    Some((field(e)?, field(e + 8)?))
}

pub(crate) fn header(name: &[u8]) -> Option<&'static [u8]> {
    // The record taken once, and each entry's name compared by its length first: the lookup
    // every filter makes, once per message.
    let b = bytes();
    let n = le32(b, HEADER_COUNT) as usize;
    for i in 0..n {
        let e = HEADERS + ENTRY * i;
        let (ko, kl) = (le32(b, e) as usize, le32(b, e + 4) as usize);
        if kl == name.len() && b.get(ko..ko + kl) == Some(name) {
            let (vo, vl) = (le32(b, e + 8) as usize, le32(b, e + 12) as usize);
            return b.get(vo..vo + vl);
        }
    }
    None
}

/// Empties the write lists, and has the readers read the whole inbox: every hook calls it
/// first, a batch once.
pub(crate) fn begin() {
    unsafe {
        let (writes, arena) = (&mut *addr_of_mut!(WRITES), &mut *addr_of_mut!(ARENA));
        if arena.capacity() > KEEP || writes.capacity() * 20 > KEEP {
            *arena = Vec::new();
            *writes = Vec::new();
        }
        writes.clear();
        arena.clear();
        FIRST = 0;
        REC = (0, (*addr_of_mut!(INBOX)).len() * 8);
    }
}

/// Lists a write of the current message, with copies of its bytes kept until the next call.
fn write(op: Op, a: &[u8], b: &[u8]) {
    let writes = unsafe { &mut *addr_of_mut!(WRITES) };
    let arena = unsafe { &mut *addr_of_mut!(ARENA) };
    let at = arena.len();
    arena.extend_from_slice(a);
    arena.extend_from_slice(b);
    // Offsets into ARENA until the call ends (see `seal`).
    writes.push([op as u32, at as u32, a.len() as u32, (at + a.len()) as u32, b.len() as u32]);
}

/// Ends the current message: its record's write list is the writes listed since it began,
/// given by their index in WRITES until `seal`.
#[cfg(feature = "inbox")]
fn close_message() {
    let n = unsafe { (*addr_of_mut!(WRITES)).len() };
    let (rec, first) = unsafe { (REC.0, FIRST) };
    if n == first {
        return; // no write: the broker zeroed the record's list before the call
    }
    put32(rec + WRITES_PTR, first as u32);
    put32(rec + WRITES_COUNT, (n - first) as u32);
    unsafe { FIRST = n };
}

/// Turns the writes' offsets into addresses, now that neither Vec will grow in this call.
#[cfg(feature = "inbox")]
fn seal() {
    let writes = unsafe { &mut *addr_of_mut!(WRITES) };
    let base = unsafe { (*addr_of_mut!(ARENA)).as_ptr() } as u32;
    for w in writes.iter_mut() {
        w[1] = w[1].wrapping_add(base);
        w[3] = w[3].wrapping_add(base);
    }
}

/// Gives the record at `rec` (closed by `close_message`) the address of its write list.
#[cfg(feature = "inbox")]
fn give(rec: usize) {
    let b = whole();
    let (first, count) = (le32(b, rec + WRITES_PTR), le32(b, rec + WRITES_COUNT));
    if count == 0 {
        return; // its list is empty, and its pointer still the broker's 0
    }
    let list = unsafe { (*addr_of_mut!(WRITES)).as_ptr() } as u32;
    put32(rec + WRITES_PTR, list + first * 20);
}

/// Ends a single call (every hook, after its function returned): gives the broker the write
/// list. Without the feature there is no inbox, and nothing to give.
#[cfg(not(feature = "inbox"))]
pub(crate) fn end() {}

/// Ends a single call (every hook, after its function returned): gives the broker the write
/// list.
#[cfg(feature = "inbox")]
pub(crate) fn end() {
    if !active() || unsafe { (*addr_of_mut!(WRITES)).is_empty() } {
        return;
    }
    close_message();
    seal();
    give(unsafe { REC.0 });
}

// A batch (docs/ABI.md, "Batches"): a header (count, current), count entries (record offset,
// record length, verdict), then one record per message, laid out as a single call's inbox.
#[cfg(feature = "inbox")]
const BATCH_COUNT: usize = 0;
#[cfg(feature = "inbox")]
const BATCH_CURRENT: usize = 4;
#[cfg(feature = "inbox")]
const BATCH_ENTRIES: usize = 16;
#[cfg(feature = "inbox")]
const BATCH_ENTRY: usize = 16; // record offset, record length, then the u64 verdict at 8

/// Runs `on_publish` on each message of the batch in the inbox, as tb_on_publish would run it
/// on that message alone: the readers read its record, host calls act on it (`current`), and
/// its writes are its record's write list. Every list, and the bytes they point to, stay put
/// until the next call, since the broker reads them all when the batch returns. Returns 0
/// with every entry's verdict written, or 1 (the broker then calls tb_on_publish on each
/// message) for a batch this SDK cannot read.
#[cfg(feature = "inbox")]
pub(crate) fn batch<F: FnMut() -> i64>(mut on_publish: F) -> i32 {
    let b = whole();
    if b.len() < BATCH_ENTRIES {
        return 1;
    }
    let n = le32(b, BATCH_COUNT) as usize;
    let table = match n.checked_mul(BATCH_ENTRY).map(|t| t + BATCH_ENTRIES) {
        Some(end) if end <= b.len() => end,
        _ => return 1,
    };
    for i in 0..n {
        let e = BATCH_ENTRIES + BATCH_ENTRY * i;
        let (at, len) = (le32(b, e) as usize, le32(b, e + 4) as usize);
        // A record is 8-aligned, after the table, inside the inbox, and a publish's.
        if at % 8 != 0 || at < table || len < HEADERS || at + len > b.len() || le32(b, at + HOOK) != HOOK_PUBLISH {
            return 1;
        }
    }
    begin();
    for i in 0..n {
        let e = BATCH_ENTRIES + BATCH_ENTRY * i;
        unsafe {
            REC = (le32(b, e) as usize, le32(b, e + 4) as usize);
            FIRST = (*addr_of_mut!(WRITES)).len();
        }
        put32(BATCH_CURRENT, i as u32);
        let v = on_publish() as u64;
        put32(e + 8, v as u32);
        put32(e + 12, (v >> 32) as u32);
        close_message();
    }
    seal();
    for i in 0..n {
        give(le32(whole(), BATCH_ENTRIES + BATCH_ENTRY * i) as usize);
    }
    unsafe { REC = (0, b.len()) };
    0
}

fn may_change_headers() -> bool {
    let h = u32_at(HOOK);
    h == HOOK_PUBLISH || h == HOOK_REDELIVER
}

// The writers check what the broker would (the write list carries no statuses): the status
// of each is the one the host function would have returned.

pub(crate) fn set_payload(p: &[u8]) -> i32 {
    if u32_at(HOOK) != HOOK_PUBLISH {
        return -3;
    }
    if p.len() > u32_at(MAX_MESSAGE) as usize {
        return -2;
    }
    write(Op::SetPayload, p, &[]);
    0
}

pub(crate) fn set_header(k: &[u8], v: &[u8]) -> i32 {
    if !may_change_headers() {
        return -3;
    }
    if k.is_empty() {
        return -1;
    }
    if k.len() + v.len() > u32_at(MAX_HEADER) as usize {
        return -2;
    }
    write(Op::SetHeader, k, v);
    0
}

pub(crate) fn del_header(k: &[u8]) -> i32 {
    if !may_change_headers() {
        return -3;
    }
    write(Op::DelHeader, k, &[]);
    0
}

pub(crate) fn set_reason(r: &[u8]) {
    write(Op::SetReason, r, &[]);
}
