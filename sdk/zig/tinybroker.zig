//! tinybroker plugin ABI v1 for Zig 0.11 (docs/ABI.md is the contract).
//!
//! A plugin is a freestanding wasm32 library. It writes its hooks as ordinary functions and
//! exports them with `onPublish`, `onAck`, `onRedeliver` and `onInit` in a comptime block;
//! this module exports the version marker. A tenant filter:
//!
//!     const tb = @import("tinybroker");
//!     pub const panic = tb.panic;
//!     comptime { tb.onPublish(filter); }
//!
//!     fn filter() !tb.Publish {
//!         const want = try tb.config.get("tenant") orelse return tb.Publish.drop("no tenant");
//!         if (tb.msg.headerIs("tenant", want)) return tb.Publish.pass;
//!         return tb.Publish.drop("wrong tenant");
//!     }
//!
//! Build: zig build-lib -target wasm32-freestanding -dynamic -rdynamic -O ReleaseSmall
//!        --mod tinybroker::path/to/tinybroker.zig --deps tinybroker plugin.zig
//!
//! Readers return slices allocated in a per-call arena (`allocator()`), valid until the hook
//! returns; the arena is reset after every call, keeping up to 64 KiB for the next one, so
//! nothing leaks between calls. A hook may return an error: it is logged at error level and
//! the call traps, and the plugin's failure_policy decides the message's fate.
//!
//! The inbox and batches (docs/ABI.md, "The inbox", "Batches") are on by default, an option
//! set in the plugin's root file (`pub const tinybroker_options = tb.Options{ .inbox = false };`
//! turns them off). The SDK then exports tb_v1_inbox, and tb_v1_on_publish_batch with onPublish: readers read the
//! message from the inbox, payload and header changes and reasons go to the write list (with
//! copies of their bytes, so the slices given need not outlive the writer's call), and a
//! batch runs the plugin's on_publish function on each of its messages. A broker that never
//! asks for the inbox gets host calls, as without the option.

const std = @import("std");

// ---- host functions (module "tinybroker") ----

const host = struct {
    extern "tinybroker" fn v1_log(level: i32, ptr: [*]const u8, len: usize) void;
    extern "tinybroker" fn v1_now() i64;
    extern "tinybroker" fn v1_config(buf: [*]u8, cap: usize) i32;
    extern "tinybroker" fn v1_config_get(key: [*]const u8, key_len: usize, buf: [*]u8, cap: usize) i32;
    extern "tinybroker" fn v1_set_reason(ptr: [*]const u8, len: usize) void;
    extern "tinybroker" fn v1_msg_topic(buf: [*]u8, cap: usize) i32;
    extern "tinybroker" fn v1_msg_payload(buf: [*]u8, cap: usize) i32;
    extern "tinybroker" fn v1_msg_header(key: [*]const u8, key_len: usize, buf: [*]u8, cap: usize) i32;
    extern "tinybroker" fn v1_msg_header_count() i32;
    extern "tinybroker" fn v1_msg_header_name(index: i32, buf: [*]u8, cap: usize) i32;
    extern "tinybroker" fn v1_msg_id(buf: [*]u8, cap: usize) i32;
    extern "tinybroker" fn v1_msg_set_topic(ptr: [*]const u8, len: usize) i32;
    extern "tinybroker" fn v1_msg_set_payload(ptr: [*]const u8, len: usize) i32;
    extern "tinybroker" fn v1_msg_set_header(key: [*]const u8, key_len: usize, val: [*]const u8, val_len: usize) i32;
    extern "tinybroker" fn v1_msg_del_header(key: [*]const u8, key_len: usize) i32;
    extern "tinybroker" fn v1_event_subscription(buf: [*]u8, cap: usize) i32;
    extern "tinybroker" fn v1_event_group(buf: [*]u8, cap: usize) i32;
    extern "tinybroker" fn v1_event_attempt() i32;
    extern "tinybroker" fn v1_event_in_flight_ns() i64;
    extern "tinybroker" fn v1_event_reason(buf: [*]u8, cap: usize) i32;
    extern "tinybroker" fn v1_emit(topic: [*]const u8, topic_len: usize, payload: [*]const u8, payload_len: usize) i32;
    extern "tinybroker" fn v1_emit_header(handle: i32, key: [*]const u8, key_len: usize, val: [*]const u8, val_len: usize) i32;
};

/// The version marker the broker looks for. It is never called.
export fn tinybroker_abi_v1() void {}

/// The SDK's options, which a plugin sets in its root file (as std_options):
/// `pub const tinybroker_options = tb.Options{ .inbox = false };`.
pub const Options = struct {
    /// Export tb_v1_inbox and, with onPublish, tb_v1_on_publish_batch (docs/ABI.md, "The
    /// inbox", "Batches"): the broker writes each call's message into the plugin's memory and
    /// may give a publish frame's messages in one call. It saves host calls and, in frames,
    /// most of a call's cost; for a message published alone the broker pays for writing it, and
    /// a filter that reads one header costs about the same. On by default; `.inbox = false`
    /// reads every field with a host call.
    inbox: bool = true,
};

const root = @import("root");

/// The options the plugin set (tinybroker_options in its root file), or the defaults.
pub const options: Options = if (@hasDecl(root, "tinybroker_options")) root.tinybroker_options else .{};

// A slice's pointer as the host should see it: an empty slice's pointer may be anything
// (Zig may leave it undefined, 0xaaaaaaaa); pass one inside memory rather than rely on the
// host ignoring it.
const empty = [1]u8{0};
fn p(s: []const u8) [*]const u8 {
    return if (s.len == 0) &empty else s.ptr;
}

/// Whether a and b hold the same bytes, as std.mem.eql. Inline, and without a loop up to 16
/// bytes (two loads of each side, overlapping where the length is not a whole number of
/// them): comparing with a literal, as a filter does with a header's name or value, comes
/// down to a load or two compared with constants where it is written. Comparing names and
/// values is most of what a plugin does with the inbox, and a byte loop costs wasm
/// instructions per byte (ReleaseSmall unrolls nothing).
inline fn same(a: []const u8, b: []const u8) bool {
    return a.len == b.len and sameBytes(a.ptr, b.ptr, a.len);
}

/// Whether the n bytes at a and b are the same (see same). The last bytes are compared first:
/// the JIT checks the bounds of a load, and not again for a load below it from the same
/// address.
inline fn sameBytes(a: [*]const u8, b: [*]const u8, n: usize) bool {
    if (n > 16) return sameLong(a, b, n);
    if (n >= 8) return load(u64, a, n - 8) == load(u64, b, n - 8) and load(u64, a, 0) == load(u64, b, 0);
    if (n >= 4) return load(u32, a, n - 4) == load(u32, b, n - 4) and load(u32, a, 0) == load(u32, b, 0);
    if (n >= 2) return load(u16, a, n - 2) == load(u16, b, n - 2) and load(u16, a, 0) == load(u16, b, 0);
    return n == 0 or a[0] == b[0];
}

/// sameBytes past 16 bytes: eight at a time, the last eight overlapping.
fn sameLong(a: [*]const u8, b: [*]const u8, n: usize) bool {
    var i: usize = 0;
    while (i + 8 < n) : (i += 8) {
        if (load(u64, a, i) != load(u64, b, i)) return false;
    }
    return load(u64, a, n - 8) == load(u64, b, n - 8);
}

/// x, which the compiler cannot see through: no code, but no assumption either.
inline fn hidden(x: usize) usize {
    return asm (""
        : [ret] "=r" (-> usize),
        : [x] "0" (x),
    );
}

/// x, computed here: the compiler may neither move its computation (a load) past this point
/// nor leave it out. No code.
inline fn here(x: u32) u32 {
    return asm volatile (""
        : [ret] "=r" (-> u32),
        : [x] "0" (x),
    );
}

/// here for a u64.
inline fn here64(x: u64) u64 {
    return asm volatile (""
        : [ret] "=r" (-> u64),
        : [x] "0" (x),
    );
}

/// The T at s + at, unaligned.
inline fn load(comptime T: type, s: [*]const u8, at: usize) T {
    return std.mem.readIntNative(T, s[at..][0..@sizeOf(T)]);
}

/// Stores v at d + at, unaligned.
inline fn store(comptime T: type, d: [*]u8, at: usize, v: T) void {
    std.mem.writeIntNative(T, d[at..][0..@sizeOf(T)], v);
}

// ---- memory ----

