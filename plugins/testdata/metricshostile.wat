;; Hostile: tries a bad metric name, defines more metrics than a plugin may, and counts
;; every message under its payload as label value. tb_v1_init fails (refusing the load) if a
;; status is not the one docs/ABI.md gives; on_publish passes a message whose value got a
;; series of its own, drops one counted under "_other" (ERR_LIMIT), and traps on any other
;; status.
(module
  (import "tinybroker" "v1_metric_define" (func $define (param i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_metric_add" (func $add (param i32 i64 i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_payload" (func $payload (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $labelled (mut i32) (i32.const -1))
  (data (i32.const 0) "m_?")
  (data (i32.const 16) "bad-name")
  (data (i32.const 32) "by_payload")
  (data (i32.const 48) "payload")
  (data (i32.const 64) "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefgh")
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_v1_init") (result i32) (local $i i32) (local $rc i32)
    (if (i32.ne (call $define (i32.const 1) (i32.const 16) (i32.const 8) (i32.const 0) (i32.const 0)
        (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)) (i32.const -1)) ;; ERR_INVALID
      (then (return (i32.const 1))))
    (global.set $labelled (call $define (i32.const 1) (i32.const 32) (i32.const 10) (i32.const 0) (i32.const 0)
      (i32.const 48) (i32.const 7) (i32.const 0) (i32.const 0)))
    (if (i32.lt_s (global.get $labelled) (i32.const 0)) (then (return (i32.const 2))))
    ;; gauges m_A, m_B...: 31 fit beside by_payload, the 32nd is refused
    (loop $l
      (i32.store8 (i32.const 2) (i32.load8_u (i32.add (i32.const 64) (local.get $i))))
      (local.set $rc (call $define (i32.const 2) (i32.const 0) (i32.const 3) (i32.const 0) (i32.const 0)
        (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.ge_s (local.get $rc) (i32.const 0))))
    (if (i32.ne (local.get $rc) (i32.const -4)) (then (return (i32.const 3)))) ;; ERR_LIMIT
    (if (i32.ne (local.get $i) (i32.const 32)) (then (return (i32.const 4))))
    ;; the same name with another kind
    (if (i32.ne (call $define (i32.const 3) (i32.const 32) (i32.const 10) (i32.const 0) (i32.const 0)
        (i32.const 48) (i32.const 7) (i32.const 0) (i32.const 0)) (i32.const -3)) ;; ERR_NOT_ALLOWED
      (then (return (i32.const 5))))
    (i32.const 0))
  (func (export "tb_v1_on_publish") (result i64) (local $n i32) (local $rc i32)
    (local.set $n (call $payload (i32.const 256) (i32.const 64)))
    (local.set $rc (call $add (global.get $labelled) (i64.const 1) (i32.const 256) (local.get $n)))
    (if (i32.eqz (local.get $rc)) (then (return (i64.const 0))))
    (if (i32.eq (local.get $rc) (i32.const -4)) (then (return (i64.const 1))))
    unreachable))
