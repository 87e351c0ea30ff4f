;; Hostile: on_publish never returns.
(module
  (memory (export "memory") 1)
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_on_publish") (result i64)
    (loop $forever (br $forever))
    (i64.const 0)))
