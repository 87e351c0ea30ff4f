package auth

import (
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

func TestHashToken(t *testing.T) {
	h, err := HashToken([]byte("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	if bcrypt.CompareHashAndPassword([]byte(h), []byte("s3cret")) != nil || bcrypt.CompareHashAndPassword([]byte(h), []byte("other")) == nil {
		t.Fatal("the hash does not verify its token only")
	}
	if _, err := HashToken(nil); err == nil {
		t.Fatal("an empty token was hashed")
	}
	if _, err := HashToken(make([]byte, 73)); err == nil {
		t.Fatal("a token past bcrypt's 72 bytes was hashed")
	}
}

func TestUserCheck(t *testing.T) {
	for _, c := range []struct {
		u    User
		want string
	}{
		{User{Name: "a"}, "no way to authenticate"},
		{User{Name: "a:b", Certificate: "CN=a"}, "may not contain ':'"},
		{User{Name: "a", TokenHash: "plain"}, "not a bcrypt hash"},
		{User{Name: "a", Certificate: "alice"}, `write "CN=<common name>"`},
		{User{Name: "a", Certificate: "CN=a", Publish: Rules{Allow: []string{"a.>.b"}}}, "publish"},
	} {
		if err := c.u.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%+v) = %v, want %q", c.u, err, c.want)
		}
	}
	if _, err := New(Options{Users: []User{{Name: "a", Certificate: "CN=x"}, {Name: "b", Certificate: "CN=x"}}}); err == nil {
		t.Error("two users with one certificate accepted")
	}
}
