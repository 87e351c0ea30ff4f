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

/// A stretch of the inbox: the whole of it, or one message's record in a batch. Reads and
/// writes through it are bounds-checked against `len` and inlined: a filter's path through
/// this module is a few loads per message, with no function call (a call costs more than
/// the load it makes in a WebAssembly runtime).
#[derive(Clone, Copy)]
struct Span {
    ptr: *mut u8,
    len: usize,
}

impl Span {
    /// No inbox: a well-aligned, non-null pointer to no bytes.
    const EMPTY: Span = Span { ptr: std::ptr::NonNull::<u64>::dangling().as_ptr() as *mut u8, len: 0 };

    /// Whether the `n` bytes at `off` are inside the span.
    #[inline(always)]
    fn holds(self, off: usize, n: usize) -> bool {
        off <= self.len && self.len - off >= n
    }

    /// The little-endian u32 at `off`; a read past the span traps, as a slice index would.
    #[inline(always)]
    fn u32(self, off: usize) -> u32 {
        if !self.holds(off, 4) {
            past_the_end();
        }
        // SAFETY: the four bytes are inside the span, hence inside INBOX's buffer, which lives
        // until the broker asks for another inbox (between calls).
        u32::from_le_bytes(unsafe { std::ptr::read_unaligned(self.ptr.add(off) as *const [u8; 4]) })
    }

    /// The `len` bytes at `off`, or None if they are not all inside the span.
    #[inline(always)]
    fn bytes(self, off: usize, len: usize) -> Option<&'static [u8]> {
        if !self.holds(off, len) {
            return None;
        }
        // SAFETY: as in `u32`. Nothing writes these bytes until the call returns: the plugin
        // writes only the fields of `put32` and `put64` (docs/ABI.md), which no value overlaps.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.add(off), len) })
    }

    /// The record of `len` bytes at `off`.
    #[cfg(feature = "inbox")]
    #[inline(always)]
    fn sub(self, off: usize, len: usize) -> Span {
        if !self.holds(off, len) {
            past_the_end();
        }
        // SAFETY: inside the span (checked above).
        Span { ptr: unsafe { self.ptr.add(off) }, len }
    }

    /// Writes the little-endian u32 `v` at `off` (the fields the broker reads back: write
    /// lists, a batch's current message).
    #[cfg(feature = "inbox")]
    #[inline(always)]
    fn put32(self, off: usize, v: u32) {
        if !self.holds(off, 4) {
            past_the_end();
        }
        // SAFETY: inside the span, as in `u32`; written through the pointer INBOX gave, and
        // no reference handed out covers these bytes (see `bytes`).
        unsafe { std::ptr::write_unaligned(self.ptr.add(off) as *mut [u8; 4], v.to_le_bytes()) }
    }

    /// Writes the little-endian u64 `v` at `off` (a batch's verdicts).
    #[cfg(feature = "inbox")]
    #[inline(always)]
    fn put64(self, off: usize, v: u64) {
        if !self.holds(off, 8) {
            past_the_end();
        }
        // SAFETY: as in `put32`.
        unsafe { std::ptr::write_unaligned(self.ptr.add(off) as *mut [u8; 8], v.to_le_bytes()) }
    }
}

/// A read or write past the inbox or a record: the broker wrote what the ABI does not allow.
#[cold]
#[inline(never)]
fn past_the_end() -> ! {
    panic!("tinybroker: an inbox field points past its end")
}

/// The inbox: 8-byte words, so that it is aligned as the ABI asks.
#[cfg(feature = "inbox")]
static mut INBOX: Vec<u64> = Vec::new();
/// INBOX's bytes, as a span (EMPTY until the broker asks for an inbox).
static mut BOX: Span = Span::EMPTY;
/// The message the readers read: the whole inbox in a single call, and always between calls;
/// message `i`'s record while a batch runs it.
static mut REC: Span = Span::EMPTY;
/// The write lists of the call in progress, one after the other (a batch's message `i`
/// lists its writes after message `i - 1`'s), and the bytes their records point to, one
/// after the other in ARENA. Until the call ends a record holds offsets into ARENA, so that
/// growing either Vec moves nothing a record has been given; `end` and `batch` turn them
/// into addresses and give each message's record its list. Both are kept until the next
/// call begins, and their capacity across calls (up to KEEP bytes): a message that writes
/// allocates nothing once an instance has served a few.
static mut WRITES: Vec<[u32; 5]> = Vec::new();
static mut ARENA: Vec<u8> = Vec::new();
/// Where the current message's writes start in WRITES: its length when the message began,
/// and after any message without writes.
static mut FIRST: usize = 0;
const KEEP: usize = 64 << 10;

