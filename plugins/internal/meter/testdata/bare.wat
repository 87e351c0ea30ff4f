;; No type, import or global section of its own before the rewrite adds them... but a loop.
(module
  (func (export "spin") (param i32) (result i32)
    (loop $l
      (local.set 0 (i32.sub (local.get 0) (i32.const 1)))
      (br_if $l (local.get 0)))
    (local.get 0)))
