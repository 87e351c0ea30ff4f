;; A well-behaved plugin in hand-written WAT, with a static buffer and no allocator.
;; on_publish: a message with header tenant=acme passes with header filtered=yes and a copy
;;   emitted to audit.copy; tenant=evil is rejected (PERMISSION_DENIED, 7); any other is dropped.
;;   Topic "reroute.me" is re-routed to the topic in config key "to".
;; on_ack: emits the acked message's id to audit.acks.
;; on_redeliver: first failure -> DELAY 50ms; second -> DEAD_LETTER; header retried=yes.
(module
  (import "tinybroker" "v1_msg_header" (func $header (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_topic" (func $topic (param i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_set_header" (func $set_header (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_set_topic" (func $set_topic (param i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_id" (func $id (param i32 i32) (result i32)))
  (import "tinybroker" "v1_config_get" (func $config_get (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_set_reason" (func $set_reason (param i32 i32)))
  (import "tinybroker" "v1_emit" (func $emit (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_event_attempt" (func $attempt (result i32)))
  (import "tinybroker" "v1_log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "tenant")          ;; 0..6
  (data (i32.const 16) "acme")           ;; 16..20
  (data (i32.const 32) "filtered")       ;; 32..40
  (data (i32.const 48) "yes")            ;; 48..51
  (data (i32.const 64) "audit.copy")     ;; 64..74
  (data (i32.const 80) "not on the allow-list") ;; 80..101
  (data (i32.const 112) "reroute.me")    ;; 112..122
  (data (i32.const 128) "to")            ;; 128..130
  (data (i32.const 144) "audit.acks")    ;; 144..154
  (data (i32.const 160) "retried")       ;; 160..167
  (data (i32.const 176) "evil")          ;; 176..180
  (data (i32.const 192) "evil tenant")   ;; 192..203
  (data (i32.const 208) "gave up")       ;; 208..215
  ;; scratch buffer at 1024, 256 bytes
  (func (export "tinybroker_abi_v1"))
  (func $eq (param $a i32) (param $alen i32) (param $b i32) (param $blen i32) (result i32)
    (local $i i32)
    (if (i32.ne (local.get $alen) (local.get $blen)) (then (return (i32.const 0))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $alen)))
        (if (i32.ne (i32.load8_u (i32.add (local.get $a) (local.get $i)))
                    (i32.load8_u (i32.add (local.get $b) (local.get $i))))
          (then (return (i32.const 0))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const 1))
  (func (export "tb_on_publish") (result i64)
    (local $n i32)
    ;; re-route?
    (local.set $n (call $topic (i32.const 1024) (i32.const 256)))
    (if (call $eq (i32.const 1024) (local.get $n) (i32.const 112) (i32.const 10))
      (then
        (local.set $n (call $config_get (i32.const 128) (i32.const 2) (i32.const 1024) (i32.const 256)))
        (drop (call $set_topic (i32.const 1024) (local.get $n)))
        (return (i64.const 0))))
    (local.set $n (call $header (i32.const 0) (i32.const 6) (i32.const 1024) (i32.const 256)))
    (if (call $eq (i32.const 1024) (local.get $n) (i32.const 176) (i32.const 4))
      (then
        (call $set_reason (i32.const 192) (i32.const 11))
        (return (i64.or (i64.const 2) (i64.shl (i64.const 7) (i64.const 32))))))
    (if (i32.eqz (call $eq (i32.const 1024) (local.get $n) (i32.const 16) (i32.const 4)))
      (then
        (call $set_reason (i32.const 80) (i32.const 21))
        (return (i64.const 1))))
    (drop (call $set_header (i32.const 32) (i32.const 8) (i32.const 48) (i32.const 3)))
    (drop (call $emit (i32.const 64) (i32.const 10) (i32.const 16) (i32.const 4)))
    (i64.const 0))
  (func (export "tb_on_ack") (result i64)
    (local $n i32)
    (local.set $n (call $id (i32.const 1024) (i32.const 256)))
    (drop (call $emit (i32.const 144) (i32.const 10) (i32.const 1024) (local.get $n)))
    (i64.const 0))
  (func (export "tb_on_redeliver") (result i64)
    (drop (call $set_header (i32.const 160) (i32.const 7) (i32.const 48) (i32.const 3)))
    (if (i32.ge_u (call $attempt) (i32.const 2))
      (then
        (call $set_reason (i32.const 208) (i32.const 7))
        (return (i64.const 2))))
    (i64.or (i64.const 1) (i64.shl (i64.const 50) (i64.const 32))))
)
