// A plugin that exercises the SDK for sdk.test.js: it reads, allocates and writes on every
// call, as a real plugin does.
import { config, emitString, event, log, msg, publishBatch, Code, Init, Level, Publish, Redeliver } from "../index";
export { tinybroker_abi_v1, tb_v1_inbox } from "../index";

export function tb_init(): i32 {
  return config.get("refuse") == null ? Init.ok() : Init.refuse("refused");
}

export function tb_on_publish(): i64 {
  const topic = msg.topic();
  if (topic == "t.abort") throw new Error("boom");
  if (topic == "t.reject") return Publish.reject(Code.PERMISSION_DENIED, "no " + topic);
  if (topic == "t.tenant") {
    const want = config.get("tenant");
    return want != null && msg.headerIs("tenant", want) ? Publish.pass() : Publish.drop("wrong tenant");
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

export function tb_on_redeliver(): i64 {
  return Redeliver.delay(0);
}

export function tb_v1_on_publish_batch(): i32 {
  return publishBatch(tb_on_publish);
}
