;; Measures host calls (BenchmarkHostCall): tb_on_publish makes 100 calls of the host function
;; chosen by the config key "call", or none, and passes. The cost of one host call is the
;; difference from "none", divided by 100.
;;   call=count   v1_msg_header_count: the cheapest host call, no memory touched
;;   call=header  v1_msg_header("tenant") into a 64-byte buffer: a lookup and a copy
;;   call=get     v1_kv_get("tenant") into a 64-byte buffer: the store's lock, a lookup, a copy
;;   call=set     v1_kv_set("tenant", 8 bytes): the store's lock, a sweep of 4, a copy
;;   call=add     v1_metric_add of 1 to a counter without a label
;;   call=labelled v1_metric_add of 1 to a counter's series "acme"
;;   call=none    no host call: the cost of the hook call itself
(module
  (import "tinybroker" "v1_config_get" (func $config_get (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_header_count" (func $count (result i32)))
  (import "tinybroker" "v1_msg_header" (func $header (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_kv_get" (func $kv_get (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_kv_set" (func $kv_set (param i32 i32 i32 i32 i64) (result i32)))
  (import "tinybroker" "v1_metric_define" (func $define (param i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_metric_add" (func $add (param i32 i64 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "call")
  (data (i32.const 16) "tenant")
  (data (i32.const 64) "calls_total")
  (data (i32.const 80) "acme")
  (global $mode (mut i32) (i32.const 0)) ;; the first byte of the config value: 'a', 'c', 'g', 'h', 'l', 's' or 'n'
  (global $metric (mut i32) (i32.const 0))
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_init") (result i32)
    (drop (call $config_get (i32.const 0) (i32.const 4) (i32.const 32) (i32.const 16)))
    (global.set $mode (i32.load8_u (i32.const 32)))
    (drop (call $kv_set (i32.const 16) (i32.const 6) (i32.const 0) (i32.const 8) (i64.const 0))) ;; for call=get
    (if (i32.eq (global.get $mode) (i32.const 97)) ;; 'a'
      (then (global.set $metric (call $define (i32.const 1) (i32.const 64) (i32.const 11) (i32.const 0) (i32.const 0)
        (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)))))
    (if (i32.eq (global.get $mode) (i32.const 108)) ;; 'l': labelled by tenant
      (then (global.set $metric (call $define (i32.const 1) (i32.const 64) (i32.const 11) (i32.const 0) (i32.const 0)
        (i32.const 16) (i32.const 6) (i32.const 0) (i32.const 0)))))
    (i32.lt_s (global.get $metric) (i32.const 0)))
  (func (export "tb_on_publish") (result i64)
    (local $i i32)
    (if (i32.eq (global.get $mode) (i32.const 99)) ;; 'c'
      (then
        (loop $more
          (drop (call $count))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $more (i32.lt_u (local.get $i) (i32.const 100))))))
    (if (i32.eq (global.get $mode) (i32.const 104)) ;; 'h'
      (then
        (loop $more
          (drop (call $header (i32.const 16) (i32.const 6) (i32.const 64) (i32.const 64)))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $more (i32.lt_u (local.get $i) (i32.const 100))))))
    (if (i32.eq (global.get $mode) (i32.const 103)) ;; 'g'
      (then
        (loop $more
          (drop (call $kv_get (i32.const 16) (i32.const 6) (i32.const 64) (i32.const 64)))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $more (i32.lt_u (local.get $i) (i32.const 100))))))
    (if (i32.eq (global.get $mode) (i32.const 115)) ;; 's'
      (then
        (loop $more
          (drop (call $kv_set (i32.const 16) (i32.const 6) (i32.const 0) (i32.const 8) (i64.const 0)))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $more (i32.lt_u (local.get $i) (i32.const 100))))))
    (if (i32.eq (global.get $mode) (i32.const 97)) ;; 'a'
      (then
        (loop $more
          (drop (call $add (global.get $metric) (i64.const 1) (i32.const 0) (i32.const 0)))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $more (i32.lt_u (local.get $i) (i32.const 100))))))
    (if (i32.eq (global.get $mode) (i32.const 108)) ;; 'l'
      (then
        (loop $more
          (drop (call $add (global.get $metric) (i64.const 1) (i32.const 80) (i32.const 4)))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $more (i32.lt_u (local.get $i) (i32.const 100))))))
    (i64.const 0)))
