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
const WRITES_PTR: usize = crate::sys::consts::IN_WRITES_PTR as usize;
const WRITES_COUNT: usize = crate::sys::consts::IN_WRITES_COUNT as usize;
const HOOK: usize = crate::sys::consts::IN_HOOK as usize;
const MAX_MESSAGE: usize = crate::sys::consts::IN_MAX_MESSAGE as usize; // then max_header_bytes
const MAX_HEADER: usize = MAX_MESSAGE + 4;
const ATTEMPT: usize = crate::sys::consts::IN_ATTEMPT as usize; // then in_flight_ns, a u64
const IN_FLIGHT: usize = ATTEMPT + 4;
// Then (offset, length) pairs of the values, the header count and the header table.
pub(crate) const TOPIC: usize = crate::sys::consts::IN_TOPIC as usize;
pub(crate) const PAYLOAD: usize = crate::sys::consts::IN_PAYLOAD as usize;
pub(crate) const ID: usize = crate::sys::consts::IN_ID as usize;
pub(crate) const SUB: usize = crate::sys::consts::IN_SUB as usize;
pub(crate) const GROUP: usize = crate::sys::consts::IN_GROUP as usize;
pub(crate) const REASON: usize = crate::sys::consts::IN_REASON as usize;
const HEADER_COUNT: usize = crate::sys::consts::IN_HEADER_COUNT as usize; // then a reserved u32 and the table, 16 bytes an entry
const HEADERS: usize = HEADER_COUNT + 8;
const ENTRY: usize = crate::sys::consts::IN_ENTRY as usize;

/// The hooks that may change headers.
const HOOK_PUBLISH: u32 = crate::sys::consts::HOOK_PUBLISH as u32;
const HOOK_REDELIVER: u32 = crate::sys::consts::HOOK_REDELIVER as u32;

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
/// the load it makes in a WebAssembly runtime). A check against a constant offset is one
/// comparison, which the compiler drops when an earlier one covered it.
#[derive(Clone, Copy)]
struct Span {
    ptr: *mut u8,
    len: usize,
}

impl Span {
    /// No inbox: a well-aligned, non-null pointer to no bytes.
    const EMPTY: Span = Span { ptr: std::ptr::NonNull::<u64>::dangling().as_ptr() as *mut u8, len: 0 };

    /// Whether the `n` bytes at `off` are inside the span. Written so that it cannot
    /// overflow: where `n` is a constant no larger than what the span is known to hold (a
    /// header's name, once its length matched), it is one comparison.
    #[inline(always)]
    fn holds(self, off: usize, n: usize) -> bool {
        n <= self.len && off <= self.len - n
    }

    /// The little-endian u32 at `off`; a read past the span traps, as a slice index would.
    #[inline(always)]
    fn u32(self, off: usize) -> u32 {
        if !self.holds(off, 4) {
            past_the_end();
        }
        // SAFETY: inside the span (checked above).
        unsafe { self.u32_within(off) }
    }

    /// The little-endian u32 at `off`, which the caller has checked is inside the span.
    ///
    /// SAFETY: `off + 4 <= self.len`. The span is inside INBOX's buffer, which lives until the
    /// broker asks for another inbox (between calls).
    #[inline(always)]
    unsafe fn u32_within(self, off: usize) -> u32 {
        u32::from_le_bytes(std::ptr::read_unaligned(self.ptr.add(off) as *const [u8; 4]))
    }

