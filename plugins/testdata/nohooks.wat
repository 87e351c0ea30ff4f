;; A marker but no hook.
(module
  (memory (export "memory") 1)
  (func (export "tinybroker_abi_v1")))
