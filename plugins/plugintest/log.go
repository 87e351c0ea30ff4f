package plugintest

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// failedMsg is the host's log message for a failed call (plugins/host.go); its "error"
// value says why.
const failedMsg = "plugin call failed; instance discarded"

// sink receives the log entries of a Plugin's host: it keeps (and passes on) those at its
// level or above, and the reason of the last failed call.
type sink struct {
	level hclog.Level
	out   func(string)

	mu       sync.Mutex
	kept     []string
	failures int    // failed calls logged
	lastFail string // the last one's error
}

var _ hclog.SinkAdapter = (*sink)(nil)

// Accept implements hclog.SinkAdapter.
func (s *sink) Accept(name string, level hclog.Level, msg string, args ...any) {
	s.mu.Lock()
	if msg == failedMsg {
		s.failures++
		s.lastFail = ""
		for i := 0; i+1 < len(args); i += 2 {
			if k, _ := args[i].(string); k == "error" {
				s.lastFail = fmt.Sprint(args[i+1])
			}
		}
	}
	if level < s.level {
		s.mu.Unlock()
		return
	}
	line := format(name, level, msg, args)
	s.kept = append(s.kept, line)
	out := s.out
	s.mu.Unlock()
	if out != nil {
		out(line)
	}
}

// markFailure returns a mark for failureSince.
func (s *sink) markFailure() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failures
}

// failureSince returns the reason of the last call that failed after mark was taken, or "".
func (s *sink) failureSince(mark int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failures == mark {
		return ""
	}
	return s.lastFail
}

func (s *sink) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.kept...)
}

// format writes an entry as hclog does, without the time: "[WARN]  name: msg: k=v k=v".
// A value of several lines follows on its own lines, indented.
func format(name string, level hclog.Level, msg string, args []any) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-7s %s: %s", "["+strings.ToUpper(level.String())+"]", name, msg)
	var long []string
	colon := false
	for i := 0; i < len(args); i += 2 {
		k := fmt.Sprint(args[i])
		v := "<missing>"
		if i+1 < len(args) {
			v = fmt.Sprint(args[i+1])
		}
		if strings.Contains(v, "\n") {
			long = append(long, k, v)
			continue
		}
		if !colon {
			b.WriteByte(':')
			colon = true
		}
		b.WriteByte(' ')
		b.WriteString(k)
		b.WriteByte('=')
		if v == "" || strings.ContainsAny(v, " \t\"=") {
			v = strconv.Quote(v)
		}
		b.WriteString(v)
	}
	for i := 0; i < len(long); i += 2 {
		fmt.Fprintf(&b, "\n  %s=", long[i])
		for l := range strings.SplitSeq(strings.TrimRight(long[i+1], "\n"), "\n") {
			b.WriteString("\n  | ")
			b.WriteString(l)
		}
	}
	return b.String()
}
