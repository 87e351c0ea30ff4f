;; Grows its memory past any limit under 64 MiB and carries on when memory.grow returns -1:
;; the host still fails the call (TestMemoryLimitFailsCall). With config key "init", tb_init
;; does it instead, and the load is refused.
(module
  (import "tinybroker" "v1_config_get" (func $config_get (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "init")
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_init") (result i32)
    (if (i32.ge_s (call $config_get (i32.const 0) (i32.const 4) (i32.const 16) (i32.const 0)) (i32.const 0))
      (then (drop (memory.grow (i32.const 1024)))))
    (i32.const 0))
  (func (export "tb_on_publish") (result i64)
    (drop (memory.grow (i32.const 1024)))
    (i64.const 0)))
