;; Hostile: on_publish grows memory until refused, then traps.
(module
  (memory (export "memory") 1)
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_on_publish") (result i64)
    (loop $more
      (br_if $more (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
    unreachable))