    /// The `len` bytes at `off`, or None if they are not all inside the span.
    #[inline(always)]
    fn bytes(self, off: usize, len: usize) -> Option<&'static [u8]> {
        if !self.holds(off, len) {
            return None;
        }
        // SAFETY: as in `u32_within`. Nothing writes these bytes until the call returns: the
        // plugin writes only the fields of `put32` and `put64_within` (docs/ABI.md), which no
        // value overlaps.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.add(off), len) })
    }

    /// The record of `len` bytes at `off`.
    #[cfg(all(feature = "inbox", test))]
    fn sub(self, off: usize, len: usize) -> Span {
        if !self.holds(off, len) {
            past_the_end();
        }
        // SAFETY: inside the span (checked above).
        Span { ptr: unsafe { self.ptr.add(off) }, len }
    }

    /// Writes the little-endian u32 `v` at `off` (the fields the broker reads back: write
    /// lists, a batch's current message).
    #[inline(always)]
    fn put32(self, off: usize, v: u32) {
        if !self.holds(off, 4) {
            past_the_end();
        }
        // SAFETY: inside the span, as in `u32`; written through the pointer INBOX gave, and
        // no reference handed out covers these bytes (see `bytes`).
        unsafe { std::ptr::write_unaligned(self.ptr.add(off) as *mut [u8; 4], v.to_le_bytes()) }
    }

    /// Writes the little-endian u64 `v` at `off` (a batch's verdicts), which the caller has
    /// checked is inside the span.
    ///
    /// SAFETY: `off + 8 <= self.len`; then as in `put32`.
    #[cfg(feature = "inbox")]
    #[inline(always)]
    unsafe fn put64_within(self, off: usize, v: u64) {
        std::ptr::write_unaligned(self.ptr.add(off) as *mut [u8; 8], v.to_le_bytes())
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
/// INBOX's bytes, as a span (EMPTY until the broker asks for an inbox, and without the
/// feature `inbox`).
static mut BOX: Span = Span::EMPTY;
/// The message the readers read: the whole inbox in a single call, and always between calls;
/// message `i`'s record while a batch runs it.
static mut REC: Span = Span::EMPTY;

/// A record of a write list: op, a's address and length, b's address and length.
type Write = [u32; 5];
/// The write lists, one after the other (a batch's message `i` lists its writes after
/// message `i - 1`'s, a single call after the previous calls'), and the bytes their records
/// point to, one after the other in ARENA. A record holds the addresses it gives the broker
/// from the start, and a message's record (`writes_ptr`, `writes_count`) is kept up to date at
/// each write (see `write`), so nothing given may move while the call runs. When a Vec is
/// full: at the first write of a single call nothing in it is in use, and both are emptied
/// (WRITES alone if it is the full one); later in a single call, the call's own records or
/// bytes move to a new Vec and are pointed at there; in a batch, a larger Vec takes the full
/// one's place (a list's with a copy of its records, the message's record pointed at the
/// copy), and the full one is kept in FULL_LISTS or FULL_ARENAS until the lists are emptied,
/// when the next batch begins or a single call's first write finds one full. A call that
/// writes nothing touches none of this, and one that writes does not empty anything first.
/// Both are kept across calls, with their capacity (up to KEEP bytes, when emptied): a message
/// that writes allocates nothing once an instance has served a few.
static mut WRITES: Vec<Write> = Vec::new();
static mut ARENA: Vec<u8> = Vec::new();
static mut FULL_LISTS: Vec<Vec<Write>> = Vec::new();
static mut FULL_ARENAS: Vec<Vec<u8>> = Vec::new();
const KEEP: usize = 64 << 10;

/// The broker asks for an inbox of `size` bytes, between calls (exported with the feature
/// `inbox`).
#[cfg(feature = "inbox")]
#[no_mangle]
pub extern "C" fn tb_v1_inbox(size: u32) -> u32 {
    // SAFETY: one thread, and no reference to INBOX outlives a function of this module (the
    // old inbox's values, which readers handed out, are only valid until the call ends).
    let inbox = unsafe { &mut *addr_of_mut!(INBOX) };
    // At least the fixed fields, whatever the size (4096 and up, as the ABI has it): an
    // inbox, like a batch's record, always holds them (see `active`).
    *inbox = vec![0u64; ((size as usize).max(HEADERS) + 7) / 8];
    let whole = Span { ptr: inbox.as_mut_ptr() as *mut u8, len: inbox.len() * 8 };
    unsafe {
        BOX = whole;
        REC = whole;
    }
    // Before the instance's first call, then never again: the hooks need not ask (`enter`).
    // (Not in the crate's own tests, off wasm: the hook would log through the host.)
    #[cfg(target_arch = "wasm32")]
    crate::__private::hook_panics();
    whole.ptr as u32
}

/// The current message's record: the whole inbox, or one message of a batch.
#[inline(always)]
fn rec() -> Span {
    // SAFETY: one thread; a Span is a copy.
    unsafe { REC }
}

/// Whether the broker gave an inbox. Told by REC, which the readers load next (so that the
/// compiler loads it once): it is BOX, or in a batch a record. Either holds at least the
/// fixed fields (`tb_v1_inbox` and `batch` see to it), so REC's length is 0 or at least
/// HEADERS: tested so, the compiler knows the fixed fields are inside the record, and
/// drops the bounds checks of reading them.
#[inline(always)]
pub(crate) fn active() -> bool {
    rec().len >= HEADERS
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

/// Header `name`'s value.
#[inline(always)]
pub(crate) fn header(name: &[u8]) -> Option<&'static [u8]> {
    let (r, e) = find(name)?;
    // SAFETY: the entry is inside the record (`find`).
    let (at, len) = unsafe { (r.u32_within(e + 8), r.u32_within(e + 12)) };
    r.bytes(at as usize, len as usize)
}

/// Whether header `name` is set to `value`: its length compared first, before the value's
/// bounds are checked.
#[inline(always)]
pub(crate) fn header_is(name: &[u8], value: &[u8]) -> bool {
    let (r, e) = match find(name) {
        Some(found) => found,
        None => return false,
    };
    // SAFETY: the entry is inside the record (`find`).
    let (at, len) = unsafe { (r.u32_within(e + 8) as usize, r.u32_within(e + 12) as usize) };
    len == value.len() && r.bytes(at, len).map_or(false, |v| same(v, value))
}

/// The record, and the offset in it of header `name`'s entry, which is inside it. The
/// lookup every filter makes, once per message, inlined: the record taken once, the table
/// checked once against it (a count past the record traps), each entry's name compared by
/// its length first.
#[inline(always)]
fn find(name: &[u8]) -> Option<(Span, usize)> {
    let r = rec();
    let count = r.u32(HEADER_COUNT) as usize;
    if count > r.len.saturating_sub(HEADERS) / ENTRY {
        past_the_end();
    }
    let mut e = HEADERS;
    for _ in 0..count {
        // SAFETY: e + ENTRY <= HEADERS + count * ENTRY <= r.len (checked above).
        let (at, len) = unsafe { (r.u32_within(e) as usize, r.u32_within(e + 4) as usize) };
        if len == name.len() && r.bytes(at, len).map_or(false, |k| same(k, name)) {
            return Some((r, e));
        }
        e += ENTRY;
    }
    None
}

/// Whether `a` and `b` are the same bytes. `==` on slices calls memcmp, a function call per
/// comparison in WebAssembly; this compares in 4-byte words, inline (the last word may overlap
/// the one before), and bytes below 4. Up to 16 bytes, the usual length of a header's name or
/// value, it is four words with no loop, which for a literal (the name a filter looks for)
/// become constants, and the same word twice is loaded once.
#[inline(always)]
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    /// The 4 bytes at `i`, in one load (built from bytes, overlapping words would be loaded
    /// byte by byte).
    #[inline(always)]
    fn word(s: &[u8], i: usize) -> u32 {
        assert!(i + 4 <= s.len()); // always true of the callers' offsets: it folds away
        // SAFETY: the 4 bytes are inside s (asserted above).
        u32::from_le_bytes(unsafe { std::ptr::read_unaligned(s.as_ptr().add(i) as *const [u8; 4]) })
    }
    if n < 4 {
        // 0 to 3 bytes: the first, the middle and the last cover them all.
        return n == 0 || (a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1]);
    }
    if n <= 16 {
        let (j, k) = (4.min(n - 4), 8.min(n - 4));
        return word(a, 0) == word(b, 0)
            && word(a, j) == word(b, j)
            && word(a, k) == word(b, k)
            && word(a, n - 4) == word(b, n - 4);
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

/// Empties the write lists: a batch calls it first. (The readers read the whole inbox
/// outside a batch already.)
#[cfg(feature = "inbox")]
#[inline(always)]
pub(crate) fn begin() {
    // SAFETY: one thread, and no reference to WRITES or ARENA outlives this function.
    let writes = unsafe { &mut *addr_of_mut!(WRITES) };
    if writes.is_empty() {
        return; // nothing was written, nothing filled up
    }
    restart(writes);
}

/// The rest of `begin`, after a call that wrote.
#[inline(never)]
fn restart(writes: &mut Vec<Write>) {
    // SAFETY: as in `begin`.
    let arena = unsafe { &mut *addr_of_mut!(ARENA) };
    unsafe {
        (*addr_of_mut!(FULL_LISTS)).clear();
        (*addr_of_mut!(FULL_ARENAS)).clear();
    }
    if arena.capacity() > KEEP || writes.capacity() * 20 > KEEP {
        *arena = Vec::new();
        *writes = Vec::new();
    }
    writes.clear();
    arena.clear();
}

/// Whether the current message is a single call's (its record is the whole inbox), not one
/// of a batch's. Asked only when a list is full: the lists are then handled differently.
#[inline(always)]
fn single() -> bool {
    // SAFETY: one thread; a Span is a copy.
    rec().ptr == unsafe { BOX }.ptr
}

/// Where the current single call's records start in WRITES: the index of the record at the
/// address its inbox gives. A single call's records are always in WRITES, one after the
/// other (`new_list` moves them together), and their bytes in ARENA (`new_arena`).
#[inline(always)]
fn first_of_call(writes: &[Write]) -> usize {
    (rec().u32(WRITES_PTR).wrapping_sub(writes.as_ptr() as u32) / 20) as usize
}

/// Lists a write of the current message, with copies of its bytes, and gives the broker the
/// message's list as it now is, in the message's record: nothing is left to do when the hook
/// returns, and a call that writes nothing pays nothing. The broker zeroes `writes_count`
/// before each call (docs/ABI.md), and this writes it at each write: 0 says that this is the
/// message's first write, whose record gets its list's address. A message's writes follow
/// the previous one's in the lists, in a batch (emptied when it began) as from one single
/// call to the next, until a list is full: then, at the first write of a single call, when
/// none of what the lists hold is in use, they are emptied; so a message that writes costs
/// no emptying either (see `new_arena` and `new_list`).
#[inline(always)]
fn write(op: Op, a: &[u8], b: &[u8]) {
    let r = rec();
    let count = r.u32(WRITES_COUNT);
    // SAFETY: one thread, and no reference to ARENA or WRITES outlives this function.
    let arena = unsafe { &mut *addr_of_mut!(ARENA) };
    // No overflow: a and b are in memory, each at most isize::MAX bytes.
    let n = a.len() + b.len();
    if arena.capacity() - arena.len() < n {
        new_arena(n, count);
    }
    let at = arena.len();
    // SAFETY: the arena has room for n more bytes after `at` (checked above), and `copy`
    // writes every one of them before `set_len` makes them part of the Vec.
    let a_at = unsafe {
        let dst = arena.as_mut_ptr().add(at);
        copy(dst, a);
        copy(dst.add(a.len()), b);
        arena.set_len(at + n);
        dst as usize
    };
    let at = push([op as u32, a_at as u32, a.len() as u32, (a_at + a.len()) as u32, b.len() as u32], count);
    if count == 0 {
        r.put32(WRITES_PTR, at as u32);
    }
    r.put32(WRITES_COUNT, count + 1);
}

/// Makes room in ARENA, which lacks it for `n` more bytes, for a write of the current message,
/// which has made `count` before. At the first write of a single call nothing in the lists is
/// in use: they are emptied (and the arena replaced by a larger one only if `n` bytes are
/// more than it holds). Later in a single call, the call's bytes so far move to a new arena,
/// twice as large as the call needs, and its records are pointed at them: nothing else is in
/// use, and the old arenas go. In a batch, whose earlier messages' records point into the
/// arena, a larger one takes its place, the full one kept until the lists are emptied.
#[cold]
#[inline(never)]
fn new_arena(n: usize, count: u32) {
    // SAFETY: one thread, and no reference to ARENA, WRITES or FULL_ARENAS outlives this
    // function (nor `restart`'s, called here, to them).
    let arena = unsafe { &mut *addr_of_mut!(ARENA) };
    let writes = unsafe { &mut *addr_of_mut!(WRITES) };
    let full_arenas = unsafe { &mut *addr_of_mut!(FULL_ARENAS) };
    if single() {
        if count == 0 {
            restart(writes);
            if arena.capacity() < n {
                *arena = Vec::with_capacity(n.max(1024));
            }
            return;
        }
        let first = first_of_call(writes);
        let from = (writes[first][1].wrapping_sub(arena.as_ptr() as u32) as usize).min(arena.len());
        let mut next = Vec::with_capacity((2 * (arena.len() - from + n)).max(1024));
        next.extend_from_slice(&arena[from..]);
        let shift = (next.as_ptr() as u32).wrapping_sub(arena.as_ptr() as u32).wrapping_sub(from as u32);
        for w in &mut writes[first..] {
            w[1] = w[1].wrapping_add(shift);
            w[3] = w[3].wrapping_add(shift);
        }
        *arena = next;
        full_arenas.clear();
        return;
    }
    let full = std::mem::replace(arena, Vec::with_capacity(n.max(2 * arena.capacity()).max(1024)));
    if !full.is_empty() {
        full_arenas.push(full);
    }
}

/// Appends the record `w` of a message with `count` writes before it to WRITES, and returns
/// its address.
#[inline(always)]
fn push(w: Write, count: u32) -> usize {
    // SAFETY: one thread, and no reference to WRITES outlives this function.
    let writes = unsafe { &mut *addr_of_mut!(WRITES) };
    if writes.len() == writes.capacity() {
        new_list(count);
    }
    // SAFETY: there is room for one more (checked above); `set_len` counts it once written.
    unsafe {
        let at = writes.as_mut_ptr().add(writes.len());
        at.write(w);
        writes.set_len(writes.len() + 1);
        at as usize
    }
}

/// Makes room in WRITES, which is full, for a record of the current message, which has made
/// `count` writes before. In a single call, only the call's records are in use: at its first
/// write none, and WRITES is emptied (the arena, which holds this write's bytes already, is
/// left alone); later, its records move to a new list, twice as long as the call needs, and
/// its inbox is pointed at them. In a batch, a larger copy of WRITES takes its place, the full
/// one kept until the lists are emptied (messages that ended were given their lists in it),
/// and the message's record, if it has writes already, is pointed at their copy, so that its
/// list stays whole.
#[cold]
#[inline(never)]
fn new_list(count: u32) {
    // SAFETY: one thread, and no reference to WRITES or FULL_LISTS outlives this function.
    let writes = unsafe { &mut *addr_of_mut!(WRITES) };
    let full_lists = unsafe { &mut *addr_of_mut!(FULL_LISTS) };
    let r = rec();
    if single() {
        full_lists.clear();
        if count == 0 && writes.capacity() != 0 && writes.capacity() * 20 <= KEEP {
            writes.clear();
            return;
        }
        let first = if count == 0 { writes.len() } else { first_of_call(writes) };
        let mut list = Vec::with_capacity((2 * (writes.len() - first + 1)).max(64));
        list.extend_from_slice(&writes[first..]);
        if count != 0 {
            r.put32(WRITES_PTR, list.as_ptr() as u32);
        }
        *writes = list;
        return;
    }
    let mut list = Vec::with_capacity((2 * writes.capacity()).max(64));
    list.extend_from_slice(writes);
    if count != 0 {
        let moved = r.u32(WRITES_PTR).wrapping_sub(writes.as_ptr() as u32);
        r.put32(WRITES_PTR, (list.as_ptr() as u32).wrapping_add(moved));
    }
    let full = std::mem::replace(writes, list);
    if !full.is_empty() {
        full_lists.push(full);
    }
}

/// Copies `s` to `dst`. Header names and values are short: up to 16 bytes they are copied
/// inline, as four 4-byte words (the later ones may overlap) or, below 4 bytes, the first,
/// middle and last byte; `copy_nonoverlapping` calls memcpy in WebAssembly, and a loop would
/// be turned into that call.
///
/// SAFETY: `dst` is valid for `s.len()` bytes of writes, which do not overlap `s`.
#[inline(always)]
unsafe fn copy(dst: *mut u8, s: &[u8]) {
    let n = s.len();
    if n > 16 {
        return std::ptr::copy_nonoverlapping(s.as_ptr(), dst, n);
    }
    // Every offset written is below n: the words' at most n - 4, the bytes' at most n - 1.
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
}

/// How many writes the call has listed so far, in WRITES.
#[cfg(all(feature = "inbox", test))]
fn listed() -> usize {
    unsafe { (*addr_of_mut!(WRITES)).len() }
}

// A batch (docs/ABI.md, "Batches"): a header (count, current), count entries (record offset,
// record length, verdict), then one record per message, laid out as a single call's inbox.
#[cfg(feature = "inbox")]
const BATCH_COUNT: usize = crate::sys::consts::BATCH_COUNT as usize;
#[cfg(feature = "inbox")]
const BATCH_CURRENT: usize = crate::sys::consts::BATCH_CURRENT as usize;
#[cfg(feature = "inbox")]
const BATCH_ENTRIES: usize = crate::sys::consts::BATCH_ENTRIES as usize;
#[cfg(feature = "inbox")]
const BATCH_ENTRY: usize = crate::sys::consts::BATCH_ENTRY as usize; // record offset, record length, then the u64 verdict at 8
#[cfg(feature = "inbox")]
const BATCH_VERDICT: usize = crate::sys::consts::ENTRY_VERDICT as usize;

/// Runs `on_publish` on each message of the batch in the inbox, as tb_v1_on_publish would run it
/// on that message alone: the readers read its record, host calls act on it (`current`), and
/// its writes are its record's write list. Every list, and the bytes they point to, stay put
/// until the call returns, since the broker reads them all then (the lists are emptied when
/// the batch begins, and grow as it needs). Returns 0
/// with every entry's verdict written, or 1, before any message has run, for a batch this
/// SDK cannot read: the broker then calls tb_v1_on_publish on each message.
#[cfg(feature = "inbox")]
#[inline(always)]
pub(crate) fn batch<F: FnMut() -> i64>(mut on_publish: F) -> i32 {
    let b = unsafe { BOX };
    if !b.holds(0, BATCH_ENTRIES) {
        return 1;
    }
    let n = b.u32(BATCH_COUNT) as usize;
    let table = match n.checked_mul(BATCH_ENTRY).and_then(|t| t.checked_add(BATCH_ENTRIES)) {
        Some(end) if end <= b.len => end,
        _ => return 1,
    };
    let mut e = BATCH_ENTRIES;
    while e < table {
        // SAFETY: e + BATCH_ENTRY <= table <= b.len: the entry is inside the inbox.
        let (at, len) = unsafe { (b.u32_within(e) as usize, b.u32_within(e + 4) as usize) };
        // A record is 8-aligned (as the ABI has it; the reads would not need it), after the
        // table (where the verdicts are written), inside the inbox, and holds the fixed
        // fields. Its hook is the broker's to get right: the writers check it, as the host
        // functions would.
        if at % 8 != 0 || at < table || len < HEADERS || !b.holds(at, len) {
            return 1;
        }
        e += BATCH_ENTRY;
    }
    begin();
    let mut e = BATCH_ENTRIES;
    for i in 0..n {
        // SAFETY: the entry is inside the inbox, and its record too (both checked above).
        let r = unsafe {
            let (at, len) = (b.u32_within(e) as usize, b.u32_within(e + 4) as usize);
            Span { ptr: b.ptr.add(at), len }
        };
        unsafe { REC = r };
        b.put32(BATCH_CURRENT, i as u32);
        let v = on_publish();
        // SAFETY: inside the entry, as above.
        unsafe { b.put64_within(e + BATCH_VERDICT, v as u64) };
        e += BATCH_ENTRY;
    }
    unsafe { REC = b };
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
    fn copy_copies_every_length() {
        let text: Vec<u8> = (1..=40).collect();
        for n in 0..text.len() {
            // Guard bytes on both sides: nothing outside dst[..n] is written.
            let mut buf = vec![0xEEu8; n + 8];
            unsafe { copy(buf.as_mut_ptr().add(4), &text[..n]) };
            assert_eq!(&buf[4..4 + n], &text[..n], "{} bytes", n);
            assert!(buf[..4].iter().chain(&buf[4 + n..]).all(|&b| b == 0xEE), "{} bytes", n);
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

    /// The tests below use the module's statics (the inbox, the write lists): one at a time.
    #[cfg(feature = "inbox")]
    fn statics() -> std::sync::MutexGuard<'static, ()> {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        // Each test starts from the write lists a new instance has, whatever test ran before
        // it (the order is the harness's): a list kept full by one test made another's first
        // call see records it did not write, now and then.
        unsafe {
            *addr_of_mut!(WRITES) = Vec::new();
            *addr_of_mut!(ARENA) = Vec::new();
            *addr_of_mut!(FULL_LISTS) = Vec::new();
            *addr_of_mut!(FULL_ARENAS) = Vec::new();
        }
        guard
    }

    /// Writes a batch of publishes into a new inbox of `size` bytes, message `i` with the
    /// headers `headers[i]`, and returns the records' offsets (each record 1 KiB).
    #[cfg(feature = "inbox")]
    fn batch_inbox(size: u32, headers: &[&[(&str, &str)]]) -> (Span, Vec<usize>) {
        tb_v1_inbox(size);
        let b = unsafe { BOX };
        let table = BATCH_ENTRIES + BATCH_ENTRY * headers.len();
        let records: Vec<usize> = (0..headers.len()).map(|i| (table + 7) / 8 * 8 + 1024 * i).collect();
        b.put32(BATCH_COUNT, headers.len() as u32);
        for (i, (&rec, hs)) in records.iter().zip(headers).enumerate() {
            let (e, r) = (BATCH_ENTRIES + BATCH_ENTRY * i, b.sub(rec, 1024));
            b.put32(e, rec as u32);
            b.put32(e + 4, 1024);
            r.put32(HOOK, HOOK_PUBLISH);
            r.put32(MAX_MESSAGE, 1 << 20);
            r.put32(MAX_HEADER, 1 << 10);
            for f in [TOPIC, PAYLOAD, ID, SUB, GROUP, REASON] {
                r.put32(f + 4, u32::MAX);
            }
            r.put32(HEADER_COUNT, hs.len() as u32);
            let mut at = HEADERS + ENTRY * hs.len();
            for (h, (k, v)) in hs.iter().enumerate() {
                for (field, text) in [(0, k), (8, v)] {
                    for (j, &byte) in text.as_bytes().iter().enumerate() {
                        unsafe { *r.ptr.add(at + j) = byte };
                    }
                    r.put32(HEADERS + ENTRY * h + field, at as u32);
                    r.put32(HEADERS + ENTRY * h + field + 4, text.len() as u32);
                    at += text.len();
                }
            }
        }
        (b, records)
    }

    /// The bytes at the address `at` (as a record gives it, 32 bits) of one of `bufs`, found
    /// by their addresses' low 32 bits (the tests run on a 64-bit host).
    #[cfg(feature = "inbox")]
    fn resolve<T: Copy>(bufs: &[&Vec<T>], at: u32, n: usize) -> Vec<T> {
        if n == 0 {
            return Vec::new(); // anywhere will do: the broker reads nothing there
        }
        let size = std::mem::size_of::<T>() as u32;
        for buf in bufs {
            let start = buf.as_ptr() as u32;
            let off = at.wrapping_sub(start);
            if off % size == 0 && (off / size) as usize + n <= buf.len() {
                return buf[(off / size) as usize..][..n].to_vec();
            }
        }
        panic!("{:#x}: no list or arena of this call holds {} items there", at, n)
    }

    /// Message `i`'s write list, as its record gives it: (op, a, b) each.
    #[cfg(feature = "inbox")]
    fn writes_of(rec: Span) -> Vec<(u32, Vec<u8>, Vec<u8>)> {
        let (at, count) = (rec.u32(WRITES_PTR), rec.u32(WRITES_COUNT) as usize);
        if count == 0 {
            assert_eq!(at, 0);
            return Vec::new();
        }
        let lists = unsafe {
            let mut lists = vec![&*addr_of_mut!(WRITES)];
            lists.extend((*addr_of_mut!(FULL_LISTS)).iter());
            lists
        };
        let arenas = unsafe {
            let mut arenas = vec![&*addr_of_mut!(ARENA)];
            arenas.extend((*addr_of_mut!(FULL_ARENAS)).iter());
            arenas
        };
        resolve(&lists, at, count)
            .into_iter()
            .map(|w| (w[0], resolve(&arenas, w[1], w[2] as usize), resolve(&arenas, w[3], w[4] as usize)))
            .collect()
    }

    /// A batch of two publishes, the second with the header tenant=blocked: each message's
    /// record is read, the verdicts written, and the write list given to the message that
    /// wrote (the broker's side of this is the conformance suite's).
    #[cfg(feature = "inbox")]
    #[test]
    fn batch_runs_each_record() {
        let _lock = statics();
        let (b, records) = batch_inbox(4096, &[&[("tenant", "acme")], &[("tenant", "blocked")]]);
        assert!(active() && b.len == 4096);
        let status = batch(|| {
            if header_is(b"tenant", b"blocked") {
                set_reason(b"blocked tenant");
                return 1;
            }
            match header(b"tenant") {
                Some(v) if same(v, b"acme") => 0,
                _ => 2,
            }
        });
        assert_eq!(status, 0);
        let verdict = |i: usize| b.u32(BATCH_ENTRIES + BATCH_ENTRY * i + BATCH_VERDICT);
        assert_eq!((verdict(0), verdict(1)), (0, 1));
        assert_eq!(b.u32(BATCH_CURRENT), 1);
        assert_eq!(writes_of(b.sub(records[0], 1024)), vec![]);
        assert_eq!(writes_of(b.sub(records[1], 1024)), vec![(Op::SetReason as u32, b"blocked tenant".to_vec(), vec![])]);
        assert_eq!(rec().len, b.len); // the readers read the whole inbox again
        // The next call starts with empty lists.
        begin();
        assert_eq!(listed(), 0);
    }

    /// Enough writes, and bytes, for the list and the arena to fill up several times within
    /// one batch, and in the middle of a message's writes: every message still has its own
    /// writes, in one list, pointing at the bytes it wrote.
    #[cfg(feature = "inbox")]
    #[test]
    fn write_lists_stay_put_as_they_grow() {
        let _lock = statics();
        begin();
        unsafe {
            *addr_of_mut!(WRITES) = Vec::new();
            *addr_of_mut!(ARENA) = Vec::new();
        }
        let n = 100;
        let (b, records) = batch_inbox(128 << 10, &vec![&[][..]; n]);
        let value = |i: usize| "v".repeat(i * 7);
        let mut i = 0;
        let status = batch(|| {
            // Message i writes i % 4 headers and, every third message, a reason.
            for k in 0..i % 4 {
                assert_eq!(set_header(format!("h{}", k).as_bytes(), value(i + k).as_bytes()), 0);
            }
            if i % 3 == 0 {
                set_reason(value(i).as_bytes());
            }
            i += 1;
            0
        });
        assert_eq!(status, 0);
        assert!(unsafe { (*addr_of_mut!(FULL_LISTS)).len() > 1 && (*addr_of_mut!(FULL_ARENAS)).len() > 1 });
        for (i, &rec) in records.iter().enumerate() {
            let mut want: Vec<_> = (0..i % 4)
                .map(|k| (Op::SetHeader as u32, format!("h{}", k).into_bytes(), value(i + k).into_bytes()))
                .collect();
            if i % 3 == 0 {
                want.push((Op::SetReason as u32, value(i).into_bytes(), vec![]));
            }
            assert_eq!(writes_of(b.sub(rec, 1024)), want, "message {}", i);
        }
        begin();
        assert!(unsafe { (*addr_of_mut!(FULL_LISTS)).is_empty() && (*addr_of_mut!(FULL_ARENAS)).is_empty() });
        assert_eq!(listed(), 0);
    }

    /// What the broker does before a single call: the inbox's write list is empty.
    #[cfg(feature = "inbox")]
    fn next_call(r: Span) {
        r.put32(WRITES_PTR, 0);
        r.put32(WRITES_COUNT, 0);
    }

    /// A single call's writes are the inbox's list, given at each write; its hook decides
    /// what may be written. The next call's list is its own.
    #[cfg(feature = "inbox")]
    #[test]
    fn single_call_lists_its_writes() {
        let _lock = statics();
        tb_v1_inbox(4096);
        let r = rec();
        r.put32(HOOK, HOOK_REDELIVER);
        r.put32(MAX_MESSAGE, 8);
        r.put32(MAX_HEADER, 8);
        assert_eq!(set_payload(b"x"), -3); // not in on_redeliver
        assert_eq!(set_header(b"", b"x"), -1);
        assert_eq!(set_header(b"name", b"value"), -2); // 9 bytes, over max_header_bytes
        assert_eq!(writes_of(r), vec![]);
        assert_eq!(set_header(b"k", b"v"), 0);
        assert_eq!(del_header(b"gone"), 0);
        let want = vec![(Op::SetHeader as u32, b"k".to_vec(), b"v".to_vec()), (Op::DelHeader as u32, b"gone".to_vec(), vec![])];
        assert_eq!(writes_of(r), want);
        next_call(r);
        assert_eq!(writes_of(r), vec![]);
        set_reason(b"why");
        assert_eq!(writes_of(r), vec![(Op::SetReason as u32, b"why".to_vec(), vec![])]);
    }

    /// Single calls one after the other, writing more and more, so that the lists fill up at
    /// a call's first write and in the middle of its writes, many times: each call's list is
    /// whole, and what the lists keep stays bounded by what one call needs.
    #[cfg(feature = "inbox")]
    #[test]
    fn single_calls_reuse_the_lists() {
        let _lock = statics();
        tb_v1_inbox(4096);
        let r = rec();
        r.put32(HOOK, HOOK_PUBLISH);
        r.put32(MAX_MESSAGE, 1 << 20);
        r.put32(MAX_HEADER, 1 << 20);
        let value = |i: usize, k: usize| format!("{}-{}-", i, k).repeat((i * 7 + k) % 300);
        for i in 0..400 {
            next_call(r);
            let writes = 1 + i % 40;
            let mut want = Vec::new();
            for k in 0..writes {
                let (name, v) = (format!("h{}", k), value(i, k));
                assert_eq!(set_header(name.as_bytes(), v.as_bytes()), 0);
                want.push((Op::SetHeader as u32, name.into_bytes(), v.into_bytes()));
            }
            assert_eq!(writes_of(r), want, "call {}", i);
            unsafe {
                // A single call never keeps a full list or arena, and neither list grows past
                // twice what a call needs (40 records; 40 values of up to ~2,700 bytes).
                assert!((*addr_of_mut!(FULL_LISTS)).is_empty() && (*addr_of_mut!(FULL_ARENAS)).is_empty());
                assert!((*addr_of_mut!(WRITES)).capacity() <= 128, "call {}", i);
                assert!((*addr_of_mut!(ARENA)).capacity() <= 2 * 40 * 2800, "call {}", i);
            }
        }
        // A batch after them starts with empty lists, and a single call after it reuses them.
        let (b, records) = batch_inbox(4096, &[&[], &[]]);
        assert_eq!(batch(|| { set_reason(b"batch"); 0 }), 0);
        assert_eq!(writes_of(b.sub(records[1], 1024)), vec![(Op::SetReason as u32, b"batch".to_vec(), vec![])]);
        assert_eq!(listed(), 2);
        b.sub(0, 4096).put32(HOOK, HOOK_PUBLISH);
        next_call(b);
        set_reason(b"alone");
        assert_eq!(writes_of(b), vec![(Op::SetReason as u32, b"alone".to_vec(), vec![])]);
    }

    /// A record outside the inbox, over the entries, too short or not 8-aligned declines
    /// the batch before any message runs.
    #[cfg(feature = "inbox")]
    #[test]
    fn batch_declines_bad_records() {
        let _lock = statics();
        for (entry, bad) in [(0, 4000u32), (4, 1u32 << 20), (0, 8), (4, 40), (0, 1028)] {
            let (b, _) = batch_inbox(4096, &[&[], &[]]);
            b.put32(BATCH_ENTRIES + BATCH_ENTRY + entry, bad); // message 1's offset or length
            let mut ran = 0;
            assert_eq!(batch(|| { ran += 1; 0 }), 1, "entry field {} = {}", entry, bad);
            assert_eq!(ran, 0);
            assert_eq!(rec().len, b.len);
        }
        let (b, _) = batch_inbox(4096, &[&[]]);
        b.put32(BATCH_COUNT, 1000); // more entries than the inbox holds
        assert_eq!(batch(|| 0), 1);
    }
}
