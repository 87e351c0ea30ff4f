;; tenant-filter-inbox: tenant-filter.wat on the inbox (docs/ABI.md, "The inbox"). The broker
;; writes each message into this module's memory before calling tb_v1_on_publish, so the filter
;; reads the header "tenant" there and gives its reason in the write list: no host call per
;; message. The configured tenant is read once, by tb_v1_init.
;;
;;   wat2wasm tenant-filter-inbox.wat -o tenant-filter-inbox.wasm
(module
  (import "tinybroker" "v1_config_get" (func $config_get (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_set_reason" (func $set_reason (param i32 i32)))

  (memory (export "memory") 1)
  (data (i32.const 0) "tenant")                   ;; 6 bytes: the header and config key
  (data (i32.const 16) "tenant not allowed")      ;; 18 bytes: the reason for a drop
  (data (i32.const 48) "set config tenant")       ;; 17 bytes: why tb_v1_init refuses
  ;; 96 .. 115: the write list's one record, "set reason" (op 4) to the 18 bytes at 16.
  (data (i32.const 96) "\04\00\00\00\10\00\00\00\12\00\00\00\00\00\00\00\00\00\00\00")
  ;; 512 .. 767: the configured tenant, whose length is $want.
  (global $want (mut i32) (i32.const 0))
  ;; The inbox, at 4096 and up; the broker asks for it before the first call.
  (global $inbox (mut i32) (i32.const 0))

  (func (export "tinybroker_abi_v1"))

  ;; tb_v1_inbox(size): the inbox at 4096, memory grown to hold size bytes there.
  (func (export "tb_v1_inbox") (param $size i32) (result i32)
    (local $pages i32)
    (local.set $pages (i32.sub
      (i32.shr_u (i32.add (i32.add (i32.const 4096) (local.get $size)) (i32.const 65535)) (i32.const 16))
      (memory.size)))
    (if (i32.gt_s (local.get $pages) (i32.const 0))
      (then (if (i32.lt_s (memory.grow (local.get $pages)) (i32.const 0))
        (then (return (i32.const 0))))))       ;; 0: no inbox, the call fails
    (global.set $inbox (i32.const 4096))
    (i32.const 4096))

  ;; tb_v1_init keeps the configured tenant (at most 256 bytes), or refuses to load without one.
  (func (export "tb_v1_init") (result i32)
    (local $n i32)
    (local.set $n (call $config_get (i32.const 0) (i32.const 6) (i32.const 512) (i32.const 256)))
    (if (i32.or (i32.lt_s (local.get $n) (i32.const 0)) (i32.gt_s (local.get $n) (i32.const 256)))
      (then
        (call $set_reason (i32.const 48) (i32.const 17))
        (return (i32.const 1))))
    (global.set $want (local.get $n))
    (i32.const 0))

  ;; $same: the n bytes at a and b are equal.
  (func $same (param $a i32) (param $b i32) (param $n i32) (result i32)
    (block $differ
      (loop $byte
        (if (i32.eqz (local.get $n)) (then (return (i32.const 1))))
        (br_if $differ (i32.ne (i32.load8_u (local.get $a)) (i32.load8_u (local.get $b))))
        (local.set $a (i32.add (local.get $a) (i32.const 1)))
        (local.set $b (i32.add (local.get $b) (i32.const 1)))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $byte)))
    (i32.const 0))

  ;; tb_v1_on_publish: PASS (0) if the header "tenant" is the configured one, else DROP (1).
  (func (export "tb_v1_on_publish") (result i64)
    (local $box i32) (local $e i32) (local $end i32)
    (local.set $box (global.get $inbox))
    ;; The header entries: 16 bytes each from offset 88, sorted by name, as many as the
    ;; count at offset 80; each is name offset, name length, value offset, value length,
    ;; offsets from the inbox's start.
    (local.set $e (i32.add (local.get $box) (i32.const 88)))
    (local.set $end (i32.add (local.get $e) (i32.shl (i32.load offset=80 (local.get $box)) (i32.const 4))))
    (block $drop
      (loop $entry
        (br_if $drop (i32.ge_u (local.get $e) (local.get $end)))  ;; no header "tenant"
        (if (i32.and (i32.eq (i32.load offset=4 (local.get $e)) (i32.const 6))
                     (call $same (i32.add (local.get $box) (i32.load (local.get $e))) (i32.const 0) (i32.const 6)))
          (then
            (br_if $drop (i32.ne (i32.load offset=12 (local.get $e)) (global.get $want)))
            (br_if $drop (i32.eqz (call $same (i32.add (local.get $box) (i32.load offset=8 (local.get $e)))
                                              (i32.const 512) (global.get $want))))
            (return (i64.const 0))))                              ;; PASS
        (local.set $e (i32.add (local.get $e) (i32.const 16)))
        (br $entry)))
    ;; DROP, with the reason in the write list: its address and count at offsets 0 and 4.
    (i32.store (local.get $box) (i32.const 96))
    (i32.store offset=4 (local.get $box) (i32.const 1))
    (i64.const 1))
)
