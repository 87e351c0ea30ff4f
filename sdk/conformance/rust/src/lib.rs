//! The conformance plugin (sdk/conformance/SPEC.md) written with the Rust SDK.

use tinybroker::{code, config, emit, emit_with, event, kv, log, metric, msg, Error, Level, Publish, Redeliver};

fn init() -> Result<(), String> {
    match config::get("refuse") {
        Some(why) => Err(format!("refused: {}", why)),
        None => Ok(()),
    }
}
tinybroker::init!(init);

fn on_publish() -> Result<Publish, Error> {
    let topic = msg::topic();
    Ok(match topic.as_str() {
        "c.pass" => Publish::Pass,
        "c.drop" => Publish::drop("dropped by conformance"),
        "c.reject" => {
            let why = msg::header("why").unwrap_or_default();
            Publish::reject(code::PERMISSION_DENIED, &format!("rejected: {}", why))
        }
        "c.retopic" => {
            msg::set_topic("c.retopic.done")?;
            Publish::Pass
        }
        "c.headers" => {
            msg::set_header("added", "1")?;
            msg::set_header("changed", "new")?;
            msg::del_header("removed")?;
            Publish::Pass
        }
        "c.enum" => {
            let all: Vec<String> = msg::headers().iter().map(|(k, v)| format!("{}={}", k, v)).collect();
            msg::set_payload(all.join(",").as_bytes())?;
            Publish::Pass
        }
        "c.payload" => {
            let p = msg::payload();
            msg::set_payload(&[p.as_slice(), p.as_slice()].concat())?;
            Publish::Pass
        }
        "c.empty" => {
            msg::set_payload(&[])?;
            Publish::Pass
        }
        "c.key" => {
            msg::set_header("key-was", &msg::key())?;
            let tenant = msg::header("tenant").unwrap_or_default();
            if msg::set_key(&tenant).is_err() {
                return Ok(Publish::reject(code::INVALID_ARGUMENT, "key refused"));
            }
            emit("c.key.emitted", b"")?.key(&format!("e-{}", tenant))?;
            Publish::Pass
        }
        "c.kv" => {
            let k = msg::header("k").unwrap_or_default();
            let old = msg::header("old").unwrap_or_default();
            if kv::cas(&k, old.as_bytes(), &msg::payload(), 0).is_err() {
                return Ok(Publish::drop("kv refused"));
            }
            msg::set_payload(&kv::get(&k).unwrap_or_default())?;
            Publish::Pass
        }
        "c.kv.del" => {
            let k = msg::header("k").unwrap_or_default();
            kv::set(&k, &msg::payload(), 0)?;
            kv::delete(&k)?;
            if kv::get(&k).is_some() {
                return Ok(Publish::drop("kv not deleted"));
            }
            Publish::Pass
        }
        "c.metric" => {
            // Defined on every call, which finds the metrics defined before, as SPEC.md says;
            // a plugin would define them once, in init.
            let counted = metric::counter("c_metric_total", "Messages on c.metric.", "tenant").and_then(|m| {
                m.add(1, &msg::header("tenant").unwrap_or_default())?;
                let size = metric::histogram("c_metric_bytes", "Payload bytes on c.metric.", "", &[10, 100])?;
                size.observe(msg::payload().len() as i64, "")
            });
            if counted.is_err() {
                return Ok(Publish::reject(code::INVALID_ARGUMENT, "metric refused"));
            }
            Publish::Pass
        }
        "c.emit" => {
            let to = config::get("emit_topic").unwrap_or_default();
            emit_with(&to, &msg::payload(), &[("origin", &topic)])?;
            emit("c.emit.second", b"2")?.header("n", "2")?;
            Publish::Pass
        }
        "c.config" => {
            let v = format!("{}|{}", config::get("tenant").unwrap_or_default(), config::text());
            msg::set_payload(v.as_bytes())?;
            Publish::Pass
        }
        "c.log" => {
            let p = String::from_utf8_lossy(&msg::payload()).into_owned();
            log(Level::Warn, &format!("conformance log: {}", p));
            Publish::Pass
        }
        "c.tenant" => {
            let want = config::get("tenant").unwrap_or_default();
            if msg::header_is("tenant", &want) {
                Publish::Pass
            } else {
                Publish::drop("wrong tenant")
            }
        }
        "c.trap" => panic!("conformance trap"),
        _ => Publish::Pass,
    })
}
tinybroker::on_publish!(on_publish);

fn on_ack() -> Result<(), Error> {
    let payload = format!(
        "{}|{}|{}|{}",
        event::subscription(),
        event::group(),
        event::attempt(),
        msg::id().unwrap_or_default()
    );
    let in_flight = if event::in_flight().as_nanos() > 0 { "yes" } else { "no" };
    emit_with("c.acked", payload.as_bytes(), &[("in_flight", in_flight)])
}
tinybroker::on_ack!(on_ack);

fn on_redeliver() -> Result<Redeliver, Error> {
    msg::set_header("reason", &event::reason())?;
    Ok(match msg::header("retry").as_deref() {
        Some("delay") => {
            msg::set_header("delayed", "1")?;
            Redeliver::DelayMs(50)
        }
        Some("dead") => Redeliver::dead_letter("conformance dead-letter"),
        Some("drop") => Redeliver::Drop,
        _ => {
            msg::set_header("attempt-seen", &event::attempt().to_string())?;
            Redeliver::Default
        }
    })
}
tinybroker::on_redeliver!(on_redeliver);

fn on_tick() -> Result<(), Error> {
    match config::get("tick_topic") {
        Some(topic) => emit(&topic, b"tick").map(|_| ()),
        None => Ok(()),
    }
}
tinybroker::on_tick!(on_tick);
