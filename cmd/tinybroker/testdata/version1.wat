;; Version 1 of a plugin deployed in the lifecycle tests (lifecycle_test.go): sets header
;; "version" to "1" on every message.
(module
  (import "tinybroker" "v1_msg_set_header" (func $set_header (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "version")
  (data (i32.const 16) "1")
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_on_publish") (result i64)
    (drop (call $set_header (i32.const 0) (i32.const 7) (i32.const 16) (i32.const 1)))
    (i64.const 0)))
