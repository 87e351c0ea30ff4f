;; Export names (docs/ABI.md, "Export names"): the hooks under their versioned names, and
;; on_publish under its first name too, which must not be called when the versioned one is
;; there. tb_v1_on_publish passes; tb_on_publish (the old name) would drop; tb_v1_on_redeliver
;; dead-letters; tb_v1_init accepts.
(module
  (memory (export "memory") 1)
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_v1_init") (result i32) (i32.const 0))
  (func (export "tb_v1_on_publish") (result i64) (i64.const 0))
  (func (export "tb_on_publish") (result i64) (i64.const 1))
  (func (export "tb_v1_on_redeliver") (result i64) (i64.const 2)))
