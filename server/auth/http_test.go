package auth

import (
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestHTTP(t *testing.T) {
	off, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := off.HTTP(httptest.NewRequest("GET", "/metrics", nil)); c != nil || err != nil {
		t.Fatalf("without users: %v %v; want nil, nil", c, err)
	}

	hash, err := HashToken([]byte("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Users: []User{{Name: "ops", TokenHash: hash, Admin: true}, {Name: "app", TokenHash: hash}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		bearer      string
		user, token string // basic
		want        string // user, or "" for Unauthenticated
	}{
		{name: "bearer", bearer: "Bearer ops:s3cret", want: "ops"},
		{name: "basic", user: "ops", token: "s3cret", want: "ops"},
		{name: "basic, not an admin", user: "app", token: "s3cret", want: "app"},
		{name: "wrong token", bearer: "Bearer ops:nope"},
		{name: "basic, wrong token", user: "ops", token: "nope"},
		{name: "no credentials"},
	} {
		r := httptest.NewRequest("GET", "/metrics", nil)
		if tc.bearer != "" {
			r.Header.Set("Authorization", tc.bearer)
		}
		if tc.user != "" {
			r.SetBasicAuth(tc.user, tc.token)
		}
		c, err := a.HTTP(r)
		if tc.want == "" {
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s: %v %v; want Unauthenticated", tc.name, c, err)
			}
			continue
		}
		if err != nil || c.Name() != tc.want {
			t.Errorf("%s: %v %v; want user %s", tc.name, c.Name(), err, tc.want)
			continue
		}
		if adminErr := c.Admin("the HTTP listener"); (adminErr == nil) != (tc.want == "ops") {
			t.Errorf("%s: Admin = %v", tc.name, adminErr)
		}
	}
	if a.TLSConfig() != nil {
		t.Error("TLSConfig without TLS files is not nil")
	}
}
