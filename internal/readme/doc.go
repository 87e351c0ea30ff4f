// Package readme has no code of its own: its test (readme_test.go) runs the shell sessions
// of the repository's README.md against a real broker, through bash, and compares their
// output with what README shows, so that README cannot drift from what the binary does.
package readme
