;; Not a plugin: the two functions callcost_test.go calls straight through wazero to take
;; apart what close-on-context-done costs. $entry returns at once (the cost of entering the
;; guest); $count loops n times and returns (the cost of one loop iteration, whose header
;; holds wazero's termination check when the module is compiled with it).
(module
  (func (export "entry") (result i64) (i64.const 0))
  (func (export "count") (param $n i32) (result i64)
    (block $done
      (loop $next
        (br_if $done (i32.eqz (local.get $n)))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $next)))
    (i64.const 0)))
