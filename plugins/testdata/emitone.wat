;; Passes every message and emits one to shadow.emit (TestShadowNeverEmits).
(module
  (import "tinybroker" "v1_emit" (func $emit (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "shadow.emit")
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_v1_on_publish") (result i64)
    (drop (call $emit (i32.const 0) (i32.const 11) (i32.const 0) (i32.const 6)))
    (i64.const 0)))
