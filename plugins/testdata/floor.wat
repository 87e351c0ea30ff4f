;; The floor wazero sets under a host call (BenchmarkHostCallFloor): not a plugin. run(n) calls
;; the host function env.noop n times, in the loop testdata/hostcalls.wat makes its calls in;
;; the benchmark's noop is the cheapest api.GoFunction: it writes its result and returns, so
;; (run(100) − run(0)) ÷ 100 is what any host function costs on wazero before it does
;; anything, to compare with BenchmarkHostCall's v1_msg_header_count.
(module
  (import "env" "noop" (func $noop (result i32)))
  (func (export "run") (param $n i32)
    (local $i i32)
    (if (local.get $n)
      (then
        (loop $more
          (drop (call $noop))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $more (i32.lt_u (local.get $i) (local.get $n))))))))
