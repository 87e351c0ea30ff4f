package memory

import "github.com/tinybroker/tinybroker/broker"

// SetHooks installs h (nil removes the hooks). Every publish, ack and redelivery reads the
// hooks once, so a swap never runs a message through two chains, or one chain twice.
func (b *Engine) SetHooks(h broker.Hooks) { b.hooks.Set(h) }

func (b *Engine) currentHooks() broker.Hooks { return b.hooks.Load() }

// publishEmits routes messages emitted by hooks. They do not pass through OnPublish, so a
// plugin cannot loop. No lock may be held.
func (b *Engine) publishEmits(ds []broker.Draft) {
	for _, d := range ds {
		if _, err := b.route(d.Topic, d.Payload, d.Headers); err != nil {
			b.log.Warn("message emitted by a plugin refused", "topic", d.Topic, "error", err)
		}
	}
}
