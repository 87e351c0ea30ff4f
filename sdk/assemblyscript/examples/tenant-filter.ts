// Drops every message whose header "tenant" is not the plugin's config value "tenant".
import { config, msg, publishBatch, Publish } from "tinybroker";
export { tinybroker_abi_v1, tb_v1_inbox } from "tinybroker";

export function tb_v1_on_publish(): i64 {
  const want = config.get("tenant");
  if (want != null && msg.headerIs("tenant", want)) return Publish.pass();
  return Publish.drop("wrong tenant");
}

// The messages of a publish frame in one call, each decided by tb_v1_on_publish as if alone.
export function tb_v1_on_publish_batch(): i32 {
  return publishBatch(tb_v1_on_publish);
}
