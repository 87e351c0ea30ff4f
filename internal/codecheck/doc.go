// Package codecheck holds tests that read tinybroker's own source and fail on what vet and
// staticcheck do not catch: a goroutine started outside a tracked helper, a package that
// starts goroutines without a leak check in its tests, the broker seam growing past its
// bound, a lock order that drifts from RATIONALE.md. It has no code of its own.
package codecheck
