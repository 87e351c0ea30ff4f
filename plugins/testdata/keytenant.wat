;; Ordering keys (issue 27): on_publish sets the message's key from its "tenant" header
;; (v1_msg_set_key), notes the key the message came with in the header "key-was" (v1_msg_key),
;; and emits "audit.published" (payload: the tenant) with the tenant as its key
;; (v1_emit_key); a tenant that cannot be a key rejects the publish (INVALID_ARGUMENT) with
;; the reason "key refused: ERR_INVALID" or "key refused: ERR_TOO_LARGE". Without a tenant
;; header the message passes with its own key. on_ack emits "audit.acked" whose payload and
;; key are the acked message's key. on_redeliver tries to set the key and, refused with
;; ERR_NOT_ALLOWED, sets the header key-not-allowed=yes.
(module
  (import "tinybroker" "v1_msg_key" (func $key (param i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_set_key" (func $set_key (param i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_header" (func $header (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_set_header" (func $set_header (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_set_reason" (func $set_reason (param i32 i32)))
  (import "tinybroker" "v1_emit" (func $emit (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_emit_key" (func $emit_key (param i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "tenant")
  (data (i32.const 16) "key-was")
  (data (i32.const 32) "key refused: ERR_INVALID")
  (data (i32.const 64) "key refused: ERR_TOO_LARGE")
  (data (i32.const 96) "audit.published")
  (data (i32.const 112) "audit.acked")
  (data (i32.const 128) "key-not-allowed")
  (data (i32.const 144) "yes")
  (func (export "tinybroker_abi_v1"))
  ;; The key read goes to 1024 (256 bytes: no key is longer), the tenant to 2048.
  (func (export "tb_v1_on_publish") (result i64)
    (local $k i32) (local $n i32) (local $rc i32) (local $h i32)
    (local.set $k (call $key (i32.const 1024) (i32.const 256)))
    (drop (call $set_header (i32.const 16) (i32.const 7) (i32.const 1024) (local.get $k)))
    (local.set $n (call $header (i32.const 0) (i32.const 6) (i32.const 2048) (i32.const 2048)))
    (if (i32.lt_s (local.get $n) (i32.const 0)) (then (return (i64.const 0))))
    ;; A tenant longer than the buffer is over the key limit: refused before it is read.
    (local.set $rc (call $set_key (i32.const 2048) (local.get $n)))
    (if (i32.eq (local.get $rc) (i32.const -1)) (then
      (call $set_reason (i32.const 32) (i32.const 24))
      (return (i64.const 0x300000002))))
    (if (i32.eq (local.get $rc) (i32.const -2)) (then
      (call $set_reason (i32.const 64) (i32.const 26))
      (return (i64.const 0x300000002))))
    (local.set $h (call $emit (i32.const 96) (i32.const 15) (i32.const 2048) (local.get $n)))
    (drop (call $emit_key (local.get $h) (i32.const 2048) (local.get $n)))
    (i64.const 0))
  (func (export "tb_v1_on_ack") (result i64)
    (local $k i32) (local $h i32)
    (local.set $k (call $key (i32.const 1024) (i32.const 256)))
    (local.set $h (call $emit (i32.const 112) (i32.const 11) (i32.const 1024) (local.get $k)))
    (drop (call $emit_key (local.get $h) (i32.const 1024) (local.get $k)))
    (i64.const 0))
  (func (export "tb_v1_on_redeliver") (result i64)
    (if (i32.eq (call $set_key (i32.const 0) (i32.const 6)) (i32.const -3)) (then
      (drop (call $set_header (i32.const 128) (i32.const 15) (i32.const 144) (i32.const 3)))))
    (i64.const 0)))
