;; Hostile: asks for a 2 MiB payload and 100 emits. The host must refuse with ERR_TOO_LARGE
;; (-2) and ERR_LIMIT (-4); the plugin traps unless it got exactly those, and passes otherwise.
(module
  (import "tinybroker" "v1_msg_set_payload" (func $set_payload (param i32 i32) (result i32)))
  (import "tinybroker" "v1_emit" (func $emit (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "spam")
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_on_publish") (result i64)
    (local $i i32) (local $rc i32)
    (if (i32.ne (call $set_payload (i32.const 0) (i32.const 2097152)) (i32.const -2)) (then unreachable))
    (loop $more
      (local.set $rc (call $emit (i32.const 0) (i32.const 4) (i32.const 0) (i32.const 0)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $more (i32.lt_u (local.get $i) (i32.const 100))))
    (if (i32.ne (local.get $rc) (i32.const -4)) (then unreachable))
    (i64.const 0)))
