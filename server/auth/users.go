// Package auth is tinybroker's security at the edge, in front of any engine: users and how
// they prove who they are (a token checked against a bcrypt hash, or a client certificate),
// what each may do (Rules), per-user limits, the audit log of refusals, and the server's
// TLS configuration, re-read on reload. The server asks it before it hands a request to the
// engine; the engine only sees a user's broker.Quota. See RATIONALE.md, "Security".
package auth

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

// User is a user of the configuration file's user blocks.
type User struct {
	Name string
	// TokenHash is the bcrypt hash of the user's token (tinybroker passwd makes one). The
	// client sends "authorization: Bearer NAME:TOKEN".
	TokenHash string
	// Certificate identifies the user by a verified client certificate: "CN=<common name>",
	// "DNS:<name>", "URI:<uri>" or "EMAIL:<address>" (the subject's common name, or one of
	// its subject alternative names).
	Certificate string
	// Admin may call Stats and Reload.
	Admin bool
	// Publish: the topics the user may publish to. Subscribe: the patterns the user may
	// subscribe to. Groups: the consumer groups, by subscription_id, the user may join (and
	// so ack, nack and touch their messages).
	Publish, Subscribe, Groups Rules
	Limits                     Limits
}

// Limits bound what one user may hold, on top of the broker-wide limits. Zero: no bound.
type Limits struct {
	MaxConnections   int   // client connections on which the user made a call, open at once
	MaxStreams       int   // Subscribe and PublishStream streams open at once
	MaxSubscriptions int   // subscriptions open at once, over all the user's streams
	MaxGroups        int   // consumer groups the user created that exist now
	MaxQueuedBytes   int64 // bytes the groups the user created hold in all
}

// Check reports what is wrong with u, naming the setting.
func (u User) Check() error {
	if u.Name == "" {
		return errors.New("a user needs a name")
	}
	if strings.ContainsAny(u.Name, ": \t\r\n") {
		return fmt.Errorf("user %q: a user name may not contain ':' or whitespace (tokens are sent as NAME:TOKEN)", u.Name)
	}
	if u.TokenHash == "" && u.Certificate == "" {
		return fmt.Errorf("user %q has no way to authenticate: set token_hash (from `tinybroker passwd`) or certificate (e.g. \"CN=%s\")", u.Name, u.Name)
	}
	if u.TokenHash != "" {
		if _, err := bcrypt.Cost([]byte(u.TokenHash)); err != nil {
			return fmt.Errorf("user %q: token_hash is not a bcrypt hash (%v); make one with `tinybroker passwd`", u.Name, err)
		}
	}
	if u.Certificate != "" {
		if err := CheckCertificateName(u.Certificate); err != nil {
			return fmt.Errorf("user %q: %w", u.Name, err)
		}
	}
	for _, r := range []struct {
		name  string
		rules Rules
	}{{"publish", u.Publish}, {"subscribe", u.Subscribe}, {"groups", u.Groups}} {
		if err := r.rules.Check(); err != nil {
			return fmt.Errorf("user %q: %s: %w", u.Name, r.name, err)
		}
	}
	return nil
}

// CheckCertificateName reports whether name is a certificate identity a user can have.
func CheckCertificateName(name string) error {
	for _, prefix := range []string{"CN=", "DNS:", "URI:", "EMAIL:"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok && rest != "" {
			return nil
		}
	}
	return fmt.Errorf("certificate %q: write \"CN=<common name>\", \"DNS:<name>\", \"URI:<uri>\" or \"EMAIL:<address>\"", name)
}

// HashToken returns the bcrypt hash of a token, for a user's token_hash.
func HashToken(token []byte) (string, error) {
	if len(token) == 0 {
		return "", errors.New("the token is empty")
	}
	if len(token) > 72 {
		return "", errors.New("the token is longer than 72 bytes, bcrypt's limit")
	}
	h, err := bcrypt.GenerateFromPassword(token, bcrypt.DefaultCost)
	return string(h), err
}

// UserState is a user of the configuration in force (its token hash left out) and what it
// holds now.
type UserState struct {
	User
	HasToken                            bool // it may authenticate with a token
	Connections, Streams, Subscriptions int64
	GroupsHeld                          int   // with group limits only
	QueuedBytes                         int64 // with group limits only
}

// Users returns the users in force, sorted by name, for the admin API's ListUsers.
func (a *Authenticator) Users() []UserState {
	if a == nil {
		return nil
	}
	set := a.set.Load()
	out := make([]UserState, 0, len(set.users))
	for _, p := range set.users {
		st := UserState{User: p.User, HasToken: p.TokenHash != "", Connections: p.conns.Load(), Streams: p.streams.Load(), Subscriptions: p.subs.Load()}
		st.TokenHash = ""
		if p.quota != nil {
			st.GroupsHeld, st.QueuedBytes = p.quota.Groups(), p.quota.Bytes()
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(x, y UserState) int { return strings.Compare(x.Name, y.Name) })
	return out
}
