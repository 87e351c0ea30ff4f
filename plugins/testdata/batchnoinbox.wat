;; Exports tb_v1_on_publish_batch without tb_v1_inbox, through which batches are given: the
;; load is refused (docs/ABI.md, "Batches").
(module
  (memory (export "memory") 1)
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_on_publish") (result i64) (i64.const 0))
  (func (export "tb_v1_on_publish_batch") (result i32) (i32.const 0)))
