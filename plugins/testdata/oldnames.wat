;; A plugin built before every export carried the ABI version: its hooks under their first
;; names (tb_init, tb_on_publish), still accepted. tb_on_publish drops; tb_init refuses the
;; load when config key "refuse" is set.
(module
  (import "tinybroker" "v1_config_get" (func $config_get (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "refuse")
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_init") (result i32)
    (i32.ne (call $config_get (i32.const 0) (i32.const 6) (i32.const 64) (i32.const 16)) (i32.const -1)))
  (func (export "tb_on_publish") (result i64) (i64.const 1)))
