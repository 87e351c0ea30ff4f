//! w4-filter-rust is workload W4's filter plugin in Rust (bench/plugins/w4-filter in Go): it
//! reads one header and passes the message, dropping it only if the header "tenant" is
//! "blocked". Built with the SDK's feature `inbox` (Cargo.toml), `on_publish!` also exports
//! `tb_v1_on_publish_batch`: a publish frame's messages in one call.
use tinybroker::{msg, Publish};

fn filter() -> Publish {
    if msg::header_is("tenant", "blocked") {
        return Publish::drop("blocked tenant");
    }
    Publish::Pass
}

tinybroker::on_publish!(filter);