// The page allocator of wasm32 (memory.grow); the native one only for this file's tests.
const backing = if (@import("builtin").target.isWasm()) std.heap.wasm_allocator else std.heap.page_allocator;
var arena_state = std.heap.ArenaAllocator.init(backing);

/// The per-call arena: what it allocates lives until the hook returns. It is arena_state's,
/// but its allocations first note that the arena is in use (arena_used), which is what a hook
/// looks at when it returns: a global, where the arena's own state is in memory.
pub fn allocator() std.mem.Allocator {
    return .{ .ptr = &arena_state, .vtable = &arena_vtable };
}

/// 1 once the arena has given memory since it was last emptied, else 0.
const arena_used = Global("tinybroker_arena_used");

const arena_vtable = std.mem.Allocator.VTable{
    .alloc = struct {
        fn alloc(ctx: *anyopaque, len: usize, ptr_align: u8, ret_addr: usize) ?[*]u8 {
            arena_used.set(1);
            return arena_state.allocator().vtable.alloc(ctx, len, ptr_align, ret_addr);
        }
    }.alloc,
    .resize = struct {
        fn resize(ctx: *anyopaque, buf: []u8, buf_align: u8, new_len: usize, ret_addr: usize) bool {
            arena_used.set(1);
            return arena_state.allocator().vtable.resize(ctx, buf, buf_align, new_len, ret_addr);
        }
    }.resize,
    .free = struct {
        fn free(ctx: *anyopaque, buf: []u8, buf_align: u8, ret_addr: usize) void {
            arena_state.allocator().vtable.free(ctx, buf, buf_align, ret_addr);
        }
    }.free,
};

/// What the arena keeps between calls; more is given back to the page allocator.
pub const arena_retain_bytes = 64 << 10;

/// The size of the static buffer every reader tries first.
pub const scratch_bytes = 1024;
var scratch: [scratch_bytes]u8 = undefined;

/// Reads a value with the ABI's convention into the arena: null if absent (-1).
fn read(comptime f: anytype, args: anytype) error{OutOfMemory}!?[]u8 {
    const n = @call(.auto, f, args ++ .{ @as([*]u8, &scratch), @as(usize, scratch_bytes) });
    if (n < 0) return null;
    const len: usize = @intCast(n);
    if (len <= scratch_bytes) return try allocator().dupe(u8, scratch[0..len]);
    const buf = try allocator().alloc(u8, len);
    const got = @call(.auto, f, args ++ .{ buf.ptr, len });
    return buf[0..@min(len, @as(usize, @intCast(@max(got, 0))))];
}

/// topicIs and headerIs with host calls. They are not inline, and take slices (which Zig
/// passes as a pointer and a length) rather than readEql's tuple (which it passes through
/// memory): an inline reader's host path would otherwise give its caller a stack frame, set
/// up on every call, even one that reads the inbox.
noinline fn hostTopicIs(t: []const u8) bool {
    return readEql(host.v1_msg_topic, .{}, t);
}

/// The writers' host calls. The writers are inline (with the inbox, a few loads and a call
/// of write), their host calls not: check's result, an error union of an i32, is returned
/// through memory, which would give the hook a stack frame.
noinline fn hostSetHeader(name: []const u8, value: []const u8) Error!void {
    _ = try check(host.v1_msg_set_header(p(name), name.len, p(value), value.len));
}

noinline fn hostSetPayload(b: []const u8) Error!void {
    _ = try check(host.v1_msg_set_payload(p(b), b.len));
}

noinline fn hostDelHeader(name: []const u8) Error!void {
    _ = try check(host.v1_msg_del_header(p(name), name.len));
}

noinline fn hostHeaderIs(name: []const u8, value: []const u8) bool {
    return readEql(host.v1_msg_header, .{ p(name), name.len }, value);
}

/// Whether the value equals want, without allocating when it fits the scratch buffer.
fn readEql(comptime f: anytype, args: anytype, want: []const u8) bool {
    const n = @call(.auto, f, args ++ .{ @as([*]u8, &scratch), @as(usize, scratch_bytes) });
    if (n < 0 or @as(usize, @intCast(n)) != want.len) return false;
    if (want.len <= scratch_bytes) return std.mem.eql(u8, scratch[0..want.len], want);
    const v = (read(f, args) catch return false) orelse return false;
    return std.mem.eql(u8, v, want);
}

// ---- the inbox (docs/ABI.md, "The inbox", "Batches"; the offsets are internal/abi's) ----

/// The layout of a message's inbox: little-endian u32s at fixed offsets.
const In = struct {
    const writes_ptr = 0;
    const writes_count = 4;
    const hook = 8;
    const max_message = 12;
    const max_header = 16;
    const attempt = 20;
    const in_flight = 24; // a u64
    // (offset, length) pairs of the values
    const topic = 32;
    const payload = 40;
    const id = 48;
    const sub = 56;
    const group = 64;
    const reason = 72;
    const header_count = 80;
    const headers = 88; // header_count entries: name offset, name length, value offset, value length
    const entry = 16;
    const absent: u32 = 0xFFFFFFFF;
};

/// The hooks, as the inbox names them.
const hook_publish = 2;
const hook_redeliver = 4;

/// The layout of a batch: count, current, 8 reserved bytes, then count entries (record
/// offset, record length, u64 verdict), then the records.
const Batch = struct {
    const count = 0;
    const current = 4;
    const entries = 16;
    const entry = 16;
    const verdict = 8; // in an entry
};

/// The write list's operations.
const Op = enum(u32) { set_payload = 1, set_header = 2, del_header = 3, set_reason = 4 };

/// A record of the write list: five u32s, (pointer, length) pairs into memory.
const Write = extern struct { op: u32, a_ptr: u32, a_len: u32, b_ptr: u32, b_len: u32 };

comptime {
    std.debug.assert(@sizeOf(Write) == 20);
}

/// One message as the broker wrote it: a single call's inbox, or one record of a batch.
/// Offsets in it count from its start; a value that points outside it is absent. Its methods
/// are inline: a reader compiles to the loads it needs where it is called, with no copy of
/// the record for a call (Zig passes a struct to a function through memory).
const Record = struct {
    b: []u8,

    inline fn get(r: Record, off: usize) u32 {
        return std.mem.readIntLittle(u32, r.b[off..][0..4]);
    }

    inline fn put(r: Record, off: usize, v: u32) void {
        std.mem.writeIntLittle(u32, r.b[off..][0..4], v);
    }

    /// The value whose (offset, length) pair is at off; null if absent. One comparison
    /// checks both: an absent value's length, 0xFFFFFFFF, ends past any record (one starts
    /// above address 0, so none can be that long).
    inline fn field(r: Record, off: usize) ?[]const u8 {
        return r.value(r.get(off), r.get(off + 4));
    }

    /// The value at offset at, len bytes long, of the record; null if it ends past it.
    inline fn value(r: Record, at: u32, len: u32) ?[]const u8 {
        if (@as(u64, at) + len > r.b.len) return null;
        return r.b[at..][0..len];
    }

    inline fn headerCount(r: Record) usize {
        return @min(r.get(In.header_count), (r.b.len - In.headers) / In.entry);
    }

    inline fn headerName(r: Record, i: usize) ?[]const u8 {
        if (i >= r.headerCount()) return null;
        return r.field(In.headers + In.entry * i);
    }

    /// The value of header name: the table is sorted by name, but most messages have a few
    /// headers, which a scan comparing lengths first finds sooner than a binary search (and
    /// the scan is inline, so a literal name is compared as constants). The scan takes the
    /// table as the broker wrote it, as the ABI says it is (a name outside the record would
    /// be read where it points, or trap outside memory); the value it returns is checked, as
    /// every field is.
    inline fn header(r: Record, name: []const u8) ?[]const u8 {
        return r.lookup(name, false, "");
    }

    /// Whether header name is set to exactly want.
    inline fn headerIs(r: Record, name: []const u8, want: []const u8) bool {
        return r.lookup(name, true, want);
    }

    /// header (compare false), or headerIs (compare true): the comparison is made where the
    /// header is found, so that the scan's ends do not meet before it (which would cost a
    /// filter a branch on a value that each of them knows).
    inline fn lookup(r: Record, name: []const u8, comptime compare: bool, want: []const u8) if (compare) bool else ?[]const u8 {
        const n: usize = r.get(In.header_count);
        if (n > 16) {
            const e = headerSearch(r.b, r.headerCount(), name);
            return if (e == 0) absent(compare) else r.found(compare, r.get(e + 8), r.get(e + 12), want);
        }
        // An entry's fields are loaded at offsets from its address (not from the record's
        // start): the JIT checks the bounds of the first load from an address, and not again
        // for loads below it. hidden keeps the compiler from counting the loop with a pointer
        // into the middle of an entry, from which the fields would be at negative offsets,
        // each an address of its own.
        var e = @intFromPtr(r.b.ptr) + In.headers;
        const stop = e + In.entry * n;
        while (e != stop) : (e = hidden(e + In.entry)) {
            const entry: *align(1) const [4]u32 = @ptrFromInt(e);
            // The last field first, where it is (see here): the JIT then checks the bounds
            // of the entry once.
            const value_len = here(entry[3]);
            if (std.mem.littleToNative(u32, entry[1]) == name.len and sameBytes(r.b.ptr + std.mem.littleToNative(u32, entry[0]), name.ptr, name.len)) {
                return r.found(compare, std.mem.littleToNative(u32, entry[2]), std.mem.littleToNative(u32, value_len), want);
            }
        }
        return absent(compare);
    }

    /// The header found, whose value is len bytes at offset at: the value (null if it
    /// ends past the record), or whether it is want (the lengths compared first, which
    /// decides most comparisons).
    inline fn found(r: Record, comptime compare: bool, at: u32, len: u32, want: []const u8) if (compare) bool else ?[]const u8 {
        if (!compare) return r.value(at, len);
        return len == want.len and @as(u64, at) + len <= r.b.len and sameBytes(r.b.ptr + at, want.ptr, len);
    }

    inline fn absent(comptime compare: bool) if (compare) bool else ?[]const u8 {
        return if (compare) false else null;
    }

    inline fn hook(r: Record) u32 {
        return r.get(In.hook);
    }

    inline fn mayChangeHeaders(r: Record) bool {
        const h = r.hook();
        return h == hook_publish or h == hook_redeliver;
    }
};

