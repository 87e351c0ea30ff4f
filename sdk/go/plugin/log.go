package plugin

import "fmt"

// A Level is the severity of a log line.
type Level int32

// Log levels, as the broker's logger has them.
const (
	LevelTrace Level = 0
	LevelDebug Level = 1
	LevelInfo  Level = 2
	LevelWarn  Level = 3
	LevelError Level = 4
)

// Log writes msg to the broker's log at level, tagged with the plugin's name. Whether the
// line appears depends on the broker's log_level. A plugin's stdout and stderr are
// discarded: Log is the only way to be heard.
func Log(level Level, msg string) {
	hostLog(int32(level), msg)
}

// Logf is Log with fmt.Sprintf formatting.
func Logf(level Level, format string, args ...any) {
	hostLog(int32(level), fmt.Sprintf(format, args...))
}
