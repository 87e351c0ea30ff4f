;; on_tick as its config's "mode" says: "emit" emits an empty message to the topic of its
;; config's "topic" (at most 64 bytes), "slow" runs
;; 35 ms (longer than its tick_interval in TestTickSlowIsSkipped), "trap" traps. Its
;; on_publish passes every message. (tick_test.go)
(module
  (import "tinybroker" "v1_config_get" (func $config_get (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_emit" (func $emit (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_now" (func $now (result i64)))
  (memory (export "memory") 1)
  (data (i32.const 0) "mode")
  (data (i32.const 16) "topic")
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_v1_init") (result i32) (i32.const 0))
  (func (export "tb_v1_on_publish") (result i64) (i64.const 0))
  (func (export "tb_v1_on_tick") (result i64)
    (local $until i64) (local $n i32)
    (drop (call $config_get (i32.const 0) (i32.const 4) (i32.const 32) (i32.const 8)))
    (if (i32.eq (i32.load8_u (i32.const 32)) (i32.const 0x65)) ;; 'e'
      (then
        (local.set $n (call $config_get (i32.const 16) (i32.const 5) (i32.const 64) (i32.const 64)))
        (if (i32.or (i32.lt_s (local.get $n) (i32.const 0)) (i32.gt_s (local.get $n) (i32.const 64)))
          (then unreachable))
        (if (i32.lt_s (call $emit (i32.const 64) (local.get $n) (i32.const 0) (i32.const 0)) (i32.const 0))
          (then unreachable))))
    (if (i32.eq (i32.load8_u (i32.const 32)) (i32.const 0x73)) ;; 's'
      (then
        (local.set $until (i64.add (call $now) (i64.const 35000000)))
        (loop $wait
          (br_if $wait (i64.lt_s (call $now) (local.get $until))))))
    (if (i32.eq (i32.load8_u (i32.const 32)) (i32.const 0x74)) ;; 't'
      (then unreachable))
    (i64.const 0)))
