;; Passes every message with its payload replaced by "v2": a second version that changes what
;; it delivers (TestShadowPayloadChange, TestCanaryShare).
(module
  (import "tinybroker" "v1_msg_set_payload" (func $set_payload (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "v2")
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_v1_on_publish") (result i64)
    (drop (call $set_payload (i32.const 0) (i32.const 2)))
    (i64.const 0)))
