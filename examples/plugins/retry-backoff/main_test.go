package main

import (
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	p := policy{base: 100 * time.Millisecond, maxDelay: 30 * time.Second, maxAttempts: 5}
	for n, want := range map[int]time.Duration{
		1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond,
		9: 25600 * time.Millisecond, 10: 30 * time.Second, 1000: 30 * time.Second,
	} {
		if got := p.delay(n); got != want {
			t.Errorf("delay(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestParsePolicy(t *testing.T) {
	p, err := parsePolicy(map[string]string{"base": "1s", "max_delay": "1m", "max_attempts": "3"})
	if err != nil || p != (policy{time.Second, time.Minute, 3}) {
		t.Errorf("parsePolicy = %+v, %v", p, err)
	}
	if p, err := parsePolicy(nil); err != nil || p != (policy{100 * time.Millisecond, 30 * time.Second, 5}) {
		t.Errorf("parsePolicy(nil) = %+v, %v; want the defaults", p, err)
	}
	for _, bad := range []map[string]string{
		{"base": "soon"}, {"base": "-1s"}, {"max_attempts": "0"}, {"max_attempts": "x"},
		{"base": "1m", "max_delay": "1s"},
	} {
		if _, err := parsePolicy(bad); err == nil {
			t.Errorf("parsePolicy(%v): no error", bad)
		}
	}
}
