;; Built for an ABI this broker does not speak.
(module
  (memory (export "memory") 1)
  (func (export "tinybroker_abi_v2"))
  (func (export "tb_on_publish") (result i64) (i64.const 0)))