/// Record.header for a message with many (n) headers, in the record b: a binary search.
/// Returns the offset of name's entry, or 0 if it has none. It takes no Record, which Zig
/// would pass through memory, and is not inline: it is long, and rarely needed.
noinline fn headerSearch(b: []u8, n: usize, name: []const u8) usize {
    const r = Record{ .b = b };
    var lo: usize = 0;
    var hi = n;
    while (lo < hi) {
        const mid = lo + (hi - lo) / 2;
        const e = In.headers + In.entry * mid;
        switch (std.mem.order(u8, r.field(e) orelse "", name)) {
            .eq => return e,
            .lt => lo = mid + 1,
            .gt => hi = mid,
        }
    }
    return 0;
}

/// Whether a batch's table of n entries fits in an inbox of size bytes (which holds at least
/// the count). The checks of a batch take and return scalars: Zig would build an optional
/// (?usize, ?Record) in memory, giving tb_v1_on_publish_batch a stack frame and a store and
/// loads for each message.
inline fn tableFits(size: usize, n: usize) bool {
    return n <= (size - Batch.entries) / Batch.entry;
}

/// Whether a record of a batch, len bytes at offset at of an inbox of size bytes whose table
/// ends at table, lies after the table, inside the inbox, and holds the fixed fields: what
/// keeps the SDK's reads and writes of a message inside the inbox, and off the table. The rest
/// of the layout is taken as the ABI gives it (records 8-aligned, each a publish's): checks
/// cost every message of a batch (each record is checked as the batch reaches it, with the
/// loads that find it), and those would protect nothing.
inline fn recordFits(size: usize, table: usize, at: usize, len: usize) bool {
    return at >= table and len >= In.headers and @as(u64, at) + len <= size;
}

/// The inbox's state. Only with options.inbox; buf is null until the broker asks for one.
const inbox = struct {
    /// The inbox the broker gave the last tb_v1_inbox.
    var buf: ?[]align(8) u8 = null;
    /// The write lists of the call in progress, one message's after another's (a batch's
    /// message i lists its writes after message i-1's): writes_len Writes at the address
    /// writes_at, which has room for writes_cap (none at first: writes_at is 0). The broker
    /// reads them after the call returns, so they are emptied later, by the first write of the
    /// next call (or the next batch), keeping up to arena_retain_bytes: a call that writes
    /// nothing spends nothing on them, before or after. In globals (see Global), as the
    /// copies' room is: a write reads and sets them.
    const writes_at = Global("tinybroker_writes_at");
    const writes_len = Global("tinybroker_writes_len");
    const writes_cap = Global("tinybroker_writes_cap");
    /// 1 while a batch is running, else 0: its messages' writes go on one list, which only
    /// the batch empties, when it starts.
    const batching = Global("tinybroker_batching");
    /// Copies of the bytes the write lists point to (see keep): room_len bytes at room_at
    /// are what is left of kept, then, once kept is full, of the last chunk taken from more.
    /// Both are emptied with the lists (more keeping up to arena_retain_bytes), and the room
    /// is kept again: giveInbox empties them first, before any write.
    var kept: [kept_bytes]u8 = undefined;
    const room_at = Global("tinybroker_room_at");
    const room_len = Global("tinybroker_room_len");
    var more = std.heap.ArenaAllocator.init(backing);
};

/// The size of the static buffer that a call's writes copy their bytes into first.
const kept_bytes = 4096;

/// The message the readers read: record i while a batch runs message i, the whole inbox
/// otherwise (giveInbox sets it, and publishBatch sets it back when it returns). None (length
/// 0) until the broker gives an inbox, and only then: a record is never shorter than its
/// fixed fields, so its length is what active() looks at. In two globals of the module (see
/// Global), which every reader gets.
const current = struct {
    const at = Global("tinybroker_rec_at");
    const length = Global("tinybroker_rec_len");

    inline fn len() usize {
        return length.get();
    }

    /// The record; only while there is one (len() != 0).
    inline fn get() Record {
        return .{ .b = @as([*]u8, @ptrFromInt(at.get()))[0..len()] };
    }

    inline fn set(r: Record) void {
        at.set(@intFromPtr(r.b.ptr));
        length.set(r.b.len);
    }
};

/// A usize (a u32 on wasm32) that the SDK reads or writes on every call, in a global of the wasm module (declared
/// in assembly: Zig puts its own globals in memory) rather than in memory: wazero checks the
/// bounds of every load and store to memory, even at a constant address, which costs several
/// instructions more than reading or writing a global. The global is read and written with
/// volatile assembly, which the compiler neither moves nor merges (a batch changes the record
/// between messages). Natively, in this file's tests, a variable.
fn Global(comptime name: []const u8) type {
    if (!is_wasm) return struct {
        var v: usize = 0;

        inline fn get() usize {
            return v;
        }

        inline fn set(x: usize) void {
            v = x;
        }
    };
    return struct {
        comptime {
            asm (".globaltype " ++ name ++ ", i32\n" ++ name ++ ":\n");
        }

        inline fn get() usize {
            return asm volatile ("global.get " ++ name ++ "\nlocal.set %[ret]"
                : [ret] "=r" (-> usize),
            );
        }

        inline fn set(x: usize) void {
            asm volatile ("local.get %[x]\nglobal.set " ++ name
                :
                : [x] "r" (x),
            );
        }
    };
}

const is_wasm = @import("builtin").target.isWasm();

/// Whether the readers and writers use the inbox: the option is set and the broker asked for
/// one (an older broker never does).
inline fn active() bool {
    return options.inbox and current.len() != 0;
}

/// tb_v1_inbox: the broker asks for an inbox of size bytes, between calls.
fn giveInbox(size: u32) callconv(.C) u32 {
    if (inbox.buf) |old| backing.free(old);
    inbox.buf = null;
    clearWrites(); // the last call's lists have been read; and the room is set

    current.set(.{ .b = &.{} });
    const n = std.mem.alignForward(usize, @max(size, In.headers), 8);
    const b = backing.alignedAlloc(u8, 8, n) catch return 0; // 0 fails the call
    @memset(b, 0);
    inbox.buf = b;
    current.set(.{ .b = b });
    return @intCast(@intFromPtr(b.ptr));
}

comptime {
    if (options.inbox) @export(giveInbox, .{ .name = "tb_v1_inbox" });
}

/// An address for the write list: a zero-length value gets one inside memory. (Natively, in
/// this file's tests, its low 32 bits.)
fn addr(s: []const u8) u32 {
    return @truncate(@intFromPtr(p(s)));
}

