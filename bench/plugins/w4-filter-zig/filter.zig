//! w4-filter-zig is workload W4's filter plugin in Zig (bench/plugins/w4-filter in Go): it
//! reads one header and passes the message, dropping it only if the header "tenant" is
//! "blocked". With the SDK's inbox (tinybroker_options below), its fastest mode, tb.onPublish
//! also exports tb_v1_on_publish_batch: a publish frame's messages in one call
//! (docs/plugins/zig.md). bench/plugins/build.sh builds it:
//!   zig build-lib -target wasm32-freestanding -dynamic -rdynamic -O ReleaseSmall \
//!     --mod tinybroker::../../../sdk/zig/tinybroker.zig --deps tinybroker filter.zig
const tb = @import("tinybroker");

pub const panic = tb.panic;
pub const tinybroker_options = tb.Options{ .inbox = true };
comptime {
    tb.onPublish(filter);
}

fn filter() tb.Publish {
    if (tb.msg.headerIs("tenant", "blocked")) return tb.Publish.drop("blocked tenant");
    return tb.Publish.pass;
}
