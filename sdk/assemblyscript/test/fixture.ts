// A plugin that exercises the SDK for sdk.test.js: it reads, allocates and writes on every
// call, as a real plugin does. It exports the inbox and batches, which sdk.test.js uses or not
// (a host that never calls tb_v1_inbox gets host calls).
import { config, emitString, event, msg, publishBatch, Code, Init, Publish, Redeliver } from "../index";
export { tinybroker_abi_v1, tb_v1_inbox } from "../index";

export function tb_v1_init(): i32 {
  return config.get("refuse") == null ? Init.ok() : Init.refuse("refused");
}

export function tb_v1_on_publish(): i64 {
  const topic = msg.topic();
  if (topic == "t.abort") throw new Error("boom");
  if (topic == "t.reject") return Publish.reject(Code.PERMISSION_DENIED, "no " + topic);
  if (topic == "t.tenant") {
    const want = config.get("tenant");
    return want != null && msg.headerIs("tenant", want) ? Publish.pass() : Publish.drop("wrong tenant");
  }
  if (topic == "t.headers") {
    // Every header by index and by name, and what is not there.
    const parts = new Array<string>();
    const n = msg.headerCount();
    for (let i = 0; i < n; i++) {
      const name = msg.headerName(i)!;
      const value = msg.header(name)!;
      if (!msg.headerIs(name, value) || msg.headerIs(name, value + "x")) throw new Error("headerIs " + name);
      parts.push(name + "=" + value);
    }
    if (msg.headerName(n) != null || msg.headerName(-1) != null) throw new Error("headerName past the end");
    const missing = msg.header("missing");
    parts.push("missing=" + (missing == null ? "null" : missing));
    parts.push("topicIs=" + (msg.topicIs("t.headers") ? "1" : "0") + (msg.topicIs("t.header") ? "1" : "0"));
    msg.setPayloadString(parts.join(","));
    return Publish.pass();
  }
  if (topic == "t.limits") {
    // What the host would refuse, refused before it is listed; then writes of every kind.
    const big = msg.header("big")!;
    const statuses = [
      msg.setHeader("", "v"), msg.setHeader("k", big), msg.setPayloadString(big + big),
      msg.setPayload(Uint8Array.wrap(String.UTF8.encode(big + big))),
      msg.setHeader("k", "é"), msg.delHeader("gone"), msg.setPayload(Uint8Array.wrap(String.UTF8.encode("raw"))),
    ];
    emitString("t.statuses", statuses.join(","));
    return Publish.drop("limits");
  }
  if (topic == "t.key") {
    // The key: read (a host call, inbox or not), set from the tenant, given to an emit.
    const was = msg.key();
    const tenant = msg.header("tenant");
    emitString("t.keyed", was + "|" + msg.setKey(tenant == null ? "" : tenant).toString()).key("e-" + was);
    return Publish.pass();
  }
  if (topic == "t.config") {
    const all = config.all();
    msg.setPayloadString(all.get("multi") + "|" + all.keys().join(","));
    return Publish.pass();
  }
  // Default: echo the header "h" and the payload, allocating strings and arrays.
  const h = msg.header("h");
  const p = msg.payloadString();
  msg.setPayloadString((h == null ? "<none>" : h) + ":" + p);
  emitString("t.copy", p).header("from", topic);
  return Publish.pass();
}

export function tb_v1_on_ack(): i64 {
  const id = msg.id();
  emitString("t.acked", [id == null ? "null" : id, event.subscription(), event.group(), event.attempt().toString(),
    event.inFlightNs().toString(), msg.setHeader("h", "1").toString(), msg.setPayloadString("p").toString()].join("|"));
  return 0;
}

export function tb_v1_on_redeliver(): i64 {
  msg.setHeader("why", event.reason());
  emitString("t.redelivered", msg.setPayloadString("p").toString());
  return Redeliver.delay(0);
}

export function tb_v1_on_publish_batch(): i32 {
  return publishBatch(tb_v1_on_publish);
}
