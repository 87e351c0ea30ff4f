// Command retry-backoff is a tinybroker plugin that replaces a consumer group's immediate
// redelivery with exponential backoff: the delivery attempt n that failed is retried after
// base × 2^(n-1), capped at max_delay; after max_attempts attempts the message is
// dead-lettered.
//
// Configuration (all optional): base (a Go duration, default "100ms"), max_delay (default
// "30s"), max_attempts (default 5).
package main

import (
	"errors"
	"strconv"
	"time"

	"github.com/tinybroker/tinybroker/sdk/go/plugin"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/onredeliver"
)

// policy is the plugin's configuration.
type policy struct {
	base        time.Duration
	maxDelay    time.Duration
	maxAttempts int
}

var pol = policy{base: 100 * time.Millisecond, maxDelay: 30 * time.Second, maxAttempts: 5}

func init() {
	plugin.Init(configure)
	onredeliver.Handle(retry)
}

func configure(cfg map[string]string) error {
	p, err := parsePolicy(cfg)
	if err != nil {
		return errors.New("retry-backoff: " + err.Error())
	}
	pol = p
	return nil
}

func parsePolicy(cfg map[string]string) (policy, error) {
	p := policy{base: 100 * time.Millisecond, maxDelay: 30 * time.Second, maxAttempts: 5}
	duration := func(key string, d *time.Duration) error {
		v, ok := cfg[key]
		if !ok {
			return nil
		}
		parsed, err := time.ParseDuration(v)
		if err != nil || parsed <= 0 {
			return errors.New(key + " = " + strconv.Quote(v) + `: want a positive duration such as "250ms" or "1m"`)
		}
		*d = parsed
		return nil
	}
	if err := duration("base", &p.base); err != nil {
		return p, err
	}
	if err := duration("max_delay", &p.maxDelay); err != nil {
		return p, err
	}
	if v, ok := cfg["max_attempts"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return p, errors.New("max_attempts = " + strconv.Quote(v) + ": want a whole number of at least 1")
		}
		p.maxAttempts = n
	}
	if p.maxDelay < p.base {
		return p, errors.New("max_delay " + p.maxDelay.String() + " is shorter than base " + p.base.String())
	}
	return p, nil
}

// delay returns the backoff after the failed attempt n (1 = first): base × 2^(n-1), capped
// at maxDelay.
func (p policy) delay(n int) time.Duration {
	d := p.base
	for i := 1; i < n; i++ {
		if d >= p.maxDelay/2 {
			return p.maxDelay
		}
		d *= 2
	}
	return min(d, p.maxDelay)
}

func retry(m *plugin.Message, ev plugin.Event) plugin.RedeliverVerdict {
	n := ev.Attempt()
	if n >= pol.maxAttempts {
		return plugin.DeadLetter("retry-backoff: gave up after " + strconv.Itoa(n) + " attempts; last failure: " + ev.Reason())
	}
	return plugin.Delay(pol.delay(n))
}

func main() {}
