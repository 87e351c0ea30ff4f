;; The filter of inboxpass.wat, which also takes batches (docs/ABI.md, "Batches"): in a
;; batch, it runs the same filter on every record and writes each verdict in its entry, with
;; no host call. For BenchmarkOnPublishWATBatch and the batch tests.
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "tenant")
  (data (i32.const 16) "blocked")
  (data (i32.const 32) "blocked tenant")
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
  ;; $eq: the n bytes at a and b are equal.
  (func $eq (param $a i32) (param $b i32) (param $n i32) (result i32)
    (block $no
      (loop $next
        (if (i32.eqz (local.get $n)) (then (return (i32.const 1))))
        (br_if $no (i32.ne (i32.load8_u (local.get $a)) (i32.load8_u (local.get $b))))
        (local.set $a (i32.add (local.get $a) (i32.const 1)))
        (local.set $b (i32.add (local.get $b) (i32.const 1)))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $next)))
    (i32.const 0))
  ;; $filter: the verdict for the record at $box; a drop's write list (set_reason) goes at $w.
  (func $filter (param $box i32) (param $w i32) (result i64)
    (local $i i32) (local $n i32) (local $e i32)
    (local.set $n (i32.load offset=80 (local.get $box)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $e (i32.add (i32.add (local.get $box) (i32.const 88)) (i32.shl (local.get $i) (i32.const 4))))
        (if (i32.and
              (i32.eq (i32.load offset=4 (local.get $e)) (i32.const 6))
              (call $eq (i32.add (local.get $box) (i32.load (local.get $e))) (i32.const 0) (i32.const 6)))
          (then
            (if (i32.and
                  (i32.eq (i32.load offset=12 (local.get $e)) (i32.const 7))
                  (call $eq (i32.add (local.get $box) (i32.load offset=8 (local.get $e))) (i32.const 16) (i32.const 7)))
              (then
                (i32.store (local.get $w) (i32.const 4))
                (i32.store offset=4 (local.get $w) (i32.const 32))
                (i32.store offset=8 (local.get $w) (i32.const 14))
                (i32.store (local.get $box) (local.get $w))
                (i32.store offset=4 (local.get $box) (i32.const 1))
                (return (i64.const 1))))
            (br $done)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i64.const 0))
  (func (export "tb_on_publish") (result i64)
    (call $filter (global.get $inbox) (i32.const 64)))
  ;; Each message's write list at 4096 + 32 * index: they must all outlive the call.
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
    (i32.const 0)))
