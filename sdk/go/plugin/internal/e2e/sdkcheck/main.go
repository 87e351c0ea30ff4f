// Command sdkcheck is a test plugin that exercises the whole Go SDK against the broker's
// host: every hook, the Message view, errors, emits, configuration, logging and panics. What
// it does depends on the topic of the message; it reports what it saw in a "report" header.
package main

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/tinybroker/tinybroker/sdk/go/plugin"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/onack"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/onpublish"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/onredeliver"
)

func init() {
	plugin.Init(func(cfg map[string]string) error {
		if cfg["refuse"] != "" {
			return errors.New("sdkcheck refuses: " + cfg["refuse"])
		}
		plugin.Log(plugin.LevelInfo, "sdkcheck: Init saw "+strconv.Itoa(len(cfg))+" keys")
		return nil
	})
	onpublish.Handle(publish)
	onack.Handle(ack)
	onredeliver.Handle(redeliver)
}

// kept is an on_publish Message kept past its call, which the SDK must refuse to use in
// another hook.
var kept *plugin.Message

// render writes headers as "k=v,..." sorted, values longer than 16 bytes as k#len.
func render(h map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(h)) {
		if len(h[k]) > 16 {
			parts = append(parts, k+"#"+strconv.Itoa(len(h[k])))
		} else {
			parts = append(parts, k+"="+h[k])
		}
	}
	return strings.Join(parts, ",")
}

func errName(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, plugin.ErrInvalid):
		return "invalid"
	case errors.Is(err, plugin.ErrTooLarge):
		return "too_large"
	case errors.Is(err, plugin.ErrNotAllowed):
		return "not_allowed"
	case errors.Is(err, plugin.ErrLimit):
		return "limit"
	}
	return "other:" + err.Error()
}

