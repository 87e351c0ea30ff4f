//go:build !unix

package main

// watchKeys does nothing where a terminal cannot be read without blocking (Windows): the view
// ends with Ctrl-C.
func watchKeys(int, func()) (stop func()) { return func() {} }
