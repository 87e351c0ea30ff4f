;; A hook with the wrong signature.
(module
  (memory (export "memory") 1)
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_on_publish") (result i32) (i32.const 0)))
