;; The conformance plugin (sdk/conformance/SPEC.md) written by hand in WebAssembly text:
;; no SDK, no runtime, no allocator. Built with `wat2wasm conformance.wat -o conformance.wasm`.
;;
;; Memory (2 pages, grown when a payload needs more):
;;   32 * k          string constant k (each fits in 32 bytes; see the data segments below)
;;   2048  .. 2303   $topic:   the message's topic          (cap 256)
;;   2304  .. 2559   $hval:    a header value               (cap 256)
;;   2560  .. 2815   $cval:    a config value               (cap 256)
;;   2816  .. 2831   $num:     a number in decimal
;;   3072  .. 4105   "refused: " then the value of config key refuse (cap 1024)
;;   4352  .. 5386   "rejected: " then the value of header why (cap 1024)
;;   5632  .. 6655   $rbuf:    the event's reason           (cap 1024)
;;   6912  .. 7167   $etopic:  config emit_topic, or tick_topic in a tick (cap 256)
;;   7168  .. 8193   "e-" then the value of header tenant (cap 1024)
;;   65519 .. 65535  "conformance log: ", right before
;;   65536 ..        $big:     payloads and built values, up to the end of memory
;;
;; A reader copies min(len, cap) bytes and returns the full length, so a value that did not fit
;; is read again after growing memory ($ensure); a value longer than a fixed buffer's cap is
;; compared by its length alone (it cannot equal a shorter one).
(module
  (import "tinybroker" "v1_log" (func $log (param i32 i32 i32)))
  (import "tinybroker" "v1_config" (func $config (param i32 i32) (result i32)))
  (import "tinybroker" "v1_config_get" (func $config_get (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_set_reason" (func $set_reason (param i32 i32)))
  (import "tinybroker" "v1_msg_topic" (func $msg_topic (param i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_payload" (func $msg_payload (param i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_header" (func $msg_header (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_header_count" (func $msg_header_count (result i32)))
  (import "tinybroker" "v1_msg_header_name" (func $msg_header_name (param i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_id" (func $msg_id (param i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_set_topic" (func $set_topic (param i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_set_payload" (func $set_payload (param i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_set_header" (func $set_header (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_del_header" (func $del_header (param i32 i32) (result i32)))
  (import "tinybroker" "v1_event_subscription" (func $event_subscription (param i32 i32) (result i32)))
  (import "tinybroker" "v1_event_group" (func $event_group (param i32 i32) (result i32)))
  (import "tinybroker" "v1_event_attempt" (func $event_attempt (result i32)))
  (import "tinybroker" "v1_event_in_flight_ns" (func $event_in_flight_ns (result i64)))
  (import "tinybroker" "v1_event_reason" (func $event_reason (param i32 i32) (result i32)))
  (import "tinybroker" "v1_metric_define" (func $metric_define (param i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_metric_add" (func $metric_add (param i32 i64 i32 i32) (result i32)))
  (import "tinybroker" "v1_metric_observe" (func $metric_observe (param i32 i64 i32 i32) (result i32)))
  (import "tinybroker" "v1_emit" (func $emit (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_emit_header" (func $emit_header (param i32 i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_key" (func $msg_key (param i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_set_key" (func $set_key (param i32 i32) (result i32)))
  (import "tinybroker" "v1_emit_key" (func $emit_key (param i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_kv_get" (func $kv_get (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_kv_set" (func $kv_set (param i32 i32 i32 i32 i64) (result i32)))
  (import "tinybroker" "v1_kv_cas" (func $kv_cas (param i32 i32 i32 i32 i32 i32 i64) (result i32)))
  (import "tinybroker" "v1_kv_delete" (func $kv_delete (param i32 i32) (result i32)))

  (memory (export "memory") 2)

  ;; String constants, one per 32 bytes: (i32.const OFFSET) (i32.const LENGTH) names one.
  (data (i32.const 32) "c.pass")                   ;; 6
  (data (i32.const 64) "c.drop")                   ;; 6
  (data (i32.const 96) "c.reject")                 ;; 8
  (data (i32.const 128) "c.retopic")               ;; 9
  (data (i32.const 160) "c.retopic.done")          ;; 14
  (data (i32.const 192) "c.headers")               ;; 9
  (data (i32.const 224) "c.enum")                  ;; 6
  (data (i32.const 256) "c.payload")               ;; 9
  (data (i32.const 288) "c.empty")                 ;; 7
  (data (i32.const 320) "c.emit")                  ;; 6
  (data (i32.const 352) "c.emit.second")           ;; 13
  (data (i32.const 384) "c.config")                ;; 8
  (data (i32.const 416) "c.log")                   ;; 5
  (data (i32.const 448) "c.tenant")                ;; 8
  (data (i32.const 480) "c.trap")                  ;; 6
  (data (i32.const 512) "c.acked")                 ;; 7
  (data (i32.const 544) "dropped by conformance")  ;; 22
  (data (i32.const 576) "why")                     ;; 3
  (data (i32.const 608) "added")                   ;; 5
  (data (i32.const 640) "1")                       ;; 1
  (data (i32.const 672) "changed")                 ;; 7
  (data (i32.const 704) "new")                     ;; 3
  (data (i32.const 736) "removed")                 ;; 7
  (data (i32.const 768) "emit_topic")              ;; 10
  (data (i32.const 800) "origin")                  ;; 6
  (data (i32.const 832) "n")                       ;; 1
  (data (i32.const 864) "2")                       ;; 1
  (data (i32.const 896) "tenant")                  ;; 6
  (data (i32.const 928) "wrong tenant")            ;; 12
  (data (i32.const 960) "refuse")                  ;; 6
  (data (i32.const 992) "in_flight")               ;; 9
  (data (i32.const 1024) "yes")                    ;; 3
  (data (i32.const 1056) "no")                     ;; 2
  (data (i32.const 1088) "reason")                 ;; 6
  (data (i32.const 1120) "retry")                  ;; 5
  (data (i32.const 1152) "delay")                  ;; 5
  (data (i32.const 1184) "delayed")                ;; 7
  (data (i32.const 1216) "dead")                   ;; 4
  (data (i32.const 1248) "conformance dead-letter") ;; 23
  (data (i32.const 1280) "drop")                   ;; 4
  (data (i32.const 1312) "attempt-seen")           ;; 12
  (data (i32.const 1344) "c.key")                  ;; 5
  (data (i32.const 1376) "key-was")                ;; 7
  (data (i32.const 1408) "key refused")            ;; 11
  (data (i32.const 1440) "c.key.emitted")          ;; 13
  (data (i32.const 1472) "c.metric")               ;; 8
  (data (i32.const 1504) "c_metric_total")         ;; 14
  (data (i32.const 1536) "Messages on c.metric.")  ;; 21
  (data (i32.const 1568) "c_metric_bytes")         ;; 14
  (data (i32.const 1600) "Payload bytes on c.metric.") ;; 26
  (data (i32.const 1632) "10,100")                 ;; 6
  (data (i32.const 1664) "metric refused")         ;; 14
  (data (i32.const 1696) "c.kv")                   ;; 4
  (data (i32.const 1728) "c.kv.del")               ;; 8
  (data (i32.const 1760) "k")                      ;; 1
  (data (i32.const 1792) "old")                    ;; 3
  (data (i32.const 1824) "kv refused")             ;; 10
  (data (i32.const 1856) "kv not deleted")         ;; 14
  (data (i32.const 1888) "tick_topic")             ;; 10
  (data (i32.const 1920) "tick")                   ;; 4
  ;; Prefixes placed right before the buffer their value is read into, so that prefix and
  ;; value are one string without a copy.
  (data (i32.const 3072) "refused: ")              ;; 9, value at 3081
  (data (i32.const 4352) "rejected: ")             ;; 10, value at 4362
  (data (i32.const 7168) "e-")                     ;; 2, value at 7170
  (data (i32.const 65519) "conformance log: ")     ;; 17, $big at 65536

  (global $topic i32 (i32.const 2048))
  (global $hval i32 (i32.const 2304))
  (global $cval i32 (i32.const 2560))
  (global $num i32 (i32.const 2816))
  (global $rbuf i32 (i32.const 5632))
  (global $etopic i32 (i32.const 6912))
  (global $big i32 (i32.const 65536))

  ;; The ABI version marker: exported, never called.
  (func (export "tinybroker_abi_v1"))

  ;; $eq reports whether the bytes [a, a+alen) and [b, b+blen) are equal.
  (func $eq (param $a i32) (param $alen i32) (param $b i32) (param $blen i32) (result i32)
    (if (i32.ne (local.get $alen) (local.get $blen)) (then (return (i32.const 0))))
    (block $done
      (loop $next
        (br_if $done (i32.eqz (local.get $alen)))
        (if (i32.ne (i32.load8_u (local.get $a)) (i32.load8_u (local.get $b)))
          (then (return (i32.const 0))))
        (local.set $a (i32.add (local.get $a) (i32.const 1)))
        (local.set $b (i32.add (local.get $b) (i32.const 1)))
        (local.set $alen (i32.sub (local.get $alen) (i32.const 1)))
        (br $next)))
    (i32.const 1))

  ;; $ensure grows memory so that [0, end) is inside it, or traps if the memory limit forbids.
  (func $ensure (param $end i32)
    (local $have i32)
    (local.set $have (i32.mul (memory.size) (i32.const 65536)))
    (if (i32.gt_u (local.get $end) (local.get $have))
      (then
        (if (i32.eq
              (memory.grow (i32.div_u (i32.add (i32.sub (local.get $end) (local.get $have)) (i32.const 65535))
                                      (i32.const 65536)))
              (i32.const -1))
          (then unreachable)))))

  ;; $room is how many bytes lie between ptr and the end of memory.
  (func $room (param $ptr i32) (result i32)
    (i32.sub (i32.mul (memory.size) (i32.const 65536)) (local.get $ptr)))

  ;; $itoa writes v in decimal at ptr and returns its length.
  (func $itoa (param $v i32) (param $ptr i32) (result i32)
    (local $n i32) (local $t i32) (local $i i32)
    (local.set $n (i32.const 1))
    (local.set $t (local.get $v))
    (block $done
      (loop $count
        (br_if $done (i32.lt_u (local.get $t) (i32.const 10)))
        (local.set $t (i32.div_u (local.get $t) (i32.const 10)))
        (local.set $n (i32.add (local.get $n) (i32.const 1)))
        (br $count)))
    (local.set $i (local.get $n))
    (loop $digit
      (local.set $i (i32.sub (local.get $i) (i32.const 1)))
      (i32.store8 (i32.add (local.get $ptr) (local.get $i))
                  (i32.add (i32.const 48) (i32.rem_u (local.get $v) (i32.const 10))))
      (local.set $v (i32.div_u (local.get $v) (i32.const 10)))
      (br_if $digit (local.get $i)))
    (local.get $n))

  ;; $payload reads the payload to $big (growing memory to fit) and returns its length.
  (func $payload (result i32)
    (local $n i32)
    (local.set $n (call $msg_payload (global.get $big) (call $room (global.get $big))))
    (if (i32.gt_u (local.get $n) (call $room (global.get $big)))
      (then
        (call $ensure (i32.add (global.get $big) (local.get $n)))
        (drop (call $msg_payload (global.get $big) (local.get $n)))))
    (local.get $n))

  ;; tb_v1_init refuses the load if the config has the key refuse.
  (func (export "tb_v1_init") (result i32)
    (local $n i32)
    (local.set $n (call $config_get (i32.const 960) (i32.const 6) (i32.const 3081) (i32.const 1024)))
    (if (i32.lt_s (local.get $n) (i32.const 0)) (then (return (i32.const 0))))
    (if (i32.gt_u (local.get $n) (i32.const 1024)) (then (local.set $n (i32.const 1024))))
    (call $set_reason (i32.const 3072) (i32.add (i32.const 9) (local.get $n)))
    (i32.const 1))

  (func (export "tb_v1_on_publish") (result i64)
    (local $t i32) (local $n i32) (local $m i32) (local $h i32) (local $i i32) (local $count i32) (local $pos i32)
    (local.set $t (call $msg_topic (global.get $topic) (i32.const 256)))

    ;; c.pass: nothing.
    (if (call $eq (global.get $topic) (local.get $t) (i32.const 32) (i32.const 6))
      (then (return (i64.const 0))))

    ;; c.drop: DROP with a reason.
    (if (call $eq (global.get $topic) (local.get $t) (i32.const 64) (i32.const 6))
      (then
        (call $set_reason (i32.const 544) (i32.const 22))
        (return (i64.const 1))))

    ;; c.reject: REJECT with PERMISSION_DENIED (7), the reason "rejected: " + header why.
    (if (call $eq (global.get $topic) (local.get $t) (i32.const 96) (i32.const 8))
      (then
        (local.set $n (call $msg_header (i32.const 576) (i32.const 3) (i32.const 4362) (i32.const 1024)))
        (if (i32.lt_s (local.get $n) (i32.const 0)) (then (local.set $n (i32.const 0))))
        (if (i32.gt_u (local.get $n) (i32.const 1024)) (then (local.set $n (i32.const 1024))))
        (call $set_reason (i32.const 4352) (i32.add (i32.const 10) (local.get $n)))
        (return (i64.const 0x700000002))))  ;; action 2 | 7 << 32

    ;; c.retopic: route to c.retopic.done.
    (if (call $eq (global.get $topic) (local.get $t) (i32.const 128) (i32.const 9))
      (then
        (drop (call $set_topic (i32.const 160) (i32.const 14)))
        (return (i64.const 0))))

    ;; c.headers: add, change and remove a header.
    (if (call $eq (global.get $topic) (local.get $t) (i32.const 192) (i32.const 9))
      (then
        (drop (call $set_header (i32.const 608) (i32.const 5) (i32.const 640) (i32.const 1)))
        (drop (call $set_header (i32.const 672) (i32.const 7) (i32.const 704) (i32.const 3)))
        (drop (call $del_header (i32.const 736) (i32.const 7)))
        (return (i64.const 0))))

    ;; c.enum: the payload becomes name=value,... in the host's order. Each name is read into
    ;; the output and then used, in place, as the key of the value read after it.
    (if (call $eq (global.get $topic) (local.get $t) (i32.const 224) (i32.const 6))
      (then
        (local.set $count (call $msg_header_count))
        (local.set $pos (global.get $big))
        (local.set $i (i32.const 0))
        (block $done
          (loop $each
            (br_if $done (i32.ge_s (local.get $i) (local.get $count)))
            (if (local.get $i)
              (then
                (i32.store8 (local.get $pos) (i32.const 44)) ;; ','
                (local.set $pos (i32.add (local.get $pos) (i32.const 1)))))
            (local.set $n (call $msg_header_name (local.get $i) (local.get $pos) (call $room (local.get $pos))))
            (if (i32.gt_u (local.get $n) (call $room (local.get $pos)))
              (then
                (call $ensure (i32.add (local.get $pos) (local.get $n)))
                (drop (call $msg_header_name (local.get $i) (local.get $pos) (local.get $n)))))
            (local.set $h (local.get $pos)) ;; the name
            (local.set $pos (i32.add (local.get $pos) (local.get $n)))
            (call $ensure (i32.add (local.get $pos) (i32.const 1)))
            (i32.store8 (local.get $pos) (i32.const 61)) ;; '='
            (local.set $pos (i32.add (local.get $pos) (i32.const 1)))
            (local.set $m (call $msg_header (local.get $h) (local.get $n) (local.get $pos) (call $room (local.get $pos))))
            (if (i32.gt_u (local.get $m) (call $room (local.get $pos)))
              (then
                (call $ensure (i32.add (local.get $pos) (local.get $m)))
                (drop (call $msg_header (local.get $h) (local.get $n) (local.get $pos) (local.get $m)))))
            (local.set $pos (i32.add (local.get $pos) (local.get $m)))
            (call $ensure (i32.add (local.get $pos) (i32.const 1)))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $each)))
        (drop (call $set_payload (global.get $big) (i32.sub (local.get $pos) (global.get $big))))
        (return (i64.const 0))))

    ;; c.payload: the payload twice. The payload is read, then read again right after itself:
    ;; reading a value twice is allowed.
    (if (call $eq (global.get $topic) (local.get $t) (i32.const 256) (i32.const 9))
      (then
        (local.set $n (call $payload))
        (call $ensure (i32.add (global.get $big) (i32.mul (local.get $n) (i32.const 2))))
        (drop (call $msg_payload (i32.add (global.get $big) (local.get $n)) (local.get $n)))
        (drop (call $set_payload (global.get $big) (i32.mul (local.get $n) (i32.const 2))))
        (return (i64.const 0))))

    ;; c.empty: an empty payload.
    (if (call $eq (global.get $topic) (local.get $t) (i32.const 288) (i32.const 7))
      (then
        (drop (call $set_payload (i32.const 0) (i32.const 0)))
        (return (i64.const 0))))

    ;; c.emit: a copy to the config's emit_topic with header origin, then c.emit.second.
    (if (call $eq (global.get $topic) (local.get $t) (i32.const 320) (i32.const 6))
      (then
        (local.set $n (call $payload))
        (local.set $m (call $config_get (i32.const 768) (i32.const 10) (global.get $etopic) (i32.const 256)))
        (if (i32.or (i32.lt_s (local.get $m) (i32.const 0)) (i32.gt_s (local.get $m) (i32.const 256)))
          (then unreachable)) ;; no usable emit_topic: a configuration SPEC.md does not allow
        (local.set $h (call $emit (global.get $etopic) (local.get $m) (global.get $big) (local.get $n)))
        (if (i32.lt_s (local.get $h) (i32.const 0)) (then unreachable))
        (drop (call $emit_header (local.get $h) (i32.const 800) (i32.const 6) (global.get $topic) (local.get $t)))
        (local.set $h (call $emit (i32.const 352) (i32.const 13) (i32.const 864) (i32.const 1)))
        (if (i32.lt_s (local.get $h) (i32.const 0)) (then unreachable))
        (drop (call $emit_header (local.get $h) (i32.const 832) (i32.const 1) (i32.const 864) (i32.const 1)))
        (return (i64.const 0))))

    ;; c.config: config value tenant, '|', the whole config text.
    (if (call $eq (global.get $topic) (local.get $t) (i32.const 384) (i32.const 8))
      (then
        (local.set $n (call $config_get (i32.const 896) (i32.const 6) (global.get $big) (i32.const 1024)))
        (if (i32.lt_s (local.get $n) (i32.const 0)) (then (local.set $n (i32.const 0))))
        (if (i32.gt_u (local.get $n) (i32.const 1024)) (then unreachable))
        (local.set $pos (i32.add (global.get $big) (local.get $n)))
        (i32.store8 (local.get $pos) (i32.const 124)) ;; '|'
        (local.set $pos (i32.add (local.get $pos) (i32.const 1)))
        (local.set $m (call $config (local.get $pos) (call $room (local.get $pos))))
        (if (i32.gt_u (local.get $m) (call $room (local.get $pos)))
          (then
            (call $ensure (i32.add (local.get $pos) (local.get $m)))
            (drop (call $config (local.get $pos) (local.get $m)))))
        (drop (call $set_payload (global.get $big) (i32.add (i32.add (local.get $n) (i32.const 1)) (local.get $m))))
        (return (i64.const 0))))

    ;; c.log: a warning, "conformance log: " + payload (the prefix lies right before $big).
    (if (call $eq (global.get $topic) (local.get $t) (i32.const 416) (i32.const 5))
      (then
        (local.set $n (call $payload))
        (call $log (i32.const 3) (i32.const 65519) (i32.add (i32.const 17) (local.get $n)))
        (return (i64.const 0))))

    ;; c.tenant: DROP unless header tenant equals config tenant.
    (if (call $eq (global.get $topic) (local.get $t) (i32.const 448) (i32.const 8))
      (then
        (local.set $n (call $msg_header (i32.const 896) (i32.const 6) (global.get $hval) (i32.const 256)))
        (local.set $m (call $config_get (i32.const 896) (i32.const 6) (global.get $cval) (i32.const 256)))
        (block $wrong
          (br_if $wrong (i32.lt_s (local.get $n) (i32.const 0)))     ;; absent
          (br_if $wrong (i32.ne (local.get $n) (local.get $m)))      ;; lengths differ
          (br_if $wrong (i32.gt_u (local.get $n) (i32.const 256)))   ;; too long to compare here
          (br_if $wrong (i32.eqz (call $eq (global.get $hval) (local.get $n) (global.get $cval) (local.get $m))))
          (return (i64.const 0)))
        (call $set_reason (i32.const 928) (i32.const 12))
        (return (i64.const 1))))

    ;; c.key: header key-was := the key (a key fits $hval: at most 256 bytes); the key :=
    ;; header tenant, or REJECT (INVALID_ARGUMENT) "key refused"; then emit c.key.emitted keyed
    ;; "e-" + the tenant ("e-" lies right before the tenant's buffer). A tenant longer than
    ;; that buffer is longer than any key: refused before it is read.
    (if (call $eq (global.get $topic) (local.get $t) (i32.const 1344) (i32.const 5))
      (then
        (local.set $n (call $msg_key (global.get $hval) (i32.const 256)))
        (drop (call $set_header (i32.const 1376) (i32.const 7) (global.get $hval) (local.get $n)))
        (local.set $m (call $msg_header (i32.const 896) (i32.const 6) (i32.const 7170) (i32.const 1024)))
        (if (i32.lt_s (local.get $m) (i32.const 0)) (then (local.set $m (i32.const 0))))
        (if (call $set_key (i32.const 7170) (local.get $m))
          (then
            (call $set_reason (i32.const 1408) (i32.const 11))
            (return (i64.const 0x300000002))))  ;; action 2 | 3 << 32
        (local.set $h (call $emit (i32.const 1440) (i32.const 13) (i32.const 0) (i32.const 0)))
        (if (i32.lt_s (local.get $h) (i32.const 0)) (then unreachable))
        (drop (call $emit_key (local.get $h) (i32.const 7168) (i32.add (i32.const 2) (local.get $m))))
        (return (i64.const 0))))

    ;; c.kv: compare-and-set header k from header old (absent: empty) to the payload, or DROP
    ;; "kv refused"; then the payload := the value read back. The key is read into $hval, old
    ;; into $cval: a key over their 256 bytes is over KV_MAX_KEY_BYTES, refused unread.
    (if (call $eq (global.get $topic) (local.get $t) (i32.const 1696) (i32.const 4))
      (then
        (local.set $h (call $msg_header (i32.const 1760) (i32.const 1) (global.get $hval) (i32.const 256)))
        (if (i32.lt_s (local.get $h) (i32.const 0)) (then (local.set $h (i32.const 0))))
        (local.set $m (call $msg_header (i32.const 1792) (i32.const 3) (global.get $cval) (i32.const 256)))
        (if (i32.lt_s (local.get $m) (i32.const 0)) (then (local.set $m (i32.const 0))))
        (if (i32.gt_u (local.get $m) (i32.const 256)) (then unreachable))
        (local.set $n (call $payload))
        (if (call $kv_cas (global.get $hval) (local.get $h) (global.get $cval) (local.get $m) (global.get $big) (local.get $n) (i64.const 0))
          (then
            (call $set_reason (i32.const 1824) (i32.const 10))
            (return (i64.const 1))))
        (local.set $n (call $kv_get (global.get $hval) (local.get $h) (global.get $big) (call $room (global.get $big))))
        (if (i32.gt_u (local.get $n) (call $room (global.get $big)))  ;; -1 (absent) too: it was just set
          (then
            (call $ensure (i32.add (global.get $big) (local.get $n)))
            (drop (call $kv_get (global.get $hval) (local.get $h) (global.get $big) (local.get $n)))))
        (drop (call $set_payload (global.get $big) (local.get $n)))
        (return (i64.const 0))))

    ;; c.kv.del: set header k to the payload, delete it; DROP "kv not deleted" if it still
    ;; reads (a read with no buffer: its length, or -1).
    (if (call $eq (global.get $topic) (local.get $t) (i32.const 1728) (i32.const 8))
      (then
        (local.set $h (call $msg_header (i32.const 1760) (i32.const 1) (global.get $hval) (i32.const 256)))
        (if (i32.lt_s (local.get $h) (i32.const 0)) (then (local.set $h (i32.const 0))))
        (local.set $n (call $payload))
        (if (call $kv_set (global.get $hval) (local.get $h) (global.get $big) (local.get $n) (i64.const 0))
          (then unreachable))
        (if (call $kv_delete (global.get $hval) (local.get $h)) (then unreachable))
        (if (i32.ge_s (call $kv_get (global.get $hval) (local.get $h) (i32.const 0) (i32.const 0)) (i32.const 0))
          (then
            (call $set_reason (i32.const 1856) (i32.const 14))
            (return (i64.const 1))))
        (return (i64.const 0))))

    ;; c.metric: define the counter c_metric_total (label tenant) and the histogram
    ;; c_metric_bytes (buckets 10,100) on every call, which finds them defined before; add 1
    ;; for header tenant (empty if absent), observe the payload's length; REJECT
    ;; (INVALID_ARGUMENT) "metric refused" if a call is refused. $h and $m hold the ids.
    (if (call $eq (global.get $topic) (local.get $t) (i32.const 1472) (i32.const 8))
      (then
        (local.set $h (call $metric_define (i32.const 1) (i32.const 1504) (i32.const 14) (i32.const 1536) (i32.const 21)
          (i32.const 896) (i32.const 6) (i32.const 0) (i32.const 0)))
        (local.set $m (call $metric_define (i32.const 3) (i32.const 1568) (i32.const 14) (i32.const 1600) (i32.const 26)
          (i32.const 0) (i32.const 0) (i32.const 1632) (i32.const 6)))
        (local.set $n (call $msg_header (i32.const 896) (i32.const 6) (global.get $hval) (i32.const 256)))
        (if (i32.lt_s (local.get $n) (i32.const 0)) (then (local.set $n (i32.const 0))))
        (block $refused
          (br_if $refused (i32.lt_s (i32.or (local.get $h) (local.get $m)) (i32.const 0)))
          (br_if $refused (call $metric_add (local.get $h) (i64.const 1) (global.get $hval) (local.get $n)))
          (br_if $refused (call $metric_observe (local.get $m)
            (i64.extend_i32_u (call $msg_payload (i32.const 0) (i32.const 0))) (i32.const 0) (i32.const 0)))
          (return (i64.const 0)))
        (call $set_reason (i32.const 1664) (i32.const 14))
        (return (i64.const 0x300000002))))  ;; action 2 | 3 << 32

    ;; c.trap: trap.
    (if (call $eq (global.get $topic) (local.get $t) (i32.const 480) (i32.const 6))
      (then unreachable))

    ;; Anything else: PASS.
    (i64.const 0))

  ;; $fits returns a reader's result n if it is a length that fit the 1024 bytes offered, and
  ;; traps otherwise (-1, absent, too). Subscription ids, group names and system_ids are far
  ;; shorter: the broker limits them.
  (func $fits (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 1024)) (then unreachable))
    (local.get $n))

  ;; tb_v1_on_tick emits tick to the config's tick_topic, if it has one.
  (func (export "tb_v1_on_tick") (result i64)
    (local $m i32)
    (local.set $m (call $config_get (i32.const 1888) (i32.const 10) (global.get $etopic) (i32.const 256)))
    (if (i32.ge_s (local.get $m) (i32.const 0))
      (then
        (if (i32.gt_s (local.get $m) (i32.const 256))
          (then unreachable)) ;; longer than any topic
        (if (i32.lt_s (call $emit (global.get $etopic) (local.get $m) (i32.const 1920) (i32.const 4)) (i32.const 0))
          (then unreachable))))
    (i64.const 0))

  ;; tb_v1_on_ack emits <subscription>|<group>|<attempt>|<system_id> to c.acked.
  (func (export "tb_v1_on_ack") (result i64)
    (local $pos i32) (local $h i32)
    (local.set $pos (global.get $big))
    (local.set $pos (i32.add (local.get $pos) (call $fits (call $event_subscription (local.get $pos) (i32.const 1024)))))
    (i32.store8 (local.get $pos) (i32.const 124)) ;; '|'
    (local.set $pos (i32.add (local.get $pos) (i32.const 1)))
    (local.set $pos (i32.add (local.get $pos) (call $fits (call $event_group (local.get $pos) (i32.const 1024)))))
    (i32.store8 (local.get $pos) (i32.const 124))
    (local.set $pos (i32.add (local.get $pos) (i32.const 1)))
    (local.set $pos (i32.add (local.get $pos) (call $itoa (call $event_attempt) (local.get $pos))))
    (i32.store8 (local.get $pos) (i32.const 124))
    (local.set $pos (i32.add (local.get $pos) (i32.const 1)))
    (local.set $pos (i32.add (local.get $pos) (call $fits (call $msg_id (local.get $pos) (i32.const 1024)))))
    (local.set $h (call $emit (i32.const 512) (i32.const 7) (global.get $big) (i32.sub (local.get $pos) (global.get $big))))
    (if (i32.lt_s (local.get $h) (i32.const 0)) (then unreachable))
    (if (i64.gt_s (call $event_in_flight_ns) (i64.const 0))
      (then (drop (call $emit_header (local.get $h) (i32.const 992) (i32.const 9) (i32.const 1024) (i32.const 3))))
      (else (drop (call $emit_header (local.get $h) (i32.const 992) (i32.const 9) (i32.const 1056) (i32.const 2)))))
    (i64.const 0))

  ;; tb_v1_on_redeliver: header reason := the event's reason; then by header retry.
  (func (export "tb_v1_on_redeliver") (result i64)
    (local $n i32)
    (local.set $n (call $event_reason (global.get $rbuf) (i32.const 1024)))
    (if (i32.gt_u (local.get $n) (i32.const 1024)) (then (local.set $n (i32.const 1024))))
    (drop (call $set_header (i32.const 1088) (i32.const 6) (global.get $rbuf) (local.get $n)))
    (local.set $n (call $msg_header (i32.const 1120) (i32.const 5) (global.get $hval) (i32.const 256)))
    ;; delay: DELAY 50 ms (action 1 | 50 << 32).
    (if (call $eq (global.get $hval) (local.get $n) (i32.const 1152) (i32.const 5))
      (then
        (drop (call $set_header (i32.const 1184) (i32.const 7) (i32.const 640) (i32.const 1)))
        (return (i64.const 0x3200000001))))
    ;; dead: DEAD_LETTER with a reason.
    (if (call $eq (global.get $hval) (local.get $n) (i32.const 1216) (i32.const 4))
      (then
        (call $set_reason (i32.const 1248) (i32.const 23))
        (return (i64.const 2))))
    ;; drop: DROP.
    (if (call $eq (global.get $hval) (local.get $n) (i32.const 1280) (i32.const 4))
      (then (return (i64.const 3))))
    ;; Anything else: REDELIVER, with header attempt-seen.
    (drop (call $set_header (i32.const 1312) (i32.const 12) (global.get $num)
                            (call $itoa (call $event_attempt) (global.get $num))))
    (i64.const 0))
)
