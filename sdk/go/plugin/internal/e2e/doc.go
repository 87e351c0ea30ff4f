// Package e2e tests the Go plugin SDK and the example plugins end to end: it builds them
// with GOOS=wasip1 GOARCH=wasm and runs them in the broker's plugin host (package plugins).
// sdkcheck is a plugin that exercises every part of the SDK; nohandle is a plugin that makes
// the mistake of registering its hook in main.
package e2e
