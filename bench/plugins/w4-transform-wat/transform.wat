;; w4-transform-wat is workload W4's transform plugin in hand-written WebAssembly text
;; (bench/plugins/w4-transform in Go): it adds the header x-w4: 1. It takes the message from
;; the inbox (docs/ABI.md, "The inbox") and a publish frame's messages in one call
;; (tb_v1_on_publish_batch, "Batches"), and sets the header through the message's write list:
;; no host call at all, so it imports nothing. bench/plugins/build.sh builds it:
;;
;;   wat2wasm transform.wat -o w4-transform-wat.wasm
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "x-w4")                     ;; 4 bytes: the header's name
  (data (i32.const 8) "1")                        ;; 1 byte: its value
  ;; 1024 .. 1043: tb_v1_on_publish's write list (one record). 4096 + 32 * i: the write list of
  ;; message i of a batch (at most 256 messages, so below 12288): each message has its own,
  ;; unchanged until the call returns. 65536 and up: the inbox.
  (global $inbox (mut i32) (i32.const 0))

  (func (export "tinybroker_abi_v1"))

  ;; tb_v1_inbox(size): the inbox at 65536, memory grown to hold size bytes there.
  (func (export "tb_v1_inbox") (param $size i32) (result i32)
    (local $need i32)
    (local.set $need (i32.sub
      (i32.shr_u (i32.add (i32.add (i32.const 65536) (local.get $size)) (i32.const 65535)) (i32.const 16))
      (memory.size)))
    (if (i32.gt_s (local.get $need) (i32.const 0))
      (then (if (i32.lt_s (memory.grow (local.get $need)) (i32.const 0))
        (then (return (i32.const 0))))))       ;; 0: no inbox, the call fails
    (global.set $inbox (i32.const 65536))
    (i32.const 65536))

  ;; $transform: PASS, with the message whose inbox record is at $box given the write list at
  ;; $w: one record, op 2 (set header), a = "x-w4", b = "1". The broker would refuse a header
  ;; over max_header_bytes (the record's offset 16) as a malformed answer, so such a message
  ;; passes unchanged instead (5 bytes: no broker is configured that low).
  (func $transform (param $box i32) (param $w i32) (result i64)
    (if (i32.ge_u (i32.load offset=16 (local.get $box)) (i32.const 5))
      (then
        (i32.store (local.get $w) (i32.const 2))
        (i32.store offset=4 (local.get $w) (i32.const 0))
        (i32.store offset=8 (local.get $w) (i32.const 4))
        (i32.store offset=12 (local.get $w) (i32.const 8))
        (i32.store offset=16 (local.get $w) (i32.const 1))
        ;; The write list's address and count, at the record's offsets 0 and 4.
        (i32.store (local.get $box) (local.get $w))
        (i32.store offset=4 (local.get $box) (i32.const 1))))
    (i64.const 0))

  ;; A message alone: the inbox is its record.
  (func (export "tb_v1_on_publish") (result i64)
    (call $transform (global.get $inbox) (i32.const 1024)))

  ;; A batch: count at offset 0, then from 16 an entry of 16 bytes per message: its record's
  ;; offset (from the inbox's start), the record's length, and its verdict (u64), which we
  ;; write.
  (func (export "tb_v1_on_publish_batch") (result i32)
    (local $box i32) (local $i i32) (local $n i32) (local $e i32)
    (local.set $box (global.get $inbox))
    (local.set $n (i32.load (local.get $box)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $e (i32.add (i32.add (local.get $box) (i32.const 16)) (i32.shl (local.get $i) (i32.const 4))))
        (i64.store offset=8 (local.get $e)
          (call $transform (i32.add (local.get $box) (i32.load (local.get $e)))
                           (i32.add (i32.const 4096) (i32.shl (local.get $i) (i32.const 5)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const 0))
)