/// Lists a write of the current message, pointing at bytes that stay unchanged until the
/// broker has read them (keep), and gives the message's record its list as it now is, so
/// that the hook has nothing left to do when it returns: the message's writes are the last
/// ones of the write lists, as many as its record's count. The first write of a message finds
/// the count the broker wrote, 0; outside a batch, it empties the last call's list first.
/// Out of memory traps: past the memory limit the call has failed anyway. Never inline: it
/// is long (two copies and the list), and a hook that writes on some paths would carry it on
/// all of them.
noinline fn write(op: Op, a: []const u8, b: []const u8) void {
    const r = current.get();
    const count = r.get(In.writes_count) + 1;
    if (count == 1 and inbox.batching.get() == 0) clearWrites();
    const ka = keep(a);
    const kb = keep(b);
    const n = inbox.writes_len.get();
    if (n == inbox.writes_cap.get()) growWrites();
    const list = inbox.writes_at.get();
    const w: *Write = @ptrFromInt(list + @sizeOf(Write) * n);
    w.* = .{ .op = @intFromEnum(op), .a_ptr = addr(ka), .a_len = @intCast(a.len), .b_ptr = addr(kb), .b_len = @intCast(b.len) };
    inbox.writes_len.set(n + 1);
    r.put(In.writes_count, count);
    r.put(In.writes_ptr, @truncate(list + @sizeOf(Write) * (n + 1 - count)));
}

/// The write lists, n Writes; only while there is room for them (writes_cap != 0).
fn writeList(n: usize) []Write {
    return @as([*]Write, @ptrFromInt(inbox.writes_at.get()))[0..n];
}

/// Makes room in the write lists for one more write (half as much again, and 8). A function
/// of its own, as freeWrites and moreRoom, the other rare paths: Zig passes an Allocator
/// through memory, which would give write and clearWrites a stack frame, set up on every
/// call.
noinline fn growWrites() void {
    const cap = inbox.writes_cap.get();
    const old: []Write = if (cap == 0) &.{} else writeList(cap);
    const grown = backing.realloc(old, cap + cap / 2 + 8) catch |e| fail(e);
    inbox.writes_at.set(@intFromPtr(grown.ptr));
    inbox.writes_cap.set(grown.len);
}

/// s, or a copy of it, that stays unchanged until the broker has read the write list, when
/// the call returns (the copies are emptied with the list, by the next call's first write). The plugin's bytes may be on its stack, or in the
/// arena, which a batch resets after each message: they are copied into the room, a bump
/// of a pointer and a few loads and stores for a header's name or value. Bytes of the inbox
/// (a value the plugin read) are not copied past 16 bytes: nothing changes them during the
/// call, and a payload may be long.
inline fn keep(s: []const u8) []const u8 {
    if (s.len > 16 and within(s, inbox.buf.?)) return s;
    if (s.len > inbox.room_len.get()) moreRoom(s.len);
    const c: [*]u8 = @ptrFromInt(inbox.room_at.get());
    inbox.room_at.set(@intFromPtr(c + s.len));
    inbox.room_len.set(inbox.room_len.get() - s.len);
    copyBytes(c, s.ptr, s.len);
    return c[0..s.len];
}

/// Whether s lies inside b.
inline fn within(s: []const u8, b: []const u8) bool {
    const at = @intFromPtr(s.ptr);
    const start = @intFromPtr(b.ptr);
    return at >= start and at - start <= b.len and s.len <= b.len - (at - start);
}

/// keep's room when it has less than n bytes left: a new chunk (of kept_bytes, or n if more)
/// from the arena inbox.more. The bytes already kept stay where they are.
noinline fn moreRoom(n: usize) void {
    const chunk = inbox.more.allocator().alloc(u8, @max(n, kept_bytes)) catch |e| fail(e);
    inbox.room_at.set(@intFromPtr(chunk.ptr));
    inbox.room_len.set(chunk.len);
}

/// Copies n bytes from s to d (which do not overlap), as @memcpy. Inline, and without a loop
/// up to 16 bytes, as sameBytes: a header's name or value is a load or two and a store or two.
inline fn copyBytes(d: [*]u8, s: [*]const u8, n: usize) void {
    if (n > 16) return @memcpy(d[0..n], s[0..n]);
    if (n >= 8) return copyEnds(u64, d, s, n);
    if (n >= 4) return copyEnds(u32, d, s, n);
    if (n >= 2) return copyEnds(u16, d, s, n);
    if (n == 1) d[0] = s[0];
}

/// Copies the first and the last @sizeOf(T) of n bytes, which overlap if n is less than twice
/// that: all of them, for n from @sizeOf(T) to twice that.
inline fn copyEnds(comptime T: type, d: [*]u8, s: [*]const u8, n: usize) void {
    const head = load(T, s, 0);
    const tail = load(T, s, n - @sizeOf(T));
    store(T, d, 0, head);
    store(T, d, n - @sizeOf(T), tail);
}

/// Empties the write lists and what they point to (the last call's, which the broker has
/// read).
fn clearWrites() void {
    inbox.room_at.set(@intFromPtr(&inbox.kept));
    inbox.room_len.set(kept_bytes);
    reset(&inbox.more);
    if (inbox.writes_cap.get() * @sizeOf(Write) > arena_retain_bytes) freeWrites();
    inbox.writes_len.set(0);
}

/// Gives back the write list's memory past arena_retain_bytes (see growWrites).
noinline fn freeWrites() void {
    backing.free(writeList(inbox.writes_cap.get()));
    inbox.writes_at.set(0);
    inbox.writes_cap.set(0);
}


/// tb_v1_on_publish_batch's body: runs one (the plugin's on_publish, returning its raw
/// verdict) on each message of the batch in the inbox, as tb_on_publish would run it on that
/// message alone: the readers read its record, host calls act on it (current), its writes are
/// its record's write list, and its verdict goes into its entry. Every write list, and the
/// bytes they point to, stay until the next call. Returns 0, or 1 at the first message whose
/// record this SDK cannot read (or for a table that does not fit): the broker then disregards
/// what the call did and calls tb_on_publish on each message.
fn publishBatch(comptime one: fn () i64) i32 {
    const whole = inbox.buf orelse return 1;
    const all = Record{ .b = whole };
    if (whole.len < Batch.entries) return 1;
    const n: usize = all.get(Batch.count);
    if (!tableFits(whole.len, n)) return 1;
    const table = Batch.entries + Batch.entry * n;
    if (inbox.writes_len.get() != 0) clearWrites();
    const list = inbox.writes_at.get();
    inbox.batching.set(1);
    defer {
        current.set(all);
        inbox.batching.set(0);
    }
    for (0..n) |i| {
        const e = Batch.entries + Batch.entry * i;
        // The entry's fields at offsets from its address (see Record.header), its verdict
        // loaded first (0; see here): the JIT then checks the bounds of the entry once, for
        // the record's offset and length (one load) and the verdict's store as well.
        const entry: *align(1) [2]u64 = @ptrFromInt(hidden(@intFromPtr(whole.ptr + e)));
        _ = here64(entry[1]);
        const both = std.mem.littleToNative(u64, entry[0]);
        const at: usize = @as(u32, @truncate(both));
        const len: usize = @as(u32, @truncate(both >> 32));
        if (!recordFits(whole.len, table, at, len)) return 1;
        // current first: the store through a pointer would make the hook load rec again.
        all.put(Batch.current, @intCast(i));
        current.set(.{ .b = whole[at..][0..len] });
        entry[1] = std.mem.nativeToLittle(u64, @as(u64, @bitCast(one())));
    }
    if (inbox.writes_at.get() != list) giveLists(whole, n);
    return 0;
}

/// Gives each record of a batch of n messages, in the inbox whole, the address of its write
/// list as the list is now: write gave each one as it went, but the batch's list has moved
/// since, as it grew (it does not otherwise, its memory being kept between calls). The
/// messages' lists follow one another in the order of the messages, each as long as its
/// record's count.
fn giveLists(whole: []align(8) u8, n: usize) void {
    const all = Record{ .b = whole };
    var at: usize = 0;
    for (0..n) |i| {
        const e = Batch.entries + Batch.entry * i;
        const r = Record{ .b = whole[all.get(e)..][0..all.get(e + 4)] };
        const count = r.get(In.writes_count);
        if (count == 0) continue;
        r.put(In.writes_ptr, @truncate(inbox.writes_at.get() + @sizeOf(Write) * at));
        at += count;
    }
}

// ---- statuses ----

/// Why the broker refused a write or an emit: the ABI's statuses -1 to -4.
pub const Error = error{
    /// ERR_INVALID: a topic that is not a valid topic, an empty header name, a header name or
    /// value that is not UTF-8.
    Invalid,
    /// ERR_TOO_LARGE: over max_message_bytes or max_header_bytes.
    TooLarge,
    /// ERR_NOT_ALLOWED: not in this hook.
    NotAllowed,
    /// ERR_LIMIT: max_emits for this call used up.
    Limit,
    /// A status this version of the SDK does not know.
    UnknownStatus,
};

