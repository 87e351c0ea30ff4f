;; Imports something the sandbox does not have.
(module
  (import "env" "open_socket" (func $sock (result i32)))
  (memory (export "memory") 1)
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_on_publish") (result i64) (drop (call $sock)) (i64.const 0)))
