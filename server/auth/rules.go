package auth

import (
	"fmt"
	"strings"

	"github.com/tinybroker/tinybroker/broker"
	"github.com/tinybroker/tinybroker/broker/deadletter"
)

// Rules are one permission of a user, NATS-style: patterns in the topic syntax that allow,
// and patterns that deny. Nothing is allowed unless an Allow pattern allows it, and a Deny
// pattern overrides every Allow. The zero Rules allow nothing.
type Rules struct {
	Allow, Deny []string
}

// Check reports whether every pattern is valid, naming the first that is not.
func (r Rules) Check() error {
	for _, p := range append(append([]string(nil), r.Allow...), r.Deny...) {
		if err := broker.Pattern(p).Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Topic reports whether topic (to publish to, or the subscription_id of a consumer group) is
// allowed: some Allow pattern matches it and no Deny pattern does. When it is not, why names
// the rule that decided, for the caller's error.
func (r Rules) Topic(topic string) (ok bool, why string) {
	return r.decide(topic, broker.Pattern.Match, broker.Pattern.Match, "it matches deny %q")
}

// Pattern reports whether a subscription to pattern is allowed: some Allow pattern covers
// every topic it matches, and no Deny pattern matches any of them. This is conservative: a
// subscription to ">" is refused to a user denied "secret.>" even though the broker could
// deliver it everything else (NATS subscribes it and filters at delivery; see RATIONALE.md,
// "Security").
func (r Rules) Pattern(pattern string) (ok bool, why string) {
	return r.decide(pattern, broker.Pattern.Overlaps, broker.Pattern.Covers, "it can match topics of deny %q")
}

// decide allows s unless denies(d, s) for a Deny pattern d (why: denied, formatted with d),
// and if allows(broker.Pattern(a), s) for an Allow pattern a.
func (r Rules) decide(s string, denies, allows func(rule broker.Pattern, s string) bool, denied string) (ok bool, why string) {
	for _, d := range r.Deny {
		if denies(broker.Pattern(d), s) {
			return false, fmt.Sprintf(denied, d)
		}
	}
	for _, a := range r.Allow {
		if allows(broker.Pattern(a), s) {
			return true, ""
		}
	}
	return false, r.noAllow()
}

func (r Rules) noAllow() string {
	if len(r.Allow) == 0 {
		return "the user has no allow rule for it"
	}
	return fmt.Sprintf("no allow pattern covers it (allow [%s])", quoteAll(r.Allow))
}

func quoteAll(ps []string) string {
	q := make([]string, len(ps))
	for i, p := range ps {
		q[i] = fmt.Sprintf("%q", p)
	}
	return strings.Join(q, ", ")
}

// balanced checks what an open of a consumer group names besides its patterns: its
// subscription_id and its consumer_group, which the groups rules must both allow (plugins
// select groups by consumer_group, and a name is held by one group at a time), and an
// explicit dead_letter_topic, which the broker publishes to on the group's behalf and so
// needs the caller's publish rules. The default dead-letter topic, "dlq.<subscription_id>",
// derives from a name the groups rules allowed, and needs nothing more. See RATIONALE.md,
// "Threat model".
func (c *Caller) balanced(o *broker.SubscribeOptions) error {
	id := o.ID
	if id == "" {
		id = o.Group
	}
	if err := c.Join(id); err != nil {
		return err
	}
	if o.Group != "" && o.Group != id {
		if err := c.check(c.p.Groups.Topic, "groups", "name consumer_group", o.Group); err != nil {
			return err
		}
	}
	if t := o.DeadLetterTopic; t != "" && t != deadletter.DefaultTopic(id) {
		if ok, why := c.p.Publish.Topic(t); !ok {
			return c.deny(fmt.Sprintf("set dead_letter_topic %q", t), fmt.Sprintf("user %q publish rules", c.p.Name),
				why+"; the broker publishes the group's dead letters there on behalf of whoever names it, so it needs the right to publish there: leave dead_letter_topic empty for the default \""+deadletter.DefaultTopic(id)+"\"")
		}
	}
	return nil
}
