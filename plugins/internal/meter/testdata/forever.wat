;; A loop that never ends, and a tree of calls without loops that takes 2^depth calls.
(module
  (func (export "forever") (loop $l (br $l)))
  (func $tree (export "tree") (param $depth i32) (result i32)
    (if (result i32) (i32.eqz (local.get $depth))
      (then (i32.const 1))
      (else (i32.add
        (call $tree (i32.sub (local.get $depth) (i32.const 1)))
        (call $tree (i32.sub (local.get $depth) (i32.const 1))))))))
