package plugin

import (
	"time"
	"unsafe"

	"github.com/tinybroker/tinybroker/internal/abi"
)

// The plugin's key-value store (docs/ABI.md, "State"): shared by every instance of the
// plugin, where a package variable is the instance's own. It works in every hook and in
// Init, and a write takes effect at once, whatever the hook then returns.

// KVGet returns the value of key in the plugin's store, and whether it is there (an expired
// entry is not). The slice is the caller's.
func KVGet(key string) (value []byte, ok bool) {
	return readBytes(func(buf unsafe.Pointer, capacity uint32) int32 {
		return hostKVGet(key, buf, capacity)
	})
}

// KVSet sets key to value, expiring after ttl (0: never; under a millisecond counts as one).
// ErrInvalid: an empty key or a negative ttl; ErrTooLarge: a key over 256 bytes or a value
// over the plugin's kv_max_value_bytes; ErrLimit: the store would pass its kv_max_bytes.
func KVSet(key string, value []byte, ttl time.Duration) error {
	if st := hostKVSet(key, bytesPtr(value), uint32(len(value)), ttlMillis(ttl)); st != abi.StatusOK {
		return &StatusError{Op: "KVSet " + quoteShort(key), Status: st}
	}
	return nil
}

// KVCompareAndSet sets key to value, as KVSet does, only if its value is old now; an empty
// old means the key must be absent. Otherwise it returns ErrConflict and changes nothing:
// read the value again and retry. It is how the instances of a plugin update one value
// without losing each other's writes:
//
//	for {
//		old, _ := plugin.KVGet("count")
//		err := plugin.KVCompareAndSet("count", old, next(old), 0)
//		if !errors.Is(err, plugin.ErrConflict) {
//			return err
//		}
//	}
func KVCompareAndSet(key string, old, value []byte, ttl time.Duration) error {
	st := hostKVCas(key, bytesPtr(old), uint32(len(old)), bytesPtr(value), uint32(len(value)), ttlMillis(ttl))
	if st != abi.StatusOK {
		return &StatusError{Op: "KVCompareAndSet " + quoteShort(key), Status: st}
	}
	return nil
}

// KVDelete removes key from the plugin's store; a key that is absent is not an error.
func KVDelete(key string) error {
	if st := hostKVDelete(key); st != abi.StatusOK {
		return &StatusError{Op: "KVDelete " + quoteShort(key), Status: st}
	}
	return nil
}

// ttlMillis is ttl as the ABI's ttl_ms: a positive ttl under a millisecond is one, not 0
// (which would be "never").
func ttlMillis(ttl time.Duration) int64 {
	if ttl > 0 && ttl < time.Millisecond {
		return 1
	}
	return ttl.Milliseconds()
}
