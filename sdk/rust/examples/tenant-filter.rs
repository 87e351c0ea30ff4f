//! Drops every message whose header `tenant` is not the plugin's config value `tenant`.
use tinybroker::{config, msg, Publish};

fn filter() -> Publish {
    match config::get("tenant") {
        Some(want) if msg::header_is("tenant", &want) => Publish::Pass,
        _ => Publish::drop("wrong tenant"),
    }
}

tinybroker::on_publish!(filter);
