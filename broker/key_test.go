package broker

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateKey(t *testing.T) {
	for _, ok := range []string{"", "order-42", "ü ß 漢字", "a b", strings.Repeat("k", maxKeyBytes)} {
		if err := ValidateKey(ok); err != nil {
			t.Errorf("ValidateKey(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"a\nb", "\x00", "tab\t", "\x7f", "\u0085", "\xff", strings.Repeat("k", maxKeyBytes+1)} {
		if err := ValidateKey(bad); !errors.Is(err, ErrInvalidMessage) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidMessage", bad, err)
		}
	}
}

func TestDispatchCheck(t *testing.T) {
	for _, ok := range []Dispatch{{}, {Ordering: OrderingKey}, {Ordering: OrderingGroup}, {FairBy: "key"}, {FairBy: "header:tenant"},
		{Ordering: OrderingKey, FairBy: "header:x-tenant id"}} {
		if err := ok.Check(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
	for bad, want := range map[Dispatch]string{
		{Ordering: 3}:                            "ordering 3 is unknown",
		{FairBy: "tenant"}:                       `fair_by "tenant": want "key"`,
		{FairBy: "header:"}:                      `fair_by "header:"`,
		{FairBy: "header:\xff"}:                  "not valid UTF-8",
		{Ordering: OrderingGroup, FairBy: "key"}: "no turns to take",
	} {
		if err := bad.Check(); !errors.Is(err, ErrInvalidSubscription) || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want ErrInvalidSubscription saying %q", bad, err, want)
		}
	}
}

func TestDispatchKeys(t *testing.T) {
	h := MakeHeaders(map[string]string{"tenant": "acme"})
	for _, c := range []struct {
		d       Dispatch
		key     string
		order   string
		ordered bool
		tenant  string
	}{
		{Dispatch{}, "k", "", false, ""},
		{Dispatch{Ordering: OrderingKey}, "k", "k", true, ""},
		{Dispatch{Ordering: OrderingKey}, "", "", false, ""},
		{Dispatch{Ordering: OrderingGroup}, "k", "", true, ""},
		{Dispatch{FairBy: "key"}, "k", "", false, "k"},
		{Dispatch{FairBy: "header:tenant"}, "k", "", false, "acme"},
		{Dispatch{FairBy: "header:other"}, "k", "", false, ""},
	} {
		order, ordered := c.d.OrderKey(c.key)
		if order != c.order || ordered != c.ordered || c.d.Tenant(c.key, h) != c.tenant {
			t.Errorf("%+v key %q: order %q %v tenant %q, want %q %v %q", c.d, c.key, order, ordered, c.d.Tenant(c.key, h), c.order, c.ordered, c.tenant)
		}
	}
}
