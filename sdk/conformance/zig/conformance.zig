//! The conformance plugin (sdk/conformance/SPEC.md) written with the Zig SDK.
const std = @import("std");
const tb = @import("tinybroker");

pub const panic = tb.panic;
/// Built with the inbox and batches: the suite runs it on the inbox, and with tb_v1_inbox
/// hidden on host calls.
pub const tinybroker_options = tb.Options{ .inbox = true };

comptime {
    tb.onInit(init);
    tb.onPublish(onPublish);
    tb.onAck(onAck);
    tb.onRedeliver(onRedeliver);
    tb.onTick(onTick);
}

fn init() !?[]const u8 {
    const why = try tb.config.get("refuse") orelse return null;
    return try std.fmt.allocPrint(tb.allocator(), "refused: {s}", .{why});
}

fn is(a: []const u8, b: []const u8) bool {
    return std.mem.eql(u8, a, b);
}

fn onPublish() !tb.Publish {
    const a = tb.allocator();
    const topic = try tb.msg.topic();
    if (is(topic, "c.drop")) return tb.Publish.drop("dropped by conformance");
    if (is(topic, "c.reject")) {
        const why = try tb.msg.header("why") orelse "";
        return tb.Publish.reject(tb.code.permission_denied, try std.fmt.allocPrint(a, "rejected: {s}", .{why}));
    }
    if (is(topic, "c.retopic")) try tb.msg.setTopic("c.retopic.done");
    if (is(topic, "c.headers")) {
        // Both values from one buffer, reused: the SDK keeps a copy of what it lists (in
        // frames, the buffer is reused for every message too).
        var value: [3]u8 = undefined;
        value[0] = '1';
        try tb.msg.setHeader("added", value[0..1]);
        value = "new".*;
        try tb.msg.setHeader("changed", &value);
        try tb.msg.delHeader("removed");
    }
    if (is(topic, "c.enum")) {
        var out = std.ArrayList(u8).init(a);
        var i: usize = 0;
        while (try tb.msg.headerName(i)) |name| : (i += 1) {
            if (i > 0) try out.append(',');
            try out.writer().print("{s}={s}", .{ name, try tb.msg.header(name) orelse "" });
        }
        try tb.msg.setPayload(out.items);
    }
    if (is(topic, "c.payload")) {
        const payload = try tb.msg.payload();
        try tb.msg.setPayload(try std.mem.concat(a, u8, &.{ payload, payload }));
    }
    if (is(topic, "c.empty")) try tb.msg.setPayload("");
    if (is(topic, "c.key")) {
        try tb.msg.setHeader("key-was", try tb.msg.key());
        const tenant = try tb.msg.header("tenant") orelse "";
        tb.msg.setKey(tenant) catch return tb.Publish.reject(tb.code.invalid_argument, "key refused");
        try (try tb.emit("c.key.emitted", "")).key(try std.mem.concat(a, u8, &.{ "e-", tenant }));
    }
    if (is(topic, "c.kv")) {
        const k = try tb.msg.header("k") orelse "";
        const old = try tb.msg.header("old") orelse "";
        tb.kv.cas(k, old, try tb.msg.payload(), 0) catch return tb.Publish.drop("kv refused");
        try tb.msg.setPayload(try tb.kv.get(k) orelse "");
    }
    if (is(topic, "c.kv.del")) {
        const k = try tb.msg.header("k") orelse "";
        try tb.kv.set(k, try tb.msg.payload(), 0);
        try tb.kv.delete(k);
        if (try tb.kv.get(k) != null) return tb.Publish.drop("kv not deleted");
    }
    if (is(topic, "c.emit")) {
        const to = try tb.config.get("emit_topic") orelse "";
        try tb.emitWith(to, try tb.msg.payload(), &.{.{ "origin", topic }});
        try (try tb.emit("c.emit.second", "2")).header("n", "2");
    }
    if (is(topic, "c.config")) {
        const tenant = try tb.config.get("tenant") orelse "";
        try tb.msg.setPayload(try std.mem.concat(a, u8, &.{ tenant, "|", try tb.config.text() }));
    }
    if (is(topic, "c.log")) tb.log.warn("conformance log: {s}", .{try tb.msg.payload()});
    if (is(topic, "c.tenant")) {
        const want = try tb.config.get("tenant") orelse "";
        if (!tb.msg.headerIs("tenant", want)) return tb.Publish.drop("wrong tenant");
    }
    if (is(topic, "c.metric")) {
        // Defined on every call, which finds the metric defined before, as SPEC.md says; a
        // plugin would define them once, in its init.
        metric() catch return tb.Publish.reject(tb.code.invalid_argument, "metric refused");
    }
    if (is(topic, "c.trap")) @panic("conformance trap");
    return tb.Publish.pass;
}

fn onAck() !void {
    const payload = try std.fmt.allocPrint(tb.allocator(), "{s}|{s}|{d}|{s}", .{
        try tb.event.subscription(), try tb.event.group(), tb.event.attempt(), try tb.msg.id() orelse "",
    });
    const in_flight: []const u8 = if (tb.event.inFlightNs() > 0) "yes" else "no";
    try tb.emitWith("c.acked", payload, &.{.{ "in_flight", in_flight }});
}

fn onTick() !void {
    const topic = try tb.config.get("tick_topic") orelse return;
    _ = try tb.emit(topic, "tick");
}

fn onRedeliver() !tb.Redeliver {
    try tb.msg.setHeader("reason", try tb.event.reason());
    const retry = try tb.msg.header("retry") orelse "";
    if (is(retry, "delay")) {
        try tb.msg.setHeader("delayed", "1");
        return tb.Redeliver.delay(50);
    }
    if (is(retry, "dead")) return tb.Redeliver.deadLetter("conformance dead-letter");
    if (is(retry, "drop")) return tb.Redeliver.drop;
    const attempt = try std.fmt.allocPrint(tb.allocator(), "{d}", .{tb.event.attempt()});
    try tb.msg.setHeader("attempt-seen", attempt);
    return tb.Redeliver.redeliver;
}

fn metric() !void {
    const messages = try tb.metric.define(.counter, "c_metric_total", "Messages on c.metric.", "tenant", "");
    const size = try tb.metric.define(.histogram, "c_metric_bytes", "Payload bytes on c.metric.", "", "10,100");
    try tb.metric.add(messages, 1, try tb.msg.header("tenant") orelse "");
    try tb.metric.observe(size, @intCast((try tb.msg.payload()).len), "");
}
