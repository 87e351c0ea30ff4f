//go:build !amd64 && !arm64

package plugins

// copyShort copies nothing where unaligned loads and stores may fault: the caller copies.
func copyShort(b []byte, pos uint32, s string) bool { return false }
