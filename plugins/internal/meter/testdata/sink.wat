;; Everything the rewrite maps or skips: imports before it, calls direct and through a table,
;; ref.func in a global and in element segments (active, passive, declarative, expressions),
;; a start function, exports, loops with parameters, br_table, select t, SIMD, bulk memory,
;; and names (built with wat2wasm --debug-names).
(module
  (import "env" "add" (func $add (param i32 i32) (result i32)))
  (import "env" "g" (global $imported i32))
  (type $binop (func (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (table $t 4 funcref)
  (table $t2 2 funcref)
  (global $f funcref (ref.func $mul))
  (global $started (mut i32) (i32.const 0))
  (elem (table $t) (i32.const 0) func $mul $sub)
  (elem (table $t) (i32.const 2) funcref (ref.func $add) (ref.func $sum))
  (elem $passive func $mul)
  (elem declare func $twice)
  (data (i32.const 16) "abcd")
  (start $start)
  (func $start (global.set $started (i32.const 7)))
  (func $mul (param i32 i32) (result i32) (i32.mul (local.get 0) (local.get 1)))
  (func $sub (param i32 i32) (result i32) (i32.sub (local.get 0) (local.get 1)))
  (func $sum (param $n i32) (param $unused i32) (result i32) (local $acc i32)
    (block $done
      (loop $next
        (br_if $done (i32.eqz (local.get $n)))
        (local.set $acc (i32.add (local.get $acc) (local.get $n)))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $next)))
    (local.get $acc))
  (func $twice (param i32) (result i32) (i32.add (local.get 0) (local.get 0)))
  ;; indirect(i, a, b): table $t's function i applied to a and b
  (func (export "indirect") (param i32 i32 i32) (result i32)
    (call_indirect $t (type $binop) (local.get 1) (local.get 2) (local.get 0)))
  (func $direct (export "direct") (param i32 i32) (result i32)
    (call $add (call $mul (local.get 0) (local.get 1)) (call $sub (local.get 0) (local.get 1))))
  (func (export "sum") (param i32) (result i32) (call $sum (local.get 0) (i32.const 0)))
  (func (export "started") (result i32) (global.get $started))
  (func (export "imported") (result i32) (global.get $imported))
  ;; calls the function in global $f, and the one the passive segment puts in $t2
  (func $refs (export "refs") (param i32 i32) (result i32)
    (table.set $t2 (i32.const 0) (global.get $f))
    (table.init $t2 $passive (i32.const 1) (i32.const 0) (i32.const 1))
    (i32.add
      (call_indirect $t2 (type $binop) (local.get 0) (local.get 1) (i32.const 0))
      (call_indirect $t2 (type $binop) (local.get 0) (local.get 1) (i32.const 1))))
  (func (export "twice") (param i32) (result i32)
    (table.set $t2 (i32.const 0) (ref.func $twice))
    (call $twice (local.get 0)))
  ;; a loop with a parameter, blocks typed by index, br_table and a typed select:
  ;; classify(0) = 101, classify(1) = 102, otherwise 104
  (func $classify (export "classify") (param i32) (result i32)
    i32.const 100
    loop $l (param i32) (result i32)
      block $b2 (param i32) (result i32)
        block $b1 (param i32) (result i32)
          block $b0 (param i32) (result i32)
            local.get 0
            br_table $b0 $b1 $b2
          end
          i32.const 1
          i32.add
          return
        end
        i32.const 2
        i32.add
        return
      end
      i32.const 3
      i32.const 4
      i32.const 0
      select (result i32)
      i32.add
    end)
  (func (export "simd") (result i32)
    (i32x4.extract_lane 2
      (i32x4.add (v128.const i32x4 1 2 3 4) (i32x4.splat (i32.const 10)))))
  (func (export "bulk") (result i32)
    (memory.fill (i32.const 100) (i32.const 9) (i32.const 8))
    (memory.copy (i32.const 200) (i32.const 16) (i32.const 4))
    (i32.add (i32.load8_u (i32.const 107)) (i32.load8_u (i32.const 201))))
  (func (export "wide") (result i64) (i64.const -1234567890123))
)