func publish(m *plugin.Message) plugin.Verdict {
	var r []string
	report := func(s ...string) { r = append(r, s...) }
	switch m.Topic() {
	case "sdk.view":
		report("before=" + render(m.Headers()))
		report("set=" + errName(m.SetHeader("c", "3")))
		report("del=" + errName(m.DelHeader("a")))
		report("after=" + render(m.Headers()))
		v, ok := m.Header("a")
		report("a=" + v + "/" + strconv.FormatBool(ok))
		v, ok = m.Header("c")
		report("c=" + v + "/" + strconv.FormatBool(ok))
		v, ok = m.Header("big")
		report("big=" + strconv.Itoa(len(v)) + "/" + strconv.FormatBool(ok))
		_, ok = m.Header("missing")
		report("missing=" + strconv.FormatBool(ok))
		report("id=" + m.ID())
		report("settopic=" + errName(m.SetTopic("sdk.view.done")))
		report("topic=" + m.Topic())
	case "sdk.big":
		p := m.Payload()
		out := append(slices.Clone(p), '!')
		report("len=" + strconv.Itoa(len(p)))
		report("setpayload=" + errName(m.SetPayload(out)))
		report("same=" + strconv.FormatBool(&m.Payload()[0] == &out[0]))
	case "sdk.errors":
		report("badtopic=" + errName(m.SetTopic("bad topic")))
		report("emptyheader=" + errName(m.SetHeader("", "x")))
		report("toolarge=" + errName(m.SetPayload(make([]byte, 1<<20+1))))
		report("emitemptyheader=" + errName(plugin.Emit("sdk.emitted", nil, map[string]string{"": "x"})))
		report("emitbadtopic=" + errName(plugin.Emit("bad topic", nil, nil)))
		for i := range 4 { // the test sets max_emits = 3
			report("emit" + strconv.Itoa(i) + "=" + errName(plugin.Emit("sdk.emitted", []byte(strconv.Itoa(i)), map[string]string{"n": strconv.Itoa(i)})))
		}
		var se *plugin.StatusError
		if err := m.SetTopic("bad topic"); errors.As(err, &se) {
			report("status=" + strconv.Itoa(int(se.Status)) + " " + err.Error())
		}
	case "sdk.key":
		report("key=" + m.Key())
		tenant, _ := m.Header("tenant")
		report("set=" + errName(m.SetKey(tenant)))
		report("now=" + m.Key())
		report("bad=" + errName(m.SetKey("a\nb")))
		report("long=" + errName(m.SetKey(strings.Repeat("k", 257))))
		report("after=" + m.Key())
		report("emit=" + errName(plugin.EmitKeyed("sdk.emitted", "e-"+tenant, []byte(tenant), nil)))
		report("emitbad=" + errName(plugin.EmitKeyed("sdk.emitted", "a\x00", nil, nil)))
	case "sdk.metric":
		g, err := plugin.NewGauge("sdk_gauge", "A gauge sdkcheck sets.", "")
		report("define=" + errName(err))
		report("add=" + errName(g.Add(5)))
		report("set=" + errName(g.Set(7)))
		tenant, _ := m.Header("tenant")
		l, err := plugin.NewGauge("sdk_gauge_by_tenant", "A labelled gauge sdkcheck sets.", "tenant")
		report("definelabelled=" + errName(err))
		report("setlabelled=" + errName(l.With(tenant).Set(int64(len(tenant)))))
		_, err = plugin.NewCounter("sdk_gauge", "A gauge sdkcheck sets.", "")
		report("redefine=" + errName(err))
	case "sdk.config":
		report("config=" + strings.NewReplacer("\n", `\n`, "\\", `\\`).Replace(render(plugin.Config())))
		v, ok := plugin.ConfigValue("multi")
		report("multi=" + strconv.Quote(v) + "/" + strconv.FormatBool(ok))
		_, ok = plugin.ConfigValue("nope")
		report("nope=" + strconv.FormatBool(ok))
	case "sdk.now":
		report(strconv.FormatInt(plugin.Now().UnixNano(), 10))
	case "sdk.log":
		plugin.Logf(plugin.LevelWarn, "sdkcheck says %s %d", "hello", 42)
	case "sdk.drop":
		return plugin.Drop("dropped by sdkcheck")
	case "sdk.reject":
		return plugin.Reject(plugin.PermissionDenied, "rejected by sdkcheck")
	case "sdk.panic":
		panic("sdkcheck panics on purpose")
	case "sdk.keep":
		kept = m
	default:
		return plugin.Pass()
	}
	if len(r) > 0 {
		if err := m.SetHeader("report", strings.Join(r, ";")); err != nil {
			panic(err)
		}
	}
	return plugin.Pass()
}

func ack(m *plugin.Message, ev plugin.Event) {
	if k := kept; k != nil {
		kept = nil
		_ = k.Topic() // panics
	}
	r := []string{
		"group=" + ev.Group(),
		"sub=" + ev.Subscription(),
		"attempt=" + strconv.Itoa(ev.Attempt()),
		"inflight=" + strconv.FormatBool(ev.InFlight() > 0),
		"id=" + m.ID(),
		"topic=" + m.Topic(),
		"payload=" + string(m.Payload()),
		"setheader=" + errName(m.SetHeader("x", "y")),
		"settopic=" + errName(m.SetTopic("x")),
		"key=" + m.Key(),
		"setkey=" + errName(m.SetKey("x")),
	}
	if err := plugin.Emit("sdk.acked", []byte(strings.Join(r, ";")), nil); err != nil {
		panic(err)
	}
}

func redeliver(m *plugin.Message, ev plugin.Event) plugin.RedeliverVerdict {
	if ev.Attempt() == 1 {
		r := []string{
			"reason=" + ev.Reason(),
			"setpayload=" + errName(m.SetPayload([]byte("x"))),
			"settopic=" + errName(m.SetTopic("x")),
			"id=" + strconv.FormatBool(m.ID() != ""),
		}
		if err := m.SetHeader("report", strings.Join(r, ";")); err != nil {
			panic(err)
		}
		return plugin.Delay(30e6) // 30ms
	}
	return plugin.DeadLetter("sdkcheck gave up after attempt " + strconv.Itoa(ev.Attempt()))
}

func main() {}
