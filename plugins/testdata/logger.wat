;; A plugin that logs, for log_topic (logtopic_test.go).
;; tb_v1_init: logs "init" at info.
;; on_publish: logs the message's payload at info and "debug" at debug; the message passes.
(module
  (import "tinybroker" "v1_log" (func $log (param i32 i32 i32)))
  (import "tinybroker" "v1_msg_payload" (func $payload (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "init")
  (data (i32.const 16) "debug")
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_v1_init") (result i32)
    (call $log (i32.const 2) (i32.const 0) (i32.const 4))
    (i32.const 0))
  (func (export "tb_v1_on_publish") (result i64)
    (call $log (i32.const 2) (i32.const 1024) (call $payload (i32.const 1024) (i32.const 1024)))
    (call $log (i32.const 1) (i32.const 16) (i32.const 5))
    (i64.const 0)))
