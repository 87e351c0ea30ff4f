package jetstream

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// A PubAck is read without encoding/json: its sequence, whatever comes around it; an error
// or a status says why the message was not stored.
func TestParsePubAck(t *testing.T) {
	for _, tt := range []struct {
		data   string
		status string
		seq    uint64
		err    string
	}{
		{data: `{"stream":"TB","seq":42}`, seq: 42},
		{data: `{"stream":"TB","domain":"hub","seq":18446744073709551615,"duplicate":true}`, seq: 18446744073709551615},
		{data: `{"stream":"TB", "seq":7}`, seq: 7},
		{data: `{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`, err: "maximum messages exceeded (503)"},
		{status: "503", err: "no JetStream stream answered"},
		{status: "408", err: "status 408"},
		{data: `{"stream":"TB"}`, err: "without a sequence"},
		{data: `{"stream":"TB","seq":0}`, err: "without a sequence"},
	} {
		m := &nats.Msg{Data: []byte(tt.data), Header: nats.Header{}}
		if tt.status != "" {
			m.Header.Set("Status", tt.status)
		}
		seq, err := parsePubAck(m)
		if tt.err == "" && (err != nil || seq != tt.seq) {
			t.Errorf("%s: %d %v, want %d", tt.data, seq, err, tt.seq)
		}
		if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s %s: %d %v, want an error with %q", tt.data, tt.status, seq, err, tt.err)
		}
	}
}