/// The broker asks for an inbox of `size` bytes, between calls (exported with the feature
/// `inbox`).
#[cfg(feature = "inbox")]
#[no_mangle]
pub extern "C" fn tb_v1_inbox(size: u32) -> u32 {
    // SAFETY: one thread, and no reference to INBOX outlives a function of this module (the
    // old inbox's values, which readers handed out, are only valid until the call ends).
    let inbox = unsafe { &mut *addr_of_mut!(INBOX) };
    *inbox = vec![0u64; (size as usize + 7) / 8];
    let whole = Span { ptr: inbox.as_mut_ptr() as *mut u8, len: inbox.len() * 8 };
    unsafe {
        BOX = whole;
        REC = whole;
    }
    whole.ptr as u32
}

/// The current message's record: the whole inbox, or one message of a batch.
#[inline(always)]
fn rec() -> Span {
    // SAFETY: one thread; a Span is a copy.
    unsafe { REC }
}

#[inline(always)]
pub(crate) fn active() -> bool {
    unsafe { BOX.len != 0 }
}

#[inline(always)]
fn u32_at(off: usize) -> u32 {
    rec().u32(off)
}

/// The value whose (offset, length) pair is at `off`; None if absent.
#[inline]
pub(crate) fn field(off: usize) -> Option<&'static [u8]> {
    let r = rec();
    let (at, len) = (r.u32(off), r.u32(off + 4));
    if len == u32::MAX {
        return None;
    }
    r.bytes(at as usize, len as usize)
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

/// Header `name`'s value. The lookup every filter makes, once per message: the record taken
/// once, each entry's name compared by its length first, inlined.
#[inline]
pub(crate) fn header(name: &[u8]) -> Option<&'static [u8]> {
    let r = rec();
    let mut e = HEADERS;
    for _ in 0..r.u32(HEADER_COUNT) {
        if r.u32(e + 4) as usize == name.len() {
            if let Some(k) = r.bytes(r.u32(e) as usize, name.len()) {
                if same(k, name) {
                    return r.bytes(r.u32(e + 8) as usize, r.u32(e + 12) as usize);
                }
            }
        }
        e += ENTRY;
    }
    None
}

/// Whether `a` and `b` are the same bytes. `==` on slices calls memcmp, a function call per
/// comparison in WebAssembly; this compares in 4-byte words, inline (the last word may overlap
/// the one before), and bytes below 4.
#[inline(always)]
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    #[inline(always)]
    fn word(s: &[u8], i: usize) -> u32 {
        u32::from_le_bytes([s[i], s[i + 1], s[i + 2], s[i + 3]])
    }
    if n < 4 {
        // 0 to 3 bytes: the first, the middle and the last cover them all.
        return n == 0 || (a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1]);
    }
    let mut i = 0;
    while i + 4 < n {
        if word(a, i) != word(b, i) {
            return false;
        }
        i += 4;
    }
    word(a, n - 4) == word(b, n - 4)
}

/// Empties the write lists: every hook calls it first, a batch once. (The readers read the
/// whole inbox outside a batch already.)
#[inline(always)]
pub(crate) fn begin() {
    // SAFETY: one thread, and no reference to WRITES or ARENA outlives this function.
    let (writes, arena) = unsafe { (&mut *addr_of_mut!(WRITES), &mut *addr_of_mut!(ARENA)) };
    if writes.is_empty() {
        return; // nothing was written, nothing grew: FIRST is 0 already
    }
    if arena.capacity() > KEEP || writes.capacity() * 20 > KEEP {
        *arena = Vec::new();
        *writes = Vec::new();
    }
    writes.clear();
    arena.clear();
    unsafe { FIRST = 0 };
}

/// Lists a write of the current message, with copies of its bytes kept until the next call.
fn write(op: Op, a: &[u8], b: &[u8]) {
    let writes = unsafe { &mut *addr_of_mut!(WRITES) };
    let arena = unsafe { &mut *addr_of_mut!(ARENA) };
    let at = arena.len();
    append(arena, a);
    append(arena, b);
    // Offsets into ARENA until the call ends (see `seal`).
    writes.push([op as u32, at as u32, a.len() as u32, (at + a.len()) as u32, b.len() as u32]);
}

