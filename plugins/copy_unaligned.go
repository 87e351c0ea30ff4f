//go:build amd64 || arm64

package plugins

import "unsafe"

// copyShort copies s to r+pos, if s is 4 to 16 bytes long, and reports whether it did: two
// loads and two stores of 8 or 4 bytes that may overlap. For such a value (a topic, a
// header's name or value, most often) a call to memmove, with the registers its caller saves,
// costs several times the copy, and the inbox is written before every plugin call. The caller
// has checked that r+pos has room for s. Only where unaligned loads and stores are allowed
// (copy_other.go elsewhere).
func copyShort(r unsafe.Pointer, pos uint32, s string) bool {
	n := uintptr(len(s))
	if n-4 > 12 {
		return false
	}
	p := unsafe.Add(r, pos)
	src := unsafe.Pointer(unsafe.StringData(s))
	if n >= 8 {
		*(*uint64)(p) = *(*uint64)(src)
		*(*uint64)(unsafe.Add(p, n-8)) = *(*uint64)(unsafe.Add(src, n-8))
	} else {
		*(*uint32)(p) = *(*uint32)(src)
		*(*uint32)(unsafe.Add(p, n-4)) = *(*uint32)(unsafe.Add(src, n-4))
	}
	return true
}
