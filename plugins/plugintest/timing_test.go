package plugintest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tinybroker/tinybroker/plugins/plugintest"
)

// TimePublish reports the calls it made and the host calls per call; timing a hook the plugin
// does not have is ErrNoHook.
func TestTiming(t *testing.T) {
	p := plugintest.LoadWith(t, fixture("pass"), nil, plugintest.Options{CallTimeout: -1}) // reads one header
	tm, err := p.TimePublish(plugintest.Message{Topic: "a.b", Payload: make([]byte, 256), Headers: map[string]string{"tenant": "acme"}}, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if tm.Calls < 10 || tm.PerCall <= 0 || tm.HostCalls != 1 || tm.Failures != 0 {
		t.Fatalf("timing %+v: want at least 10 calls of 1 host call each", tm)
	}
	if st := p.Stats(); st.Calls != uint64(tm.Calls) {
		t.Fatalf("stats %+v after %d timed calls", st, tm.Calls)
	}
	if _, err := p.TimeAck(plugintest.AckEvent{Message: plugintest.Message{Topic: "a.b"}}, time.Millisecond); !errors.Is(err, plugintest.ErrNoHook) {
		t.Fatalf("TimeAck of a plugin without on_ack: %v", err)
	}

	p = plugintest.Load(t, fixture("trap"), nil)
	tm, err = p.TimeRedeliver(plugintest.RedeliverEvent{Message: plugintest.Message{Topic: "a.b"}}, time.Millisecond)
	if err != nil || tm.Failures != tm.Calls {
		t.Fatalf("timing a plugin that traps: %+v %v", tm, err)
	}
}