/// Appends `s` to `arena`. Header names and values are short: up to 16 bytes they are copied
/// inline, as four 4-byte words (the later ones may overlap) or, below 4 bytes, the first,
/// middle and last byte, then the length set once; `extend_from_slice` calls memcpy through
/// two functions in WebAssembly, and a loop would be turned into that call.
#[inline(always)]
fn append(arena: &mut Vec<u8>, s: &[u8]) {
    let n = s.len();
    if n > 16 {
        return arena.extend_from_slice(s);
    }
    arena.reserve(n);
    let at = arena.len();
    // SAFETY: `reserve` made room for n more bytes after `at`; every byte of dst[..n] is
    // written below (the word offsets are at most n - 4, the byte offsets below n) before
    // `set_len` makes them part of the Vec.
    unsafe {
        let dst = arena.as_mut_ptr().add(at);
        if n >= 4 {
            let word = |i: usize| std::ptr::write_unaligned(dst.add(i) as *mut [u8; 4], [s[i], s[i + 1], s[i + 2], s[i + 3]]);
            word(0);
            word(4.min(n - 4));
            word(8.min(n - 4));
            word(n - 4);
        } else if n > 0 {
            *dst = s[0];
            *dst.add(n / 2) = s[n / 2];
            *dst.add(n - 1) = s[n - 1];
        }
        arena.set_len(at + n);
    }
}

/// How many writes the call has listed so far.
#[cfg(feature = "inbox")]
#[inline(always)]
fn listed() -> usize {
    unsafe { (*addr_of_mut!(WRITES)).len() }
}