fn check(status: i32) Error!i32 {
    return switch (status) {
        -1 => error.Invalid,
        -2 => error.TooLarge,
        -3 => error.NotAllowed,
        -4 => error.Limit,
        else => if (status < 0) error.UnknownStatus else status,
    };
}

// ---- the message ----

/// The message of the hook, as it entered the call. The readers a filter uses are inline: with
/// the inbox, each is the few loads it needs, where it is called.
pub const msg = struct {
    /// The topic.
    pub inline fn topic() ![]const u8 {
        if (active()) return current.get().field(In.topic) orelse "";
        return (try read(host.v1_msg_topic, .{})) orelse "";
    }

    /// Whether the topic is exactly t; allocates nothing.
    pub inline fn topicIs(t: []const u8) bool {
        if (active()) return same(current.get().field(In.topic) orelse return false, t);
        return hostTopicIs(t);
    }

    /// The payload.
    pub inline fn payload() ![]const u8 {
        if (active()) return current.get().field(In.payload) orelse "";
        return (try read(host.v1_msg_payload, .{})) orelse "";
    }

    /// One header's value, or null if it is not set.
    pub inline fn header(name: []const u8) !?[]const u8 {
        if (active()) return current.get().header(name);
        return read(host.v1_msg_header, .{ p(name), name.len });
    }

    /// Whether header name is set to exactly value; allocates nothing for values up to
    /// scratch_bytes.
    pub inline fn headerIs(name: []const u8, value: []const u8) bool {
        if (active()) return current.get().headerIs(name, value);
        return hostHeaderIs(name, value);
    }

    /// How many headers the message has.
    pub inline fn headerCount() usize {
        if (active()) return current.get().headerCount();
        return @intCast(@max(host.v1_msg_header_count(), 0));
    }

    /// The name of header index (0-based, sorted by name), or null past the end.
    pub inline fn headerName(index: usize) !?[]const u8 {
        if (active()) return current.get().headerName(index);
        return read(host.v1_msg_header_name, .{@as(i32, @intCast(index))});
    }

    /// The message's system_id in on_ack and on_redeliver; null in on_publish.
    pub fn id() !?[]const u8 {
        const got = if (active()) current.get().field(In.id) else try read(host.v1_msg_id, .{});
        const v = got orelse return null;
        return if (v.len == 0) null else v;
    }

    /// Routes the message to t instead (on_publish).
    pub fn setTopic(t: []const u8) Error!void {
        _ = try check(host.v1_msg_set_topic(p(t), t.len));
    }

    /// Replaces the payload (on_publish).
    pub inline fn setPayload(b: []const u8) Error!void {
        if (active()) {
            // The write list has no statuses: check what the host would refuse. The limit is
            // loaded first, where it is (see here), the hook's field being below it: the JIT
            // then checks the bounds once.
            const r = current.get();
            const max = here(r.get(In.max_message));
            if (r.hook() != hook_publish) return error.NotAllowed;
            if (b.len > max) return error.TooLarge;
            return write(.set_payload, b, "");
        }
        return hostSetPayload(b);
    }

    /// Adds or replaces a header (on_publish, on_redeliver). Like every writer, it takes the
    /// bytes when called (a copy, or on host calls the broker's): the slices given may be
    /// reused or freed at once.
    pub inline fn setHeader(name: []const u8, value: []const u8) Error!void {
        if (active()) {
            const r = current.get();
            const max = here(r.get(In.max_header)); // first: see setPayload
            if (!r.mayChangeHeaders()) return error.NotAllowed;
            if (name.len == 0) return error.Invalid;
            if (name.len + value.len > max) return error.TooLarge;
            return write(.set_header, name, value);
        }
        return hostSetHeader(name, value);
    }

    /// Removes a header; fine if it was not set (on_publish, on_redeliver).
    pub inline fn delHeader(name: []const u8) Error!void {
        if (active()) {
            if (!current.get().mayChangeHeaders()) return error.NotAllowed;
            return write(.del_header, name, "");
        }
        return hostDelHeader(name);
    }
};

// ---- the event of on_ack and on_redeliver ----

/// The delivery that on_ack and on_redeliver are about.
pub const event = struct {
    /// The consumer group's subscription_id.
    pub fn subscription() ![]const u8 {
        if (active()) return current.get().field(In.sub) orelse "";
        return (try read(host.v1_event_subscription, .{})) orelse "";
    }
    /// The consumer group's name.
    pub fn group() ![]const u8 {
        if (active()) return current.get().field(In.group) orelse "";
        return (try read(host.v1_event_group, .{})) orelse "";
    }
    /// The delivery attempt that was acked, or that failed (1 = first).
    pub fn attempt() u32 {
        if (active()) return current.get().get(In.attempt);
        return @intCast(@max(host.v1_event_attempt(), 0));
    }
    /// Nanoseconds from the acked delivery to its ack (on_ack).
    pub fn inFlightNs() i64 {
        if (active()) return @bitCast(@as(u64, current.get().get(In.in_flight)) | @as(u64, current.get().get(In.in_flight + 4)) << 32);
        return host.v1_event_in_flight_ns();
    }
    /// Why the message is redelivered (on_redeliver).
    pub fn reason() ![]const u8 {
        if (active()) return current.get().field(In.reason) orelse "";
        return (try read(host.v1_event_reason, .{})) orelse "";
    }
};

// ---- configuration ----

/// The plugin's config block.
pub const config = struct {
    /// One value by key, or null if it is not set. An instance's configuration never
    /// changes: the first cache_keys keys asked for are read once and kept for the instance's
    /// life (the slice returned for them outlives the hook). Inline: a key kept is found
    /// where get is called, its name compared as constants if it is a literal.
    pub inline fn get(key: []const u8) !?[]const u8 {
        for (cache[0..cached]) |c| {
            if (same(c.key, key)) return c.value;
        }
        try fetch(key);
        return fetched;
    }

    /// get's host call: reads key's value into fetched, and keeps it if there is room. It
    /// returns only an error (a scalar) and the value through a variable: a result that Zig
    /// returns through memory would give every hook that calls get a stack frame, set up on
    /// every call, though the value is fetched once.
    noinline fn fetch(key: []const u8) error{OutOfMemory}!void {
        fetched = try read(host.v1_config_get, .{ p(key), key.len });
        if (cached < cache_keys) {
            const k = backing.dupe(u8, key) catch return;
            const kv = if (fetched) |x| (backing.dupe(u8, x) catch {
                backing.free(k);
                return;
            }) else null;
            cache[cached] = .{ .key = k, .value = kv };
            cached += 1;
            fetched = kv;
        }
    }
    var fetched: ?[]const u8 = null;

    /// How many keys get() keeps.
    pub const cache_keys = 16;
    var cache: [cache_keys]struct { key: []const u8, value: ?[]const u8 } = undefined;
    var cached: usize = 0;

    /// The whole configuration as the ABI gives it: "key=value\n" lines sorted by key, with
    /// backslash, newline and carriage return escaped. iterate() decodes it.
    pub fn text() ![]const u8 {
        return (try read(host.v1_config, .{})) orelse "";
    }

    /// One decoded entry of the configuration.
    pub const Entry = struct { key: []const u8, value: []const u8 };

    /// Decodes text() entry by entry: `var it = config.iterate(try config.text());
    /// while (try it.next()) |e| ...`.
    pub fn iterate(t: []const u8) Iterator {
        return .{ .lines = std.mem.splitScalar(u8, t, '\n') };
    }

    /// See iterate.
    pub const Iterator = struct {
        lines: std.mem.SplitIterator(u8, .scalar),

        pub fn next(it: *Iterator) !?Entry {
            while (it.lines.next()) |line| {
                if (line.len == 0) continue;
                const eq = std.mem.indexOfScalar(u8, line, '=') orelse line.len;
                const value = if (eq < line.len) line[eq + 1 ..] else "";
                return .{ .key = try unescape(line[0..eq]), .value = try unescape(value) };
            }
            return null;
        }
    };

    fn unescape(s: []const u8) ![]const u8 {
        if (std.mem.indexOfScalar(u8, s, '\\') == null) return s;
        var out = try allocator().alloc(u8, s.len);
        var i: usize = 0;
        var n: usize = 0;
        while (i < s.len) : (i += 1) {
            var c = s[i];
            if (c == '\\' and i + 1 < s.len) {
                i += 1;
                c = switch (s[i]) {
                    'n' => '\n',
                    'r' => '\r',
                    else => s[i],
                };
            }
            out[n] = c;
            n += 1;
        }
        return out[0..n];
    }
};

