package bridge

import "testing"

func TestRegister(t *testing.T) {
	defer func() { Handled, Misuse = [NumHooks]bool{}, "" }()
	if !Register(Ack, false) || !Handled[Ack] || Misuse != "" {
		t.Fatal("a first registration was not recorded")
	}
	if Register(Ack, false) || Misuse != "onack.Handle was called twice" {
		t.Fatalf("second registration: Misuse = %q", Misuse)
	}
	if Register(Publish, true) || Handled[Publish] || Misuse != "onack.Handle was called twice" {
		t.Fatalf("nil after twice: Misuse = %q (the first mistake must be kept)", Misuse)
	}
	Misuse = ""
	if Register(Redeliver, true) || Misuse != "onredeliver.Handle was called with a nil function" {
		t.Fatalf("nil: Misuse = %q", Misuse)
	}
}