/// Ends the message whose record is `rec`: its write list is the writes listed since it
/// began, given by their index in WRITES until `seal`.
#[cfg(feature = "inbox")]
#[inline(always)]
fn close_message(rec: Span) {
    let (n, first) = (listed(), unsafe { FIRST });
    if n == first {
        return; // no write: the broker zeroed the record's list before the call
    }
    rec.put32(WRITES_PTR, first as u32);
    rec.put32(WRITES_COUNT, (n - first) as u32);
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

/// Gives the record `rec` (closed by `close_message`) the address of its write list.
#[cfg(feature = "inbox")]
#[inline(always)]
fn give(rec: Span) {
    let (first, count) = (rec.u32(WRITES_PTR), rec.u32(WRITES_COUNT));
    if count == 0 {
        return; // its list is empty, and its pointer still the broker's 0
    }
    let list = unsafe { (*addr_of_mut!(WRITES)).as_ptr() } as u32;
    rec.put32(WRITES_PTR, list + first * 20);
}

/// Ends a single call (every hook, after its function returned): gives the broker the write
/// list. Without the feature there is no inbox, and nothing to give.
#[cfg(not(feature = "inbox"))]
#[inline(always)]
pub(crate) fn end() {}

/// Ends a single call (every hook, after its function returned): gives the broker the write
/// list.
#[cfg(feature = "inbox")]
#[inline(always)]
pub(crate) fn end() {
    if listed() == 0 {
        return; // nothing to give (and without an inbox nothing is ever listed)
    }
    let r = rec();
    close_message(r);
    seal();
    give(r);
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
#[cfg(feature = "inbox")]
const BATCH_VERDICT: usize = 8;

/// The record of the batch entry at `e`.
#[cfg(feature = "inbox")]
#[inline(always)]
fn record(b: Span, e: usize) -> Span {
    b.sub(b.u32(e) as usize, b.u32(e + 4) as usize)
}

/// Runs `on_publish` on each message of the batch in the inbox, as tb_on_publish would run it
/// on that message alone: the readers read its record, host calls act on it (`current`), and
/// its writes are its record's write list. Every list, and the bytes they point to, stay put
/// until the next call, since the broker reads them all when the batch returns. Returns 0
/// with every entry's verdict written, or 1 (the broker then calls tb_on_publish on each
/// message) for a batch this SDK cannot read.
#[cfg(feature = "inbox")]
#[inline(always)]
pub(crate) fn batch<F: FnMut() -> i64>(mut on_publish: F) -> i32 {
    let b = unsafe { BOX };
    if b.len < BATCH_ENTRIES {
        return 1;
    }
    let n = b.u32(BATCH_COUNT) as usize;
    let table = match n.checked_mul(BATCH_ENTRY).map(|t| t + BATCH_ENTRIES) {
        Some(end) if end <= b.len => end,
        _ => return 1,
    };
    let mut e = BATCH_ENTRIES;
    while e < table {
        let (at, len) = (b.u32(e) as usize, b.u32(e + 4) as usize);
        // A record is 8-aligned, after the table, inside the inbox, and a publish's.
        if at % 8 != 0 || at < table || len < HEADERS || !b.holds(at, len) || b.u32(at + HOOK) != HOOK_PUBLISH {
            return 1;
        }
        e += BATCH_ENTRY;
    }
    begin();
    let mut e = BATCH_ENTRIES;
    for i in 0..n as u32 {
        let r = record(b, e);
        unsafe { REC = r };
        b.put32(BATCH_CURRENT, i);
        let v = on_publish();
        b.put64(e + BATCH_VERDICT, v as u64);
        close_message(r);
        e += BATCH_ENTRY;
    }
    unsafe { REC = b };
    if listed() != 0 {
        seal();
        let mut e = BATCH_ENTRIES;
        while e < table {
            give(record(b, e));
            e += BATCH_ENTRY;
        }
    }
    0
}

#[inline(always)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_copies_every_length() {
        let text: Vec<u8> = (1..=40).collect();
        for n in 0..text.len() {
            let mut arena = b"head".to_vec();
            append(&mut arena, &text[..n]);
            append(&mut arena, &text[..n / 3]);
            assert_eq!(&arena[..4], b"head");
            assert_eq!(&arena[4..4 + n], &text[..n], "{} bytes", n);
            assert_eq!(&arena[4 + n..], &text[..n / 3], "{} bytes", n / 3);
        }
    }

    #[test]
    fn same_is_slice_equality() {
        let text = b"tenant-blocked-0123456789";
        for n in 0..text.len() {
            let a = &text[..n];
            assert!(same(a, a), "{} bytes", n);
            assert!(!same(a, &text[..n + 1]));
            for i in 0..n {
                // A difference in any one byte is seen, wherever the words fall.
                let mut b = a.to_vec();
                b[i] ^= 0x20;
                assert!(!same(a, &b), "{} bytes, byte {} differs", n, i);
            }
        }
    }

    /// A batch of two publishes, the second with the header tenant=blocked: each message's
    /// record is read, the verdicts written, and the write list given to the message that
    /// wrote (the broker's side of this is the conformance suite's).
    #[cfg(feature = "inbox")]
    #[test]
    fn batch_runs_each_record() {
        let at = tb_v1_inbox(4096) as usize;
        let b = unsafe { BOX };
        assert!(active() && b.len == 4096 && (b.ptr as usize) as u32 as usize == at);
        let records = [64usize, 64 + 512];
        b.put32(BATCH_COUNT, 2);
        for (i, (&rec, value)) in records.iter().zip(["acme", "blocked"]).enumerate() {
            let (e, r) = (BATCH_ENTRIES + BATCH_ENTRY * i, b.sub(rec, 512));
            b.put32(e, rec as u32);
            b.put32(e + 4, 512);
            r.put32(HOOK, HOOK_PUBLISH);
            r.put32(MAX_MESSAGE, 1 << 20);
            r.put32(MAX_HEADER, 1 << 10);
            for f in [TOPIC, PAYLOAD, ID, SUB, GROUP, REASON] {
                r.put32(f + 4, u32::MAX);
            }
            r.put32(HEADER_COUNT, 1);
            let (name, val) = (HEADERS + ENTRY, HEADERS + ENTRY + 8);
            for (k, &byte) in b"tenant".iter().enumerate() {
                unsafe { *r.ptr.add(name + k) = byte };
            }
            for (k, &byte) in value.as_bytes().iter().enumerate() {
                unsafe { *r.ptr.add(val + k) = byte };
            }
            r.put32(HEADERS, name as u32);
            r.put32(HEADERS + 4, 6);
            r.put32(HEADERS + 8, val as u32);
            r.put32(HEADERS + 12, value.len() as u32);
        }
        let status = batch(|| match header(b"tenant") {
            Some(v) if same(v, b"blocked") => {
                set_reason(b"blocked tenant");
                1
            }
            Some(_) => 0,
            None => 2,
        });
        assert_eq!(status, 0);
        let verdict = |i: usize| b.u32(BATCH_ENTRIES + BATCH_ENTRY * i + BATCH_VERDICT);
        assert_eq!((verdict(0), verdict(1)), (0, 1));
        assert_eq!(b.u32(BATCH_CURRENT), 1);
        let count = |i: usize| b.sub(records[i], 512).u32(WRITES_COUNT);
        assert_eq!((count(0), count(1)), (0, 1));
        assert_eq!(b.sub(records[0], 512).u32(WRITES_PTR), 0);
        assert_eq!(rec().len, b.len); // the readers read the whole inbox again
        // The next call starts with empty lists.
        begin();
        assert_eq!((listed(), unsafe { FIRST }), (0, 0));
    }
}
