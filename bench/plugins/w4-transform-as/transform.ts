// w4-transform-as is workload W4's transform plugin in AssemblyScript (bench/plugins/w4-transform
// in Go): it adds the header x-w4: 1. On the inbox (tb_v1_inbox) the header goes into the
// message's write list, and a publish frame's messages come in one call
// (tb_v1_on_publish_batch), as sdk/assemblyscript/examples/tenant-filter.ts does.
// bench/plugins/build.sh builds it (docs/plugins/assemblyscript.md):
//   asc transform.ts -o w4-transform-as.wasm -O3 --runtime incremental --use abort=~lib/tinybroker/index/abort
import { log, msg, publishBatch, Level, Publish, Status } from "tinybroker";
export { tinybroker_abi_v1, tb_v1_inbox } from "tinybroker";

export function tb_v1_on_publish(): i64 {
  const s = msg.setHeader("x-w4", "1");
  if (s != Status.OK) log(Level.Error, "w4-transform-as: setHeader: " + Status.name(s));
  return Publish.pass();
}

// The messages of a publish frame in one call, each decided by tb_v1_on_publish as if alone.
export function tb_v1_on_publish_batch(): i32 {
  return publishBatch(tb_v1_on_publish);
}
