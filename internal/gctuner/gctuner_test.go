package gctuner

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		live, floor uint64
		base, want  int
	}{
		{4 << 20, 32 << 20, 100, 700},     // target 4 MiB × 8 = 32 MiB
		{16 << 20, 32 << 20, 100, 100},    // the floor is already reached with the base
		{40 << 20, 32 << 20, 100, 100},    // past the floor
		{1 << 10, 32 << 20, 100, 800},     // bounded: 4 MiB × 8 is the floor already
		{0, 32 << 20, 100, 800},           // before the first collection
		{8 << 20, 32 << 20, 500, 500},     // never under base
		{10 << 20, 100 << 20, 100, 900},   //
		{30 << 20, 32 << 20, 100, 100},    // under base: base
		{1 << 20, 1 << 20, 50, 50},        //
		{3 << 20, 32 << 20, 100, 800},     // capped at the minimum-goal bound
		{5 << 20, 32 << 20, 100, 540},     // rounds down
		{512 << 10, 32 << 20, 100, 800},   //
		{1 << 20, 4 << 20, 100, 100},      // a floor at the runtime's own minimum
		{100 << 20, 200 << 20, 100, 100},  //
		{100 << 20, 1000 << 20, 100, 900}, //
	} {
		if got := Percent(c.live, c.floor, c.base); got != c.want {
			t.Errorf("Percent(%d, %d, %d) = %d, want %d", c.live, c.floor, c.base, got, c.want)
		}
	}
}

// While started, a collection leaves GOGC raised for a small live heap; stop restores it.
func TestStartStop(t *testing.T) {
	t.Setenv("GOGC", "") // Start looks at the environment: an empty value is unset
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	stop := Start(1 << 30)
	for range 3 {
		runtime.GC() // the finalizer re-arms itself each time
	}
	got := debug.SetGCPercent(100)
	debug.SetGCPercent(got)
	if got <= 100 {
		t.Fatalf("GOGC %d while tuning a small heap against a 1 GiB floor, want it raised", got)
	}
	stop()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC %d after stop, want 100 restored", got)
	}
	if s := Start(0); s == nil {
		t.Fatal("Start(0) returned nil")
	}
}
