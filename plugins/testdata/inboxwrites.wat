;; For FuzzWriteList and TestWriteList: leaves as its write list whatever the message's
;; payload says, so the test drives the host's decoding of write lists with arbitrary (often
;; hostile) records. The payload: the write list's pointer and count (two little-endian
;; i32s), the verdict (an i64), then bytes copied to address 0 of memory; the inbox is at
;; 32768, and holds a message of at most 32 KiB.
(module
  (memory (export "memory") 1)
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_v1_inbox") (param $size i32) (result i32)
    (if (i32.gt_u (local.get $size) (i32.const 32768)) (then (return (i32.const 0))))
    (i32.const 32768))
  (func (export "tb_on_publish") (result i64)
    (local $p i32) (local $n i32)
    (local.set $p (i32.add (i32.const 32768) (i32.load offset=40 (i32.const 32768))))
    (local.set $n (i32.load offset=44 (i32.const 32768)))
    (if (i32.lt_u (local.get $n) (i32.const 16)) (then (return (i64.const 0))))
    (memory.copy (i32.const 0) (i32.add (local.get $p) (i32.const 16))
      (select (i32.sub (local.get $n) (i32.const 16)) (i32.const 16384) (i32.lt_u (i32.sub (local.get $n) (i32.const 16)) (i32.const 16384))))
    (i32.store (i32.const 32768) (i32.load (local.get $p)))
    (i32.store (i32.const 32772) (i32.load offset=4 (local.get $p)))
    (i64.load offset=8 (local.get $p))))
