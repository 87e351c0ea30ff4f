;; Counts in its key-value store, with compare-and-set so that every instance of its pool
;; counts into the same number: "instances" once per instance (tb_v1_init), "count" once per
;; ack. The counts are 8-byte little-endian numbers. (TestKVCountsWithPool8)
(module
  (import "tinybroker" "v1_kv_get" (func $kv_get (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_kv_cas" (func $kv_cas (param i32 i32 i32 i32 i32 i32 i64) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "count")
  (data (i32.const 16) "instances")
  (func (export "tinybroker_abi_v1"))
  ;; incr adds one to the number at key: read it (absent: 0), then set it to one more only if
  ;; it is still what was read (absent: if still absent); on ERR_CONFLICT (-5) read again.
  (func $incr (param $key i32) (param $klen i32)
    (local $n i32) (local $rc i32) (local $spin i32)
    (loop $retry
      (local.set $n (call $kv_get (local.get $key) (local.get $klen) (i32.const 64) (i32.const 8)))
      (if (i32.eq (local.get $n) (i32.const -1))
        (then
          (i64.store (i32.const 72) (i64.const 1))
          (local.set $n (i32.const 0)))
        (else
          (if (i32.ne (local.get $n) (i32.const 8)) (then unreachable))
          (i64.store (i32.const 72) (i64.add (i64.load (i32.const 64)) (i64.const 1)))))
      ;; Work between the read and the write, as a real hook does: it widens the window in
      ;; which another instance's write comes between them (without the compare, the count
      ;; would come out short).
      (local.set $spin (i32.const 3000))
      (loop $work
        (br_if $work (local.tee $spin (i32.sub (local.get $spin) (i32.const 1)))))
      (local.set $rc (call $kv_cas (local.get $key) (local.get $klen) (i32.const 64) (local.get $n) (i32.const 72) (i32.const 8) (i64.const 0)))
      (br_if $retry (i32.eq (local.get $rc) (i32.const -5))))
    (if (local.get $rc) (then unreachable)))
  (func (export "tb_v1_init") (result i32)
    (call $incr (i32.const 16) (i32.const 9))
    (i32.const 0))
  (func (export "tb_v1_on_ack") (result i64)
    (call $incr (i32.const 0) (i32.const 5))
    (i64.const 0)))
