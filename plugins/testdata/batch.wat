;; Batches (docs/ABI.md, "Batches"): tb_on_publish and tb_v1_on_publish_batch run the same
;; $handle on a record of the inbox, chosen by the first letter of the message's topic:
;;   d  DROP, reason "dropped" (write list)        t  set header x=1 (write list)
;;   v  set header via=batch or via=one: the path   e  v1_emit("e.out", the payload)
;;   r  v1_msg_set_topic("moved.x")                 x  trap
;;   b  a malformed verdict (action 9)              i  in a batch: a host call with current =
;;                                                     count (traps); alone: PASS
;;   n  first in a batch: the batch is declined (returns 1); alone: PASS
;;   anything else: PASS
;; In a batch it sets current before its host calls, and keeps each message's write list at
;; 8192 + 32 * index. For the batch tests.
(module
  (import "tinybroker" "v1_emit" (func $emit (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_set_topic" (func $set_topic (param i32 i32) (result i32)))
  (import "tinybroker" "v1_log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 256) "dropped")
  (data (i32.const 272) "x")
  (data (i32.const 280) "1")
  (data (i32.const 288) "via")
  (data (i32.const 304) "batch")
  (data (i32.const 320) "one")
  (data (i32.const 336) "e.out")
  (data (i32.const 352) "moved.x")
  (data (i32.const 368) "idx")
  (global $inbox (mut i32) (i32.const 0))
  (func (export "tinybroker_abi_v1"))
  ;; The inbox: at 65536, memory grown to hold size bytes there.
  (func (export "tb_v1_inbox") (param $size i32) (result i32)
    (local $need i32)
    (local.set $need (i32.sub
      (i32.shr_u (i32.add (i32.add (i32.const 65536) (local.get $size)) (i32.const 65535)) (i32.const 16))
      (memory.size)))
    (if (i32.gt_s (local.get $need) (i32.const 0))
      (then (if (i32.lt_s (memory.grow (local.get $need)) (i32.const 0)) (then (return (i32.const 0))))))
    (global.set $inbox (i32.const 65536))
    (i32.const 65536))
  ;; $write: a one-record write list (op, a, b) at $w for the record at $rec.
  (func $write (param $rec i32) (param $w i32) (param $op i32) (param $ap i32) (param $al i32) (param $bp i32) (param $bl i32)
    (i32.store (local.get $w) (local.get $op))
    (i32.store offset=4 (local.get $w) (local.get $ap))
    (i32.store offset=8 (local.get $w) (local.get $al))
    (i32.store offset=12 (local.get $w) (local.get $bp))
    (i32.store offset=16 (local.get $w) (local.get $bl))
    (i32.store (local.get $rec) (local.get $w))
    (i32.store offset=4 (local.get $rec) (i32.const 1)))
  (func $handle (param $rec i32) (param $idx i32) (param $batch i32) (result i64)
    (local $c i32) (local $w i32)
    (local.set $w (i32.add (i32.const 8192) (i32.shl (local.get $idx) (i32.const 5))))
    (local.set $c (i32.const 0))
    (if (i32.load offset=36 (local.get $rec))
      (then (local.set $c (i32.load8_u (i32.add (local.get $rec) (i32.load offset=32 (local.get $rec)))))))
    (if (local.get $batch) ;; host calls act on this message
      (then (i32.store offset=4 (global.get $inbox) (local.get $idx))))
    (if (i32.eq (local.get $c) (i32.const 100)) ;; d
      (then
        (call $write (local.get $rec) (local.get $w) (i32.const 4) (i32.const 256) (i32.const 7) (i32.const 0) (i32.const 0))
        (return (i64.const 1))))
    (if (i32.eq (local.get $c) (i32.const 116)) ;; t
      (then
        (call $write (local.get $rec) (local.get $w) (i32.const 2) (i32.const 272) (i32.const 1) (i32.const 280) (i32.const 1))
        (return (i64.const 0))))
    (if (i32.eq (local.get $c) (i32.const 118)) ;; v
      (then
        (if (local.get $batch)
          (then (call $write (local.get $rec) (local.get $w) (i32.const 2) (i32.const 288) (i32.const 3) (i32.const 304) (i32.const 5)))
          (else (call $write (local.get $rec) (local.get $w) (i32.const 2) (i32.const 288) (i32.const 3) (i32.const 320) (i32.const 3))))
        (return (i64.const 0))))
    (if (i32.eq (local.get $c) (i32.const 101)) ;; e
      (then
        (drop (call $emit (i32.const 336) (i32.const 5)
          (i32.add (local.get $rec) (i32.load offset=40 (local.get $rec))) (i32.load offset=44 (local.get $rec))))
        (return (i64.const 0))))
    (if (i32.eq (local.get $c) (i32.const 114)) ;; r
      (then
        (drop (call $set_topic (i32.const 352) (i32.const 7)))
        (return (i64.const 0))))
    (if (i32.eq (local.get $c) (i32.const 120)) ;; x
      (then unreachable))
    (if (i32.eq (local.get $c) (i32.const 98)) ;; b
      (then (return (i64.const 9))))
    (if (i32.and (local.get $batch) (i32.eq (local.get $c) (i32.const 105))) ;; i
      (then
        (i32.store offset=4 (global.get $inbox) (i32.load (global.get $inbox)))
        (call $log (i32.const 2) (i32.const 368) (i32.const 3))))
    (i64.const 0))
  (func (export "tb_on_publish") (result i64)
    (call $handle (global.get $inbox) (i32.const 0) (i32.const 0)))
  (func (export "tb_v1_on_publish_batch") (result i32)
    (local $box i32) (local $i i32) (local $n i32) (local $e i32) (local $rec i32)
    (local.set $box (global.get $inbox))
    (local.set $n (i32.load (local.get $box)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $e (i32.add (i32.add (local.get $box) (i32.const 16)) (i32.shl (local.get $i) (i32.const 4))))
        (local.set $rec (i32.add (local.get $box) (i32.load (local.get $e))))
        (if (i32.eqz (local.get $i)) ;; n first: decline
          (then (if (i32.load offset=36 (local.get $rec))
            (then (if (i32.eq (i32.load8_u (i32.add (local.get $rec) (i32.load offset=32 (local.get $rec)))) (i32.const 110))
              (then (return (i32.const 1))))))))
        (i64.store offset=8 (local.get $e) (call $handle (local.get $rec) (local.get $i) (i32.const 1)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const 0)))
