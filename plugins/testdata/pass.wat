;; Reads the header "tenant" and passes every message: the cheapest useful on_publish call,
;; for the host's allocation test (TestOnPublishAllocs) and BenchmarkOnPublishWATPass.
(module
  (import "tinybroker" "v1_msg_header" (func $header (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "tenant")
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_on_publish") (result i64)
    (drop (call $header (i32.const 0) (i32.const 6) (i32.const 64) (i32.const 256)))
    (i64.const 0)))
