;; A memory of 2 pages (128 KiB) to start with: refused under a smaller memory limit.
(module
  (memory (export "memory") 2)
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_on_publish") (result i64) (i64.const 0)))
