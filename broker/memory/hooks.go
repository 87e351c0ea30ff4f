package memory

import (
	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/internal/publishing"
)

// SetHooks installs h (nil removes the hooks). Every publish, ack and redelivery reads the
// hooks once, so a swap never runs a message through two chains, or one chain twice.
func (b *Engine) SetHooks(h broker.Hooks) {
	b.hooks.Set(h)
	publishing.Start(h, b.emitTicked)
}

// emitTicked publishes what hooks emitted on their own time (publishing.Start), unless the
// engine is shutting down: a chain still ticking then has nowhere to publish.
func (b *Engine) emitTicked(ds []broker.Draft) {
	if !b.closing.Load() {
		b.emit(ds)
	}
}

func (b *Engine) currentHooks() broker.Hooks { return b.hooks.Load() }
