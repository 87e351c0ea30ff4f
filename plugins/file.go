package plugins

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// DefaultMaxPluginBytes is the largest .wasm file loaded unless HostOptions say otherwise:
// the Go examples are 2-4 MiB, and a file of 1 GiB used to be read whole before anything
// looked at it.
const DefaultMaxPluginBytes = 64 << 20

// moduleReadTimeout bounds the reading of one .wasm file: a file on a stuck network file
// system must not hold up a start or a reload forever.
const moduleReadTimeout = 10 * time.Second

// wasmMagic starts every WebAssembly binary module: "\0asm".
var wasmMagic = []byte{0x00, 'a', 's', 'm'}

// readModule reads the .wasm file at path. Only a regular file of at most maxBytes that
// starts with the WebAssembly magic number is read whole:
//
//   - it is opened without blocking (a FIFO would otherwise wait for a writer, holding up
//     the start, and SIGTERM, forever) and refused unless it is a regular file (/dev/zero,
//     a FIFO, a socket, a directory);
//   - its size is checked before it is read, and the reading stops past maxBytes (a file
//     that grows meanwhile);
//   - its first 8 bytes are read first, and a file that is not WebAssembly is refused;
//   - reading stops when ctx is done or after moduleReadTimeout, checked between reads of
//     1 MiB (one read that hangs in the kernel cannot be interrupted).
func readModule(ctx context.Context, path string, maxBytes int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is %s, not a regular file; path must name a .wasm file", path, fileKind(fi.Mode()))
	}
	if fi.Size() > maxBytes {
		return nil, fmt.Errorf("%s is %d bytes, over the limit of %d (limits { max_plugin_bytes }); is it the right file?", path, fi.Size(), maxBytes)
	}
	deadline := time.Now().Add(moduleReadTimeout)
	buf := make([]byte, 8, max(8, min(fi.Size(), maxBytes)+1))
	if n, err := io.ReadFull(f, buf); err != nil {
		return nil, fmt.Errorf("%s is not a WebAssembly module: %d bytes long, shorter than a module's 8-byte header", path, n)
	}
	if !bytes.Equal(buf[:4], wasmMagic) {
		return nil, fmt.Errorf("%s is not a WebAssembly module: it starts with % x, not the magic number 00 61 73 6d (\"\\0asm\"); build plugins with GOOS=wasip1 GOARCH=wasm (docs/ABI.md)", path, buf[:4])
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):min(cap(buf), len(buf)+1<<20)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > maxBytes {
			return nil, fmt.Errorf("%s grew past the limit of %d bytes (limits { max_plugin_bytes }) while it was read", path, maxBytes)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			// Called off, not slow: say why (serve: "terminated signal received" when a SIGTERM
			// cuts a reload short; the Reload RPC's caller gone).
			return nil, fmt.Errorf("reading %s was called off %d bytes in: %w", path, len(buf), context.Cause(ctx))
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("reading %s took longer than %v; it was read %d bytes in", path, moduleReadTimeout, len(buf))
		}
	}
}

// fileKind names the kind of a file that is not regular, for an error message.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file (" + m.Type().String() + ")"
}
