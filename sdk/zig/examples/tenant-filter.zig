//! Drops every message whose header "tenant" is not the plugin's config value "tenant".
const tb = @import("tinybroker");

pub const panic = tb.panic;
comptime {
    tb.onPublish(filter);
}

fn filter() !tb.Publish {
    const want = try tb.config.get("tenant") orelse return tb.Publish.drop("no tenant configured");
    if (tb.msg.headerIs("tenant", want)) return tb.Publish.pass;
    return tb.Publish.drop("wrong tenant");
}