// ---- logging, time, reasons ----

/// The broker's log levels.
pub const Level = enum(i32) { trace = 0, debug = 1, info = 2, warn = 3, err = 4 };

/// Logs a line through the broker's logger, tagged with the plugin's name.
pub fn logLine(level: Level, line: []const u8) void {
    // Natively (this file's tests) there is no broker: stderr.
    if (comptime !@import("builtin").target.isWasm()) return std.debug.print("{s}: {s}\n", .{ @tagName(level), line });
    host.v1_log(@intFromEnum(level), p(line), line.len);
}

/// Formatted logging: tb.log.warn("tenant {s}", .{t}). A line that cannot be formatted
/// (out of memory) is logged as its format string.
pub const log = struct {
    pub inline fn trace(comptime fmt: []const u8, args: anytype) void {
        print(.trace, fmt, args);
    }
    pub inline fn debug(comptime fmt: []const u8, args: anytype) void {
        print(.debug, fmt, args);
    }
    pub inline fn info(comptime fmt: []const u8, args: anytype) void {
        print(.info, fmt, args);
    }
    pub inline fn warn(comptime fmt: []const u8, args: anytype) void {
        print(.warn, fmt, args);
    }
    pub inline fn err(comptime fmt: []const u8, args: anytype) void {
        print(.err, fmt, args);
    }

    /// Formats and logs the line in a function of its own, given the arguments one by one
    /// (up to three, of a tuple of runtime values): Zig passes a tuple through memory, which
    /// would give the caller a stack frame, set up on every call, even where it logs only on
    /// an error path (a hook catching a writer's error).
    inline fn print(level: Level, comptime fmt: []const u8, args: anytype) void {
        const A = @TypeOf(args);
        const L = Line(fmt, A);
        if (comptime !L.by_one) return @call(.never_inline, L.tuple, .{ level, args });
        switch (comptime std.meta.fields(A).len) {
            0 => @call(.never_inline, L.tuple, .{ level, args }),
            1 => @call(.never_inline, L.one, .{ level, args[0] }),
            2 => @call(.never_inline, L.two, .{ level, args[0], args[1] }),
            3 => @call(.never_inline, L.three, .{ level, args[0], args[1], args[2] }),
            else => unreachable,
        }
    }

    fn Line(comptime fmt: []const u8, comptime A: type) type {
        const type_info = @typeInfo(A);
        const fs = std.meta.fields(A);
        return struct {
            /// Whether args can be given one by one: a tuple of up to three runtime values.
            const by_one = type_info == .Struct and type_info.Struct.is_tuple and fs.len <= 3 and for (fs) |f| {
                if (f.is_comptime) break false;
            } else true;

            fn tuple(level: Level, args: A) void {
                const line = std.fmt.allocPrint(allocator(), fmt, args) catch fmt;
                logLine(level, line);
            }
            fn one(level: Level, a: fs[0].type) void {
                tuple(level, .{a});
            }
            fn two(level: Level, a: fs[0].type, b: fs[1].type) void {
                tuple(level, .{ a, b });
            }
            fn three(level: Level, a: fs[0].type, b: fs[1].type, c: fs[2].type) void {
                tuple(level, .{ a, b, c });
            }
        };
    }
};

/// Wall-clock time, nanoseconds since the Unix epoch.
pub fn nowNs() i64 {
    return host.v1_now();
}

/// Sets the reason for this call's verdict; the last call wins.
pub fn setReason(reason: []const u8) void {
    if (active()) return write(.set_reason, reason, "");
    host.v1_set_reason(p(reason), reason.len);
}

// ---- emitting ----

/// A message emitted by emit(), whose headers can still be set.
pub const Emitted = struct {
    handle: i32,

    /// Sets a header of the emitted message. If refused, the message still goes out
    /// without it.
    pub fn header(e: Emitted, name: []const u8, value: []const u8) Error!void {
        _ = try check(host.v1_emit_header(e.handle, p(name), name.len, p(value), value.len));
    }
};

/// Emits a message, published when the hook returns successfully (whatever its verdict),
/// after the message itself.
pub fn emit(topic: []const u8, payload: []const u8) Error!Emitted {
    return .{ .handle = try check(host.v1_emit(p(topic), topic.len, p(payload), payload.len)) };
}

/// A header of emitWith: .{ "name", "value" }.
pub const Header = struct { []const u8, []const u8 };

/// Emits a message with headers; empty header names are refused (error.Invalid) before
/// anything is emitted.
pub fn emitWith(topic: []const u8, payload: []const u8, headers: []const Header) Error!void {
    for (headers) |h| if (h[0].len == 0) return error.Invalid;
    const e = try emit(topic, payload);
    for (headers) |h| try e.header(h[0], h[1]);
}

// ---- verdicts ----

fn verdict(action: u32, arg: u32) i64 {
    return @bitCast(@as(u64, action) | (@as(u64, arg) << 32));
}

/// gRPC status codes for Publish.reject.
pub const code = struct {
    pub const invalid_argument: u32 = 3;
    pub const not_found: u32 = 5;
    pub const permission_denied: u32 = 7;
    pub const resource_exhausted: u32 = 8;
    pub const failed_precondition: u32 = 9;
    pub const unavailable: u32 = 14;
    pub const unauthenticated: u32 = 16;
};

/// The verdict of on_publish.
pub const Publish = struct {
    raw: i64,

    /// Continue with the message as changed by this call.
    pub const pass = Publish{ .raw = verdict(0, 0) };

    /// Drop the message, saying why.
    pub inline fn drop(reason: []const u8) Publish {
        setReason(reason);
        return .{ .raw = verdict(1, 0) };
    }

    /// Refuse the publish with gRPC status c (see code) and a reason.
    pub inline fn reject(c: u32, reason: []const u8) Publish {
        setReason(reason);
        return .{ .raw = verdict(2, c) };
    }
};

/// The verdict of on_redeliver.
pub const Redeliver = struct {
    raw: i64,

    /// The broker's default: redeliver, or dead-letter past max_deliveries.
    pub const redeliver = Redeliver{ .raw = verdict(0, 0) };
    /// Forget the message.
    pub const drop = Redeliver{ .raw = verdict(3, 0) };

    /// Redeliver after ms milliseconds (clamped to 1 .. 2^31-1).
    pub fn delay(ms: u32) Redeliver {
        return .{ .raw = verdict(1, std.math.clamp(ms, 1, std.math.maxInt(i32))) };
    }

    /// Dead-letter now, saying why.
    pub inline fn deadLetter(reason: []const u8) Redeliver {
        setReason(reason);
        return .{ .raw = verdict(2, 0) };
    }
};

// ---- hooks ----

fn unwrap(r: anytype) switch (@typeInfo(@TypeOf(r))) {
    .ErrorUnion => |eu| eu.payload,
    else => @TypeOf(r),
} {
    return switch (@typeInfo(@TypeOf(r))) {
        .ErrorUnion => r catch |e| fail(e),
        else => r,
    };
}

fn fail(e: anyerror) noreturn {
    var buf: [128]u8 = undefined;
    const line = std.fmt.bufPrint(&buf, "plugin failed: error.{s}", .{@errorName(e)}) catch "plugin failed";
    logLine(.err, line);
    @trap();
}

/// A hook's last step, and a batch's after each message: empties the arena if it was used.
inline fn done() void {
    if (arena_used.get() != 0) emptyArena();
}

fn emptyArena() void {
    arena_used.set(0);
    _ = arena_state.reset(.{ .retain_with_limit = arena_retain_bytes });
}

/// Empties an arena, keeping up to arena_retain_bytes; nothing to do if nothing was allocated
/// since it was last emptied.
inline fn reset(a: *std.heap.ArenaAllocator) void {
    if (a.state.end_index != 0) _ = a.reset(.{ .retain_with_limit = arena_retain_bytes });
}

/// Exports f, a `fn () Publish` or `fn () !Publish`, as tb_on_publish. Call it in a
/// comptime block of the plugin's root file. The hooks' exports inline f (so f is not
/// recursive and not noinline; it may call functions that are).
pub fn onPublish(comptime f: anytype) void {
    exportHook(Publish, f, "tb_on_publish");
    if (options.inbox) {
        const S = struct {
            fn one() i64 {
                return run(Publish, f);
            }
            fn batch() callconv(.C) i32 {
                return publishBatch(one);
            }
        };
        @export(S.batch, .{ .name = "tb_v1_on_publish_batch" });
    }
}

