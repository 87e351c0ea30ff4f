package memory

import "github.com/tinybroker/tinybroker/broker"

// SetHooks installs h (nil removes the hooks). Every publish, ack and redelivery reads the
// hooks once, so a swap never runs a message through two chains, or one chain twice.
func (b *Engine) SetHooks(h broker.Hooks) { b.hooks.Set(h) }

func (b *Engine) currentHooks() broker.Hooks { return b.hooks.Load() }
