;; tb_init refuses its configuration with its own message.
(module
  (import "tinybroker" "v1_set_reason" (func $set_reason (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "config key allow is missing")
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_init") (result i32)
    (call $set_reason (i32.const 0) (i32.const 27))
    (i32.const 1))
  (func (export "tb_on_publish") (result i64) (i64.const 0)))
