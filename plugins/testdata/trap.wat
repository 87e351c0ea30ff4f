;; Hostile: on_publish traps, after asking to change the topic (which must not stick).
(module
  (import "tinybroker" "v1_msg_set_topic" (func $set_topic (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "hijacked")
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_on_publish") (result i64)
    (drop (call $set_topic (i32.const 0) (i32.const 8)))
    unreachable)
  (func (export "tb_on_redeliver") (result i64) unreachable))
