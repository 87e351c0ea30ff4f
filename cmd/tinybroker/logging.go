package main

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
)

// jsonLogger makes hclog's JSON lines readable: hclog encodes a value's JSON as it is, so a
// time.Duration came out in nanoseconds and a broker.Mode as a number. It writes
// durations and other fmt.Stringers as their strings, as the text format does.
type jsonLogger struct{ hclog.Logger }

func readable(args []any) []any {
	var out []any
	for i := 1; i < len(args); i += 2 {
		var s string
		switch v := args[i].(type) {
		case time.Duration:
			s = v.String()
		case error, hclog.Format:
			continue
		case fmt.Stringer:
			s = v.String()
		default:
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = s
	}
	if out == nil {
		return args
	}
	return out
}

func (l jsonLogger) Log(level hclog.Level, msg string, args ...any) {
	l.Logger.Log(level, msg, readable(args)...)
}
func (l jsonLogger) Trace(msg string, args ...any) { l.Logger.Trace(msg, readable(args)...) }
func (l jsonLogger) Debug(msg string, args ...any) { l.Logger.Debug(msg, readable(args)...) }
func (l jsonLogger) Info(msg string, args ...any)  { l.Logger.Info(msg, readable(args)...) }
func (l jsonLogger) Warn(msg string, args ...any)  { l.Logger.Warn(msg, readable(args)...) }
func (l jsonLogger) Error(msg string, args ...any) { l.Logger.Error(msg, readable(args)...) }
func (l jsonLogger) With(args ...any) hclog.Logger {
	return jsonLogger{l.Logger.With(readable(args)...)}
}
func (l jsonLogger) Named(name string) hclog.Logger { return jsonLogger{l.Logger.Named(name)} }
func (l jsonLogger) ResetNamed(name string) hclog.Logger {
	return jsonLogger{l.Logger.ResetNamed(name)}
}

// newLogger is serve's logger.
func newLogger(level, format string, out interface{ Write([]byte) (int, error) }) hclog.Logger {
	log := hclog.New(&hclog.LoggerOptions{
		Name:       "tinybroker",
		Level:      hclog.LevelFromString(level),
		JSONFormat: format == "json",
		Output:     out,
	})
	if format == "json" {
		return jsonLogger{log}
	}
	return log
}
