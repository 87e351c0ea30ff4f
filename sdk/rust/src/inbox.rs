//! The inbox (docs/ABI.md, "The inbox"): the broker writes each call's message and event into
//! a buffer this crate gives it, before the call, and the readers find them there without a
//! host call; payload and header changes and the reason go back in the write list, applied
//! by the broker when the hook returns. A broker that never asks for the inbox gets the host
//! calls, as before (`active()` is false).

use std::ptr::addr_of_mut;

// The inbox's layout: little-endian u32 fields at fixed offsets (docs/ABI.md): the write
// list's pointer and count, the hook, the limits, the event's attempt and time in flight.
const WRITES_PTR: usize = 0;
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
/// The write list of the call in progress, and the bytes its records point to, kept until
/// the next call begins.
static mut WRITES: Vec<[u32; 5]> = Vec::new();
static mut KEPT: Vec<Vec<u8>> = Vec::new();

/// The broker asks for an inbox of `size` bytes, between calls (exported with the feature
/// `inbox`).
#[cfg(feature = "inbox")]
#[no_mangle]
pub extern "C" fn tb_v1_inbox(size: u32) -> u32 {
    // SAFETY: one thread, and no reference to INBOX outlives a function of this module.
    let inbox = unsafe { &mut *addr_of_mut!(INBOX) };
    *inbox = vec![0u64; (size as usize + 7) / 8];
    inbox.as_ptr() as u32
}

fn bytes() -> &'static [u8] {
    // SAFETY: as above; the host wrote the inbox before the call and does not touch it during.
    let inbox = unsafe { &*addr_of_mut!(INBOX) };
    unsafe { std::slice::from_raw_parts(inbox.as_ptr() as *const u8, inbox.len() * 8) }
}

pub(crate) fn active() -> bool {
    unsafe { !(*addr_of_mut!(INBOX)).is_empty() }
}

fn u32_at(off: usize) -> u32 {
    let b = bytes();
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
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
    (0..header_count()).filter_map(header_at).find(|(k, _)| *k == name).map(|(_, v)| v)
}

/// Empties the write list: every hook calls it first.
pub(crate) fn begin() {
    unsafe {
        (*addr_of_mut!(WRITES)).clear();
        (*addr_of_mut!(KEPT)).clear();
    }
}

/// Lists a write, with copies of its bytes kept until the next call.
fn write(op: Op, a: &[u8], b: &[u8]) {
    let writes = unsafe { &mut *addr_of_mut!(WRITES) };
    let kept = unsafe { &mut *addr_of_mut!(KEPT) };
    let (a, b) = (a.to_vec(), b.to_vec()); // moving a Vec into KEPT does not move its bytes
    writes.push([op as u32, a.as_ptr() as u32, a.len() as u32, b.as_ptr() as u32, b.len() as u32]);
    kept.push(a);
    kept.push(b);
    let inbox = unsafe { &mut *addr_of_mut!(INBOX) };
    // The write list's pointer and count are the inbox's first word.
    inbox[WRITES_PTR / 8] = writes.as_ptr() as u64 | (writes.len() as u64) << 32;
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