/// Exports f, a `fn () void` or `fn () !void`, as tb_on_ack.
pub fn onAck(comptime f: anytype) void {
    exportHook(void, f, "tb_on_ack");
}

/// Exports f, a `fn () Redeliver` or `fn () !Redeliver`, as tb_on_redeliver.
pub fn onRedeliver(comptime f: anytype) void {
    exportHook(Redeliver, f, "tb_on_redeliver");
}

/// Exports f, whose result is a V (or an error union of one), as the hook name: it returns
/// the verdict's raw value, or 0 when V is void.
fn exportHook(comptime V: type, comptime f: anytype, comptime name: []const u8) void {
    const S = struct {
        fn hook() callconv(.C) i64 {
            return @call(.always_inline, run, .{ V, f });
        }
    };
    @export(S.hook, .{ .name = name });
}

/// Runs the hook f and returns its verdict, a V, as the ABI's raw value; then resets the arena.
/// f is inlined, as run is into the export: a filter is then one function, whose readers'
/// loads and comparisons with literals are compiled where it calls them, with no call to make
/// and no verdict to return through memory (which Zig would do for a Publish, and ReleaseSmall
/// would not inline on its own). So f cannot be recursive, nor marked noinline.
fn run(comptime V: type, comptime f: anytype) i64 {
    defer done();
    const v: V = unwrap(@call(.always_inline, f, .{}));
    return if (V == void) 0 else v.raw;
}

/// Exports f as tb_init, run once per instance before any hook. f returns null (or void)
/// to accept the configuration, or the reason to refuse it: `fn () !?[]const u8`.
pub fn onInit(comptime f: anytype) void {
    const S = struct {
        fn hook() callconv(.C) i32 {
            defer done();
            const r = unwrap(f());
            if (@TypeOf(r) == void) return 0;
            if (r) |reason| {
                setReason(reason);
                return 1;
            }
            return 0;
        }
    };
    @export(S.hook, .{ .name = "tb_init" });
}

/// A panic handler that logs the panic's message at error level, then traps: in the
/// plugin's root file, `pub const panic = tb.panic;`.
pub fn panic(message: []const u8, _: ?*std.builtin.StackTrace, _: ?usize) noreturn {
    var buf: [256]u8 = undefined;
    const line = std.fmt.bufPrint(&buf, "plugin panicked: {s}", .{message}) catch "plugin panicked";
    logLine(.err, line);
    @trap();
}

test "verdicts pack action and argument" {
    try std.testing.expectEqual(@as(i64, 0), Publish.pass.raw);
    try std.testing.expectEqual(@as(i64, 2 | 7 << 32), verdict(2, 7));
    try std.testing.expectEqual(@as(i64, 1 | 1 << 32), Redeliver.delay(0).raw);
    try std.testing.expectEqual(@as(i64, 1 | 0x7fffffff << 32), Redeliver.delay(std.math.maxInt(u32)).raw);
    try std.testing.expectEqual(@as(i64, 3), Redeliver.drop.raw);
}

test "statuses map to errors" {
    try std.testing.expectEqual(@as(i32, 2), try check(2));
    try std.testing.expectError(error.Invalid, check(-1));
    try std.testing.expectError(error.Limit, check(-4));
    try std.testing.expectError(error.UnknownStatus, check(-9));
}

test "config text is unescaped" {
    var it = config.iterate("a=1\nb=x\\ny\\\\z\\r\nempty=\n");
    const want = [_]config.Entry{ .{ .key = "a", .value = "1" }, .{ .key = "b", .value = "x\ny\\z\r" }, .{ .key = "empty", .value = "" } };
    for (want) |w| {
        const e = (try it.next()).?;
        try std.testing.expectEqualStrings(w.key, e.key);
        try std.testing.expectEqualStrings(w.value, e.value);
    }
    try std.testing.expect((try it.next()) == null);
}

/// A test record: the fixed fields, then the headers (sorted by the caller) and values.
fn testRecord(buf: []align(8) u8, hook: u32, topic: []const u8, headers: []const Header) Record {
    @memset(buf, 0);
    const r = Record{ .b = buf };
    r.put(In.hook, hook);
    r.put(In.id + 4, In.absent);
    r.put(In.header_count, @intCast(headers.len));
    var pos: u32 = @intCast(In.headers + In.entry * headers.len);
    const put = struct {
        fn value(rec: Record, at: usize, p_: *u32, v: []const u8) void {
            rec.put(at, p_.*);
            rec.put(at + 4, @intCast(v.len));
            @memcpy(rec.b[p_.*..][0..v.len], v);
            p_.* += @intCast(v.len);
        }
    };
    put.value(r, In.topic, &pos, topic);
    for (headers, 0..) |h, i| {
        put.value(r, In.headers + In.entry * i, &pos, h[0]);
        put.value(r, In.headers + In.entry * i + 8, &pos, h[1]);
    }
    return r;
}

test "a record's fields and headers" {
    var buf: [512]u8 align(8) = undefined;
    const r = testRecord(&buf, hook_publish, "orders.1", &.{ .{ "a", "1" }, .{ "b-long", "" }, .{ "c", "three" }, .{ "tenant", "acme" } });
    try std.testing.expectEqualStrings("orders.1", r.field(In.topic).?);
    try std.testing.expect(r.field(In.id) == null);
    try std.testing.expectEqualStrings("", r.field(In.payload).?);
    try std.testing.expectEqual(@as(usize, 4), r.headerCount());
    try std.testing.expectEqualStrings("c", r.headerName(2).?);
    try std.testing.expect(r.headerName(4) == null);
    for ([_]Header{ .{ "a", "1" }, .{ "b-long", "" }, .{ "c", "three" }, .{ "tenant", "acme" } }) |h| {
        try std.testing.expectEqualStrings(h[1], r.header(h[0]).?);
        try std.testing.expect(r.headerIs(h[0], h[1]));
        try std.testing.expect(!r.headerIs(h[0], "acmf"));
        try std.testing.expect(!r.headerIs(h[0], "thre"));
    }
    for ([_][]const u8{ "", "0", "b", "b-longer", "d", "tenant2", "z" }) |absent_name| {
        try std.testing.expect(r.header(absent_name) == null);
        try std.testing.expect(!r.headerIs(absent_name, ""));
    }
    try std.testing.expect(r.mayChangeHeaders());
    // A value that points outside the record is absent.
    r.put(In.topic + 4, 600);
    try std.testing.expect(r.field(In.topic) == null);
    // A value that ends past a shorter record is absent from it, whatever bytes follow.
    @memcpy(buf[298..302], "acme");
    r.put(In.headers + In.entry * 3 + 8, 298);
    try std.testing.expect(r.headerIs("tenant", "acme"));
    const short = Record{ .b = buf[0..300] };
    try std.testing.expect(short.header("tenant") == null);
    try std.testing.expect(!short.headerIs("tenant", "acme"));
}

test "same compares like std.mem.eql" {
    const words = [_][]const u8{ "", "a", "ab", "abc", "abcd", "abcde", "abcdefgh", "abcdefgi", "bbcdefgh", "abcdefghi", "tenant", "tenanT" };
    for (words) |a| for (words) |b| try std.testing.expectEqual(std.mem.eql(u8, a, b), same(a, b));
    // Every length up to 40 (each way of loading it), with one byte changed at each place.
    var a: [40]u8 = undefined;
    var b: [40]u8 = undefined;
    for (&a, 0..) |*c, i| c.* = @intCast('a' + i % 26);
    for (0..a.len + 1) |n| {
        b = a;
        try std.testing.expect(same(a[0..n], b[0..n]));
        for (0..n) |i| {
            b[i] ^= 0x20;
            try std.testing.expect(!same(a[0..n], b[0..n]));
            b[i] = a[i];
        }
        if (n > 0) try std.testing.expect(!same(a[0..n], b[0 .. n - 1]));
    }
}

