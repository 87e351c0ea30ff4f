// Drops every message whose header "tenant" is not the plugin's config value "tenant".
import { config, msg, Publish } from "tinybroker";
export { tinybroker_abi_v1 } from "tinybroker";

export function tb_on_publish(): i64 {
  const want = config.get("tenant");
  if (want != null && msg.headerIs("tenant", want)) return Publish.pass();
  return Publish.drop("wrong tenant");
}
