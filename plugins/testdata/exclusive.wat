;; Traps if two calls ever run on one instance at once (TestPoolHammer): tb_on_publish marks
;; the instance busy, makes host calls, and clears the mark.
(module
  (import "tinybroker" "v1_msg_header_count" (func $count (result i32)))
  (memory (export "memory") 1)
  (global $busy (mut i32) (i32.const 0))
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_on_publish") (result i64)
    (local $i i32)
    (if (global.get $busy) (then (unreachable)))
    (global.set $busy (i32.const 1))
    (loop $more
      (drop (call $count))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $more (i32.lt_u (local.get $i) (i32.const 20))))
    (global.set $busy (i32.const 0))
    (i64.const 0)))
