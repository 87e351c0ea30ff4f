;; W4's transform on the inbox: adds the header x-w4: 1 through the write list, with no host
;; call (docs/ABI.md, "The write list").
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "x-w41")
  ;; the write list: one set_header record, name at 0 (4 bytes), value at 4 (1 byte)
  (data (i32.const 16) "\02\00\00\00\00\00\00\00\04\00\00\00\04\00\00\00\01\00\00\00")
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_v1_inbox") (param $size i32) (result i32)
    (local $need i32)
    (local.set $need (i32.sub
      (i32.shr_u (i32.add (i32.add (i32.const 4096) (local.get $size)) (i32.const 65535)) (i32.const 16))
      (memory.size)))
    (if (i32.gt_s (local.get $need) (i32.const 0))
      (then (if (i32.lt_s (memory.grow (local.get $need)) (i32.const 0)) (then (return (i32.const 0))))))
    (i32.const 4096))
  (func (export "tb_on_publish") (result i64)
    (i32.store (i32.const 4096) (i32.const 16))
    (i32.store (i32.const 4100) (i32.const 1))
    (i64.const 0)))
