//! w4-transform-zig is workload W4's transform plugin in Zig (bench/plugins/w4-transform in
//! Go): it adds the header x-w4: 1. With the SDK's inbox (tinybroker_options below), its
//! fastest mode, the header goes into the message's write list, and tb.onPublish also exports
//! tb_v1_on_publish_batch: a publish frame's messages in one call (docs/plugins/zig.md).
//! bench/plugins/build.sh builds it:
//!   zig build-lib -target wasm32-freestanding -dynamic -rdynamic -O ReleaseSmall \
//!     --mod tinybroker::../../../sdk/zig/tinybroker.zig --deps tinybroker transform.zig
const tb = @import("tinybroker");

pub const panic = tb.panic;
pub const tinybroker_options = tb.Options{ .inbox = true };
comptime {
    tb.onPublish(transform);
}

fn transform() tb.Publish {
    tb.msg.setHeader("x-w4", "1") catch |e| tb.log.err("w4-transform-zig: setHeader: {s}", .{@errorName(e)});
    return tb.Publish.pass;
}
