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
		{data: `{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`, err: "maximum messages exceeded"},
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

// An ack subject is read in its old and its new (domain, account hash) forms.
func TestParseAck(t *testing.T) {
	for _, tt := range []struct {
		reply string
		ok    bool
		want  ackInfo
	}{
		{"$JS.ACK.TB.jobs.2.41.7.1700000000000000000.3", true, ackInfo{stream: "TB", consumer: "jobs", delivered: 2, sseq: 41, dseq: 7}},
		{"$JS.ACK.hub.ACCHASH.TB.jobs.1.5.6.1700000000000000000.0", true, ackInfo{stream: "TB", consumer: "jobs", delivered: 1, sseq: 5, dseq: 6}},
		{"$JS.ACK.hub.ACCHASH.TB.jobs.1.5.6.1700000000000000000.0.tok", true, ackInfo{stream: "TB", consumer: "jobs", delivered: 1, sseq: 5, dseq: 6}},
		{"$JS.ACK.hub.ACCHASH.TB.jobs.1.5.6.1700000000000000000.0.tok.more", false, ackInfo{}},
		{"$JS.ACK.TB.jobs.x.41.7.1.3", false, ackInfo{}},
		{"_INBOX.abc", false, ackInfo{}},
		{"", false, ackInfo{}},
	} {
		got, ok := parseAck(tt.reply)
		if ok != tt.ok || got != tt.want {
			t.Errorf("%q: %+v %v, want %+v %v", tt.reply, got, ok, tt.want, tt.ok)
		}
	}
}
