// w4-filter-as is workload W4's filter plugin in AssemblyScript (bench/plugins/w4-filter in
// Go): it reads one header and passes the message, dropping it only if the header "tenant" is
// "blocked". It takes the message from the inbox (tb_v1_inbox) and a publish frame's messages
// in one call (tb_v1_on_publish_batch), as sdk/assemblyscript/examples/tenant-filter.ts does.
// bench/plugins/build.sh builds it (docs/plugins/assemblyscript.md):
//   asc filter.ts -o w4-filter-as.wasm -O3 --runtime incremental --use abort=~lib/tinybroker/index/abort
import { msg, publishBatch, Publish } from "tinybroker";
export { tinybroker_abi_v1, tb_v1_inbox } from "tinybroker";

export function tb_v1_on_publish(): i64 {
  if (msg.headerIs("tenant", "blocked")) return Publish.drop("blocked tenant");
  return Publish.pass();
}

// The messages of a publish frame in one call, each decided by tb_v1_on_publish as if alone.
export function tb_v1_on_publish_batch(): i32 {
  return publishBatch(tb_v1_on_publish);
}
