;; w4-filter-wat is workload W4's filter plugin in hand-written WebAssembly text
;; (bench/plugins/w4-filter in Go): it reads the header "tenant" and passes the message,
;; dropping it with the reason "blocked tenant" only if the header is "blocked". It takes the
;; message from the inbox (docs/ABI.md, "The inbox") and a publish frame's messages in one
;; call (tb_v1_on_publish_batch, "Batches"), and gives its reason in the write list: no host
;; call at all, so it imports nothing. bench/plugins/build.sh builds it:
;;
;;   wat2wasm filter.wat -o w4-filter-wat.wasm
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "tenant")                   ;; 6 bytes: the header's name
  (data (i32.const 16) "blocked")                 ;; 7 bytes: the value that drops
  (data (i32.const 32) "blocked tenant")          ;; 14 bytes: the reason
  ;; 1024 .. 1043: tb_v1_on_publish's write list (one record). 4096 + 32 * i: the write list of
  ;; message i of a batch (at most 256 messages, so below 12288): each message's record must
  ;; stay as written until the call returns. 65536 and up: the inbox.
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

  ;; $filter: the verdict for the message whose inbox record is at $box (offsets from $box);
  ;; a drop's write list, one "set reason" record, goes at $w. Names and values are compared
  ;; a word at a time with the constants, as a C compiler would: "tenant" is the u32 "tena"
  ;; (0x616e6574, little-endian) and the u16 "nt" (0x746e); "blocked" the u32s "bloc"
  ;; (0x636f6c62) and, overlapping, "cked" (0x64656b63).
  (func $filter (param $box i32) (param $w i32) (result i64)
    (local $e i32) (local $end i32) (local $v i32)
    ;; The header entries: 16 bytes each from offset 88, as many as the count at offset 80:
    ;; name offset, name length, value offset, value length.
    (local.set $e (i32.add (local.get $box) (i32.const 88)))
    (local.set $end (i32.add (local.get $e) (i32.shl (i32.load offset=80 (local.get $box)) (i32.const 4))))
    (block $pass
      (loop $entry
        (br_if $pass (i32.ge_u (local.get $e) (local.get $end)))   ;; no header "tenant"
        (if (i32.eq (i32.load offset=4 (local.get $e)) (i32.const 6))
          (then
            (local.set $v (i32.add (local.get $box) (i32.load (local.get $e))))
            (if (i32.and (i32.eq (i32.load (local.get $v)) (i32.const 0x616e6574))
                         (i32.eq (i32.load16_u offset=4 (local.get $v)) (i32.const 0x746e)))
              (then
                (br_if $pass (i32.ne (i32.load offset=12 (local.get $e)) (i32.const 7)))
                (local.set $v (i32.add (local.get $box) (i32.load offset=8 (local.get $e))))
                (br_if $pass (i32.ne (i32.load (local.get $v)) (i32.const 0x636f6c62)))
                (br_if $pass (i32.ne (i32.load offset=3 (local.get $v)) (i32.const 0x64656b63)))
                ;; DROP, with the reason: the record op 4 (set reason), a = the 14 bytes at 32;
                ;; the write list's address and count at the record's offsets 0 and 4.
                (i32.store (local.get $w) (i32.const 4))
                (i32.store offset=4 (local.get $w) (i32.const 32))
                (i32.store offset=8 (local.get $w) (i32.const 14))
                (i32.store offset=12 (local.get $w) (i32.const 0))
                (i32.store offset=16 (local.get $w) (i32.const 0))
                (i32.store (local.get $box) (local.get $w))
                (i32.store offset=4 (local.get $box) (i32.const 1))
                (return (i64.const 1))))))
        (local.set $e (i32.add (local.get $e) (i32.const 16)))
        (br $entry)))
    (i64.const 0))                                                 ;; PASS

  ;; A message alone: the inbox is its record.
  (func (export "tb_v1_on_publish") (result i64)
    (call $filter (global.get $inbox) (i32.const 1024)))

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
          (call $filter (i32.add (local.get $box) (i32.load (local.get $e)))
                        (i32.add (i32.const 4096) (i32.shl (local.get $i) (i32.const 5)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const 0))
)
