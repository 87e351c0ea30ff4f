;; on_redeliver: DROP, with a reason.
(module
  (import "tinybroker" "v1_set_reason" (func $set_reason (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "poison message")
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_on_redeliver") (result i64)
    (call $set_reason (i32.const 0) (i32.const 14))
    (i64.const 3)))
