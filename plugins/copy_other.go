//go:build !amd64 && !arm64

package plugins

import "unsafe"

// copyShort copies nothing where unaligned loads and stores may fault: the caller copies.
func copyShort(r unsafe.Pointer, pos uint32, s string) bool { return false }
