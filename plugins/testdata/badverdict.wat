;; Hostile: returns an action that does not exist.
(module
  (memory (export "memory") 1)
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_on_publish") (result i64) (i64.const 7)))
