;; Not a tinybroker plugin: no version marker.
(module
  (memory (export "memory") 1)
  (func (export "tb_on_publish") (result i64) (i64.const 0)))
