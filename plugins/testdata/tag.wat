;; Sets header "chain" to its config value "tag". With config key "require", drops messages
;; that lack the header it names (so a chain can check what earlier plugins did).
(module
  (import "tinybroker" "v1_config_get" (func $config_get (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_header" (func $header (param i32 i32 i32 i32) (result i32)))
  (import "tinybroker" "v1_msg_set_header" (func $set_header (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "tag")
  (data (i32.const 16) "chain")
  (data (i32.const 32) "require")
  (func (export "tinybroker_abi_v1"))
  (func (export "tb_on_publish") (result i64)
    (local $n i32)
    (local.set $n (call $config_get (i32.const 32) (i32.const 7) (i32.const 1024) (i32.const 256)))
    (if (i32.ge_s (local.get $n) (i32.const 0))
      (then
        (if (i32.lt_s (call $header (i32.const 1024) (local.get $n) (i32.const 2048) (i32.const 256)) (i32.const 0))
          (then (return (i64.const 1))))))
    (local.set $n (call $config_get (i32.const 0) (i32.const 3) (i32.const 1024) (i32.const 256)))
    (drop (call $set_header (i32.const 16) (i32.const 5) (i32.const 1024) (local.get $n)))
    (i64.const 0)))