test "a header among many is found by a binary search" {
    var buf: [2048]u8 align(8) = undefined;
    var hs: [40]Header = undefined;
    var names: [40][3]u8 = undefined;
    for (&hs, &names, 0..) |*h, *n, i| {
        n.* = .{ 'h', '0' + @as(u8, @intCast(i / 10)), '0' + @as(u8, @intCast(i % 10)) };
        h.* = .{ n, n[1..] };
    }
    const r = testRecord(&buf, hook_publish, "t", &hs);
    for (hs) |h| {
        try std.testing.expectEqualStrings(h[1], r.header(h[0]).?);
        try std.testing.expect(r.headerIs(h[0], h[1]));
        try std.testing.expect(!r.headerIs(h[0], "0"));
    }
    for ([_][]const u8{ "", "h", "h0", "h000", "h40", "h99", "i" }) |absent_name| {
        try std.testing.expect(r.header(absent_name) == null);
        try std.testing.expect(!r.headerIs(absent_name, ""));
    }
    // A value that ends past the record is absent, to headerIs as to header.
    r.put(In.headers + In.entry * 7 + 8, 2047);
    try std.testing.expect(r.header("h07") == null);
    try std.testing.expect(!r.headerIs("h07", "07"));
}

test "a batch is read only if laid out as the ABI says" {
    try std.testing.expect(tableFits(16, 0));
    try std.testing.expect(tableFits(16 + 2 * 16, 2));
    try std.testing.expect(!tableFits(16 + 2 * 16 - 1, 2));
    try std.testing.expect(!tableFits(1024, 1 << 30));
    // A batch of two entries (its table ends at 48) in 1024 bytes.
    try std.testing.expect(recordFits(1024, 48, 48, 256));
    try std.testing.expect(recordFits(1024, 48, 512, 512)); // up to the end
    try std.testing.expect(!recordFits(1024, 48, 512, 513)); // past it
    try std.testing.expect(!recordFits(1024, 48, 40, 256)); // over the table
    try std.testing.expect(!recordFits(1024, 48, 48, In.headers - 1)); // too short for the fixed fields
    try std.testing.expect(!recordFits(1024, 48, 2048, 0)); // outside the inbox
    try std.testing.expect(!recordFits(1024, 48, 48, 0xFFFFFFFF)); // at + len would wrap
}

test "each message's write list is given to its record as it is written" {
    var box: [1024]u8 align(8) = undefined;
    const whole = testRecord(&box, hook_publish, "t", &.{});
    inbox.buf = &box;
    current.set(whole);
    defer {
        clearWrites();
        inbox.buf = null;
        current.set(.{ .b = &.{} });
    }
    // Addresses are 64-bit natively, and the record keeps their low 32 bits: the list and
    // the bytes are found by those among the lists and in inbox.kept.
    const list = struct {
        fn of(r: Record) []const Write {
            const items = writeList(inbox.writes_len.get());
            for (0..items.len + 1) |i| {
                if (addr(std.mem.sliceAsBytes(items[i..])) == r.get(In.writes_ptr)) return items[i..][0..r.get(In.writes_count)];
            }
            return &.{};
        }
        fn name(w: Write) []const u8 {
            return inbox.kept[w.a_ptr -% addr(&inbox.kept)..][0..w.a_len];
        }
    };
    // A call: two writes, both in its record's list.
    write(.set_header, "a", "1");
    write(.del_header, "b", "");
    try std.testing.expectEqual(@as(usize, 2), list.of(whole).len);
    try std.testing.expectEqual(@as(u32, @intFromEnum(Op.del_header)), list.of(whole)[1].op);
    try std.testing.expectEqualStrings("b", list.name(list.of(whole)[1]));
    // The next call (the broker wrote the record again, its list empty): its first write
    // starts a new list.
    whole.put(In.writes_ptr, 0);
    whole.put(In.writes_count, 0);
    write(.set_reason, "why", "");
    try std.testing.expectEqual(@as(usize, 1), inbox.writes_len.get());
    try std.testing.expectEqualStrings("why", list.name(list.of(whole)[0]));
    // A batch of three records: the first and the last write, as publishBatch runs them;
    // each record has its own part. giveLists gives the addresses again, for a list that has
    // moved as it grew (which the page allocator here does not do: they are spoiled first).
    clearWrites();
    freeWrites();
    const recs = [_]Record{
        testRecord(box[128..384], hook_publish, "t", &.{}),
        testRecord(box[384..640], hook_publish, "t", &.{}),
        testRecord(box[640..896], hook_publish, "t", &.{}),
    };
    whole.put(Batch.count, recs.len);
    for (recs, 0..) |r, i| {
        whole.put(Batch.entries + Batch.entry * i, @intCast(@intFromPtr(r.b.ptr) - @intFromPtr(&box)));
        whole.put(Batch.entries + Batch.entry * i + 4, @intCast(r.b.len));
    }
    inbox.batching.set(1);
    defer inbox.batching.set(0);
    const names = [_][]const u8{ "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11" };
    current.set(recs[0]);
    write(.set_header, "first", "1");
    current.set(recs[1]);
    current.set(recs[2]);
    for (names) |n| write(.set_header, n, "v");
    for (recs) |r| r.put(In.writes_ptr, 8);
    giveLists(&box, recs.len);
    try std.testing.expectEqual(@as(u32, 8), recs[1].get(In.writes_ptr)); // no list, left alone
    try std.testing.expectEqual(@as(usize, 1), list.of(recs[0]).len);
    try std.testing.expectEqual(@as(usize, names.len), list.of(recs[2]).len);
    try std.testing.expectEqualStrings("first", list.name(list.of(recs[0])[0]));
    for (names, list.of(recs[2])) |n, w| try std.testing.expectEqualStrings(n, list.name(w));
}

test "a write's bytes are kept until the next call, whatever the plugin does with its own" {
    var box: [512]u8 align(8) = undefined;
    for (&box, 0..) |*c, i| c.* = @truncate(i);
    inbox.buf = &box;
    defer inbox.buf = null;
    clearWrites();
    defer clearWrites();
    // Every length up to 40 (each way of copying it), from one buffer the plugin reuses.
    var buf: [40]u8 = undefined;
    var got: [41][]const u8 = undefined;
    for (&got, 0..) |*g, n| {
        @memset(&buf, @as(u8, @intCast(n)));
        g.* = keep(buf[0..n]);
    }
    @memset(&buf, 0xff);
    for (got, 0..) |g, n| {
        try std.testing.expectEqual(n, g.len);
        for (g) |c| try std.testing.expectEqual(@as(u8, @intCast(n)), c);
    }
    // Past the static buffer: a value longer than it, then small ones in a new chunk.
    var long: [kept_bytes + 100]u8 = undefined;
    @memset(&long, 'l');
    const kept_long = keep(&long);
    @memset(&buf, 's');
    const kept_short = keep(buf[0..5]);
    @memset(&long, 0);
    @memset(&buf, 0);
    try std.testing.expect(std.mem.allEqual(u8, kept_long, 'l') and kept_long.len == long.len);
    try std.testing.expectEqualStrings("sssss", kept_short);
    for (got, 0..) |g, n| {
        for (g) |c| try std.testing.expectEqual(@as(u8, @intCast(n)), c);
    }
    // The inbox's bytes are not copied past 16 bytes (nothing changes them during the call).
    try std.testing.expect(keep(box[100..200]).ptr == box[100..].ptr);
    try std.testing.expect(keep(box[8..24]).ptr != box[8..].ptr);
    try std.testing.expect(keep(box[480..]).ptr == box[480..].ptr);
    try std.testing.expectEqualSlices(u8, box[8..24], keep(box[8..24]));
    // The next call starts with the static buffer again.
    clearWrites();
    try std.testing.expectEqual(@intFromPtr(&inbox.kept), inbox.room_at.get());
    try std.testing.expectEqual(@as(usize, kept_bytes), inbox.room_len.get());
}

test "log takes any arguments" {
    // Natively the lines go to stderr; what is checked is that every shape compiles and
    // formats: none, one to three runtime values (given one by one), more, comptime ones.
    var n: u32 = 7;
    const s: []const u8 = "x";
    log.debug("log test: none", .{});
    log.debug("log test: {d}", .{n});
    log.debug("log test: {d} {s}", .{ n, s });
    log.debug("log test: {d} {s} {d}", .{ n, s, n });
    log.debug("log test: {d} {s} {d} {s}", .{ n, s, n, s });
    log.debug("log test: {d} {s}", .{ 1, s });
    n += 1;
}

test "within" {
    const b = [_]u8{0} ** 64;
    try std.testing.expect(within(b[0..], &b));
    try std.testing.expect(within(b[10..20], &b));
    try std.testing.expect(within(b[64..], &b));
    const other = [_]u8{0} ** 8;
    try std.testing.expect(!within(&other, &b));
    try std.testing.expect(!within(b[0..], b[1..]));
    try std.testing.expect(!within(b[0..], b[0..63]));
}
