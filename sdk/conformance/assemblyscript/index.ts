// The conformance plugin (sdk/conformance/SPEC.md) written with the AssemblyScript SDK,
// with the inbox and batches (docs/ABI.md): the test also runs it with them hidden.
import { config, emit, emitString, event, kv, log, metric, msg, publishBatch, Code, Init, Level, Publish, Redeliver } from "tinybroker";
export { tinybroker_abi_v1, tb_v1_inbox } from "tinybroker";

export function tb_v1_init(): i32 {
  const refuse = config.get("refuse");
  return refuse == null ? Init.ok() : Init.refuse("refused: " + refuse);
}

export function tb_v1_on_publish(): i64 {
  const topic = msg.topic();
  if (topic == "c.drop") return Publish.drop("dropped by conformance");
  if (topic == "c.reject") {
    const why = msg.header("why");
    return Publish.reject(Code.PERMISSION_DENIED, "rejected: " + (why == null ? "" : why));
  }
  if (topic == "c.retopic") check(msg.setTopic("c.retopic.done"));
  else if (topic == "c.headers") {
    check(msg.setHeader("added", "1"));
    check(msg.setHeader("changed", "new"));
    check(msg.delHeader("removed"));
  } else if (topic == "c.enum") {
    const parts = new Array<string>();
    for (let i = 0, n = msg.headerCount(); i < n; i++) {
      const name = msg.headerName(i)!;
      const value = msg.header(name);
      parts.push(name + "=" + (value == null ? "" : value));
    }
    check(msg.setPayloadString(parts.join(",")));
  } else if (topic == "c.payload") {
    const p = msg.payload();
    const twice = new Uint8Array(p.length * 2);
    twice.set(p, 0);
    twice.set(p, p.length);
    check(msg.setPayload(twice));
  } else if (topic == "c.empty") check(msg.setPayload(new Uint8Array(0)));
  else if (topic == "c.key") {
    check(msg.setHeader("key-was", msg.key()));
    const h = msg.header("tenant");
    const tenant = h == null ? "" : h;
    if (msg.setKey(tenant) != 0) return Publish.reject(Code.INVALID_ARGUMENT, "key refused");
    check(emitString("c.key.emitted", "").key("e-" + tenant));
  } else if (topic == "c.kv") {
    const k = msg.header("k"), old = msg.header("old");
    const key = k == null ? "" : k;
    const oldBytes = Uint8Array.wrap(String.UTF8.encode(old == null ? "" : old));
    if (kv.cas(key, oldBytes, msg.payload()) != 0) return Publish.drop("kv refused");
    const v = kv.get(key);
    check(msg.setPayload(v == null ? new Uint8Array(0) : v));
  } else if (topic == "c.kv.del") {
    const k = msg.header("k");
    const key = k == null ? "" : k;
    check(kv.set(key, msg.payload()));
    check(kv.remove(key));
    if (kv.get(key) != null) return Publish.drop("kv not deleted");
  } else if (topic == "c.emit") {
    const to = config.get("emit_topic");
    const first = emit(to == null ? "" : to, msg.payload());
    check(first.header("origin", topic));
    check(emitString("c.emit.second", "2").header("n", "2"));
  } else if (topic == "c.config") {
    const tenant = config.get("tenant");
    check(msg.setPayloadString((tenant == null ? "" : tenant) + "|" + config.text()));
  } else if (topic == "c.log") log(Level.Warn, "conformance log: " + msg.payloadString());
  else if (topic == "c.tenant") {
    const want = config.get("tenant");
    if (want == null || !msg.headerIs("tenant", want)) return Publish.drop("wrong tenant");
  } else if (topic == "c.metric") {
    // Defined on every call, which finds the metrics defined before, as SPEC.md says; a
    // plugin would define them once, in init.
    const h = msg.header("tenant");
    const size = metric.histogram("c_metric_bytes", "Payload bytes on c.metric.", "", [10, 100]);
    if (metric.counter("c_metric_total", "Messages on c.metric.", "tenant").add(1, h == null ? "" : h) != 0 ||
      size.observe(<i64>msg.payload().byteLength) != 0) return Publish.reject(Code.INVALID_ARGUMENT, "metric refused");
  } else if (topic == "c.trap") throw new Error("conformance trap");
  return Publish.pass();
}

export function tb_v1_on_publish_batch(): i32 {
  return publishBatch(tb_v1_on_publish);
}

export function tb_v1_on_ack(): i64 {
  const id = msg.id();
  const payload = event.subscription() + "|" + event.group() + "|" + event.attempt().toString() + "|" +
    (id == null ? "" : id);
  check(emitString("c.acked", payload).header("in_flight", event.inFlightNs() > 0 ? "yes" : "no"));
  return 0;
}

export function tb_v1_on_tick(): i64 {
  const topic = config.get("tick_topic");
  if (topic != null) check(emitString(topic, "tick").status);
  return 0;
}

export function tb_v1_on_redeliver(): i64 {
  check(msg.setHeader("reason", event.reason()));
  const retry = msg.header("retry");
  if (retry == "delay") {
    check(msg.setHeader("delayed", "1"));
    return Redeliver.delay(50);
  }
  if (retry == "dead") return Redeliver.deadLetter("conformance dead-letter");
  if (retry == "drop") return Redeliver.drop();
  check(msg.setHeader("attempt-seen", event.attempt().toString()));
  return Redeliver.redeliver();
}

// A refused write is a bug in this plugin: trap, so that the test sees it.
function check(status: i32): void {
  if (status < 0) throw new Error("write refused: " + status.toString());
}
