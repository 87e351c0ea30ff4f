;; tenant-filter: a tinybroker plugin written by hand in WebAssembly text, with no SDK and no
;; runtime (docs/plugins/wat.md walks through it). It drops every message whose header
;; "tenant" is not the configuration's "tenant", and passes the others.
;;
;;   wat2wasm tenant-filter.wat -o tenant-filter.wasm
(module
  ;; Host functions: module "tinybroker", names from docs/ABI.md.
  (import "tinybroker" "v1_msg_header" (func $msg_header (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_config_get" (func $config_get (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_set_reason" (func $set_reason (param i32 i32)))

  ;; One page of memory, exported as "memory": the host copies values into it.
  (memory (export "memory") 1)
  (data (i32.const 0) "tenant")                   ;; 6 bytes: the header and config key
  (data (i32.const 16) "tenant not allowed")      ;; 18 bytes: the reason for a drop
  (data (i32.const 48) "set config tenant")       ;; 17 bytes: why tb_v1_init refuses
  ;; 256 .. 511: the header's value; 512 .. 767: the configured tenant.

  ;; The ABI version marker: exported, never called.
  (func (export "tinybroker_abi_v1"))

  ;; tb_v1_init refuses to load without a "tenant" to allow.
  (func (export "tb_v1_init") (result i32)
    (if (i32.lt_s (call $config_get (i32.const 0) (i32.const 6) (i32.const 512) (i32.const 0))
                  (i32.const 0))
      (then
        (call $set_reason (i32.const 48) (i32.const 17))
        (return (i32.const 1))))
    (i32.const 0))

  ;; tb_v1_on_publish: PASS (0) or DROP (1) with a reason.
  (func (export "tb_v1_on_publish") (result i64)
    (local $n i32) (local $want i32) (local $i i32)
    ;; Readers return the value's full length (-1: absent) and copy at most 256 bytes.
    (local.set $n (call $msg_header (i32.const 0) (i32.const 6) (i32.const 256) (i32.const 256)))
    (local.set $want (call $config_get (i32.const 0) (i32.const 6) (i32.const 512) (i32.const 256)))
    (block $drop
      (br_if $drop (i32.lt_s (local.get $n) (i32.const 0)))       ;; no tenant header
      (br_if $drop (i32.ne (local.get $n) (local.get $want)))     ;; lengths differ
      (br_if $drop (i32.gt_u (local.get $n) (i32.const 256)))     ;; longer than we compare
      (loop $byte                                                 ;; compare byte by byte
        (if (i32.lt_u (local.get $i) (local.get $n))
          (then
            (br_if $drop (i32.ne (i32.load8_u offset=256 (local.get $i))
                                 (i32.load8_u offset=512 (local.get $i))))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $byte))))
      (return (i64.const 0)))                                     ;; PASS
    (call $set_reason (i32.const 16) (i32.const 18))
    (i64.const 1))                                                ;; DROP
)
