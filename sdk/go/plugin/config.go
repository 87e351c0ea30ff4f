package plugin

import (
	"errors"
	"strconv"
	"strings"
	"unsafe"
)

// Config returns the plugin's configuration: the config block of its plugin declaration in
// the broker's configuration file, as a map of the caller's own.
func Config() map[string]string {
	text, _ := readString(hostConfig)
	cfg, err := ParseConfig(text)
	if err != nil {
		panic("plugin: the broker's configuration text is malformed: " + err.Error())
	}
	return cfg
}

// ConfigText returns the plugin's configuration as the broker gives it (ABI v1's v1_config):
// lines "key=value\n" sorted by key, escaped as ParseConfig says.
func ConfigText() string {
	text, _ := readString(hostConfig)
	return text
}

// ConfigValue returns the configuration value of key, and whether it is set. It asks the
// broker for that one value the first time, which is cheaper than Config for a lookup or two,
// and keeps it: an instance's configuration never changes, and a filter that compares a
// header with a config value would otherwise ask on every message.
func ConfigValue(key string) (value string, ok bool) {
	for i := range configCache {
		if c := &configCache[i]; c.key == key {
			return c.value, c.ok
		}
	}
	value, ok = readString(func(buf unsafe.Pointer, capacity uint32) int32 {
		return hostConfigGet(key, buf, capacity)
	})
	if len(configCache) < configCached {
		configCache = append(configCache, configEntry{key, value, ok})
	}
	return value, ok
}

// configCache holds the first configCached values ConfigValue read.
var configCache []configEntry

const configCached = 16

type configEntry struct {
	key, value string
	ok         bool
}

// ParseConfig parses the configuration text of ABI v1 (what the host function v1_config
// returns): lines "key=value\n", where in a value a backslash, a newline and a carriage
// return are written \\, \n and \r. A key ends at its line's first '='. The last line's
// newline may be missing. Config uses it; it is exported for tests and tools.
func ParseConfig(text string) (map[string]string, error) {
	cfg := make(map[string]string, strings.Count(text, "\n")+1)
	for lineNo := 1; text != ""; lineNo++ {
		line := text
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = ""
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, errors.New("line " + strconv.Itoa(lineNo) + ": no '=' in " + strconv.Quote(line))
		}
		value, err := unescapeConfigValue(value)
		if err != nil {
			return nil, errors.New("line " + strconv.Itoa(lineNo) + ": key " + strconv.Quote(key) + ": " + err.Error())
		}
		if _, dup := cfg[key]; dup {
			return nil, errors.New("line " + strconv.Itoa(lineNo) + ": key " + strconv.Quote(key) + " appears twice")
		}
		cfg[key] = value
	}
	return cfg, nil
}

func unescapeConfigValue(v string) (string, error) {
	i := strings.IndexByte(v, '\\')
	if i < 0 {
		return v, nil
	}
	var b strings.Builder
	b.Grow(len(v))
	for ; i >= 0; i = strings.IndexByte(v, '\\') {
		b.WriteString(v[:i])
		if i+1 == len(v) {
			return "", errors.New("value ends with a lone backslash")
		}
		switch v[i+1] {
		case '\\':
			b.WriteByte('\\')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		default:
			return "", errors.New("unknown escape \\" + string(v[i+1]) + " in value (only \\\\, \\n and \\r)")
		}
		v = v[i+2:]
	}
	b.WriteString(v)
	return b.String(), nil
}
