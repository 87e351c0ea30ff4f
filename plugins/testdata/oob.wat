;; Hostile: hands the host a buffer outside its memory.
(module
  (import "tinybroker" "v1_msg_topic" (func $topic (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_on_publish") (result i64)
    (drop (call $topic (i32.const 65530) (i32.const 100)))
    (i64.const 0)))
