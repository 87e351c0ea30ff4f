package main

import (
	"context"
	"io"
	"net"
)

// The commands as the tests run them: in-process, through the same command tree as the
// binary, with their output captured.

func runPub(args []string, stdout, stderr io.Writer) error {
	return (&app{stdin: stdin, stdout: stdout, stderr: stderr}).execute(context.Background(), append([]string{"pub"}, args...))
}

func runSub(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return (&app{stdin: stdin, stdout: stdout, stderr: stderr}).execute(ctx, append([]string{"sub"}, args...))
}

func runPluginTest(args []string, in io.Reader, stdout, stderr io.Writer) error {
	return (&app{stdin: in, stdout: stdout, stderr: stderr}).execute(context.Background(), append([]string{"plugin", "test"}, args...))
}

func runPluginNew(args []string, stdout, stderr io.Writer) error {
	return (&app{stdin: stdin, stdout: stdout, stderr: stderr}).execute(context.Background(), append([]string{"plugin", "new"}, args...))
}

// serve runs `tinybroker serve args...`; listening, if not nil, receives its address.
func serve(ctx context.Context, args []string, stderr io.Writer, listening chan<- net.Addr) error {
	return (&app{stdin: stdin, stdout: io.Discard, stderr: stderr, listening: listening}).execute(ctx, append([]string{"serve"}, args...))
}

func runPasswd(args []string, in io.Reader, stdout, stderr io.Writer) error {
	return (&app{stdin: in, stdout: stdout, stderr: stderr}).execute(context.Background(), append([]string{"passwd"}, args...))
}
