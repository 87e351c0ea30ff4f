;; tb_v1_inbox returns a buffer that ends past the plugin's memory: every call fails.
(module
  (memory (export "memory") 1)
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_v1_inbox") (param $size i32) (result i32) (i32.const 65528))
  (func (export "tb_on_publish") (result i64) (i64.const 0)))
