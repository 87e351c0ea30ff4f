//! w4-transform-rust is workload W4's transform plugin in Rust (bench/plugins/w4-transform in
//! Go): it adds the header x-w4: 1. Built with the SDK's feature `inbox` (Cargo.toml), the
//! header goes into the message's write list, and `on_publish!` also exports
//! `tb_v1_on_publish_batch`: a publish frame's messages in one call.
use tinybroker::{msg, Publish};

fn transform() -> Publish {
    if let Err(e) = msg::set_header("x-w4", "1") {
        tinybroker::error(&format!("w4-transform-rust: set_header: {}", e));
    }
    Publish::Pass
}

tinybroker::on_publish!(transform);
