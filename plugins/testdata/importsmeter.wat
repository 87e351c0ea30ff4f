;; Hostile: imports the function the broker's metering adds, to call it itself.
(module
  (import "tinybroker_meter" "yield" (func $yield (result i32)))
  (memory (export "memory") 1)
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_on_publish") (result i64)
    (drop (call $yield))
    (i64.const 0)))
