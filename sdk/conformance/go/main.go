// Command conformance is the conformance plugin (sdk/conformance/SPEC.md) in Go, with the
// SDK in sdk/go/plugin. Built by build.sh with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o OUT .
package main

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tinybroker/tinybroker/sdk/go/plugin"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/onack"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/onpublish"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/onredeliver"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/ontick"
)

func init() {
	plugin.Init(func(cfg map[string]string) error {
		if v, ok := cfg["refuse"]; ok {
			return errors.New("refused: " + v)
		}
		return nil
	})
	onpublish.Handle(onPublish)
	onack.Handle(onAck)
	onredeliver.Handle(onRedeliver)
	ontick.Handle(onTick)
}

// onTick emits tick to the config's tick_topic, if it has one.
func onTick() {
	if topic, ok := plugin.ConfigValue("tick_topic"); ok {
		must(plugin.Emit(topic, []byte("tick"), nil))
	}
}

func onPublish(m *plugin.Message) plugin.Verdict {
	switch m.Topic() {
	case "c.pass":
	case "c.drop":
		return plugin.Drop("dropped by conformance")
	case "c.reject":
		why, _ := m.Header("why")
		return plugin.Reject(plugin.PermissionDenied, "rejected: "+why)
	case "c.retopic":
		must(m.SetTopic("c.retopic.done"))
	case "c.headers":
		must(m.SetHeader("added", "1"))
		must(m.SetHeader("changed", "new"))
		must(m.DelHeader("removed"))
	case "c.enum":
		// Headers reads them in the host's order into a map; sorting the names gives that
		// order back (the host sorts them by name).
		h := m.Headers()
		pairs := make([]string, 0, len(h))
		for _, k := range slices.Sorted(maps.Keys(h)) {
			pairs = append(pairs, k+"="+h[k])
		}
		must(m.SetPayload([]byte(strings.Join(pairs, ","))))
	case "c.payload":
		p := m.Payload()
		must(m.SetPayload(append(slices.Clip(p), p...)))
	case "c.empty":
		must(m.SetPayload(nil))
	case "c.key":
		must(m.SetHeader("key-was", m.Key()))
		tenant, _ := m.Header("tenant")
		if m.SetKey(tenant) != nil {
			return plugin.Reject(plugin.InvalidArgument, "key refused")
		}
		must(plugin.EmitKeyed("c.key.emitted", "e-"+tenant, nil, nil))
	case "c.emit":
		topic, _ := plugin.ConfigValue("emit_topic")
		must(plugin.Emit(topic, m.Payload(), map[string]string{"origin": m.Topic()}))
		must(plugin.Emit("c.emit.second", []byte("2"), map[string]string{"n": "2"}))
	case "c.config":
		tenant, _ := plugin.ConfigValue("tenant")
		must(m.SetPayload([]byte(tenant + "|" + plugin.ConfigText())))
	case "c.kv":
		k, _ := m.Header("k")
		old, _ := m.Header("old")
		if plugin.KVCompareAndSet(k, []byte(old), m.Payload(), 0) != nil {
			return plugin.Drop("kv refused")
		}
		v, _ := plugin.KVGet(k)
		must(m.SetPayload(v))
	case "c.kv.del":
		k, _ := m.Header("k")
		must(plugin.KVSet(k, m.Payload(), 0))
		must(plugin.KVDelete(k))
		if _, ok := plugin.KVGet(k); ok {
			return plugin.Drop("kv not deleted")
		}
	case "c.log":
		plugin.Log(plugin.LevelWarn, "conformance log: "+string(m.Payload()))
	case "c.tenant":
		want, _ := plugin.ConfigValue("tenant")
		if got, ok := m.Header("tenant"); !ok || got != want {
			return plugin.Drop("wrong tenant")
		}
	case "c.metric":
		if countMetric(m) != nil {
			return plugin.Reject(plugin.InvalidArgument, "metric refused")
		}
	case "c.trap":
		panic("conformance: c.trap")
	}
	return plugin.Pass()
}

// countMetric is the row metric: defined on every call (which finds the metric defined
// before), as SPEC.md says; a plugin would define them once, in Init.
func countMetric(m *plugin.Message) error {
	messages, err := plugin.NewCounter("c_metric_total", "Messages on c.metric.", "tenant")
	if err != nil {
		return err
	}
	tenant, _ := m.Header("tenant")
	if err := messages.With(tenant).Add(1); err != nil {
		return err
	}
	size, err := plugin.NewHistogram("c_metric_bytes", "Payload bytes on c.metric.", "", 10, 100)
	if err != nil {
		return err
	}
	return size.Observe(int64(len(m.Payload())))
}

func onAck(m *plugin.Message, ev plugin.Event) {
	inFlight := "no"
	if ev.InFlight() > 0 {
		inFlight = "yes"
	}
	payload := ev.Subscription() + "|" + ev.Group() + "|" + strconv.Itoa(ev.Attempt()) + "|" + m.ID()
	must(plugin.Emit("c.acked", []byte(payload), map[string]string{"in_flight": inFlight}))
}

func onRedeliver(m *plugin.Message, ev plugin.Event) plugin.RedeliverVerdict {
	must(m.SetHeader("reason", ev.Reason()))
	switch retry, _ := m.Header("retry"); retry {
	case "delay":
		must(m.SetHeader("delayed", "1"))
		return plugin.Delay(50 * time.Millisecond)
	case "dead":
		return plugin.DeadLetter("conformance dead-letter")
	case "drop":
		return plugin.DropMessage("")
	}
	must(m.SetHeader("attempt-seen", strconv.Itoa(ev.Attempt())))
	return plugin.Redeliver()
}

// must fails the call (the broker applies the failure policy) if a write was refused: the
// conformance test then shows which row.
func must(err error) {
	if err != nil {
		panic(err)
	}
}

func main() {}
