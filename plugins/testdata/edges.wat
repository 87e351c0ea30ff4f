;; ABI edge cases (TestABIEdges). tb_on_publish:
;;  - passes zero-length (ptr, len) pairs whose pointers are past the end of memory to a
;;    reader, v1_log and three writers: valid whatever the pointer (docs/ABI.md);
;;  - drops the message if v1_msg_id does not return -1 (a message being published has no id).
(module
  (import "tinybroker" "v1_log" (func $log (param i32 i32 i32)))
  (import "tinybroker" "v1_msg_id" (func $id (param i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_topic" (func $topic (param i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_set_payload" (func $set_payload (param i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_set_header" (func $set_header (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_set_reason" (func $set_reason (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "empty")
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_on_publish") (result i64)
    (call $log (i32.const 2) (i32.const 0xfffffff0) (i32.const 0))
    (drop (call $topic (i32.const 0xfffffff0) (i32.const 0)))
    (if (i32.ne (call $set_payload (i32.const 0xfffffff0) (i32.const 0)) (i32.const 0))
      (then (unreachable)))
    (if (i32.ne (call $set_header (i32.const 0) (i32.const 5) (i32.const 0xaaaaaaaa) (i32.const 0)) (i32.const 0))
      (then (unreachable)))
    (call $set_reason (i32.const 0xfffffff0) (i32.const 0))
    (if (i32.ne (call $id (i32.const 64) (i32.const 64)) (i32.const -1))
      (then (return (i64.const 1)))) ;; DROP
    (i64.const 0)))
