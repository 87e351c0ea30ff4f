package config

import (
	"cmp"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// diagError is the error of a file that failed to parse: its error diagnostics, each with a
// Subject, in the order they occur in the file.
type diagError hcl.Diagnostics

// newError returns the error diagnostics of diags as an error. Any diagnostic without a
// position is given the start of filename, so that every line of the message has one.
func newError(diags hcl.Diagnostics, filename string) error {
	var errs diagError
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		if d.Subject == nil {
			d.Subject = d.Context
		}
		if d.Subject == nil {
			d.Subject = &hcl.Range{Filename: filename, Start: hcl.InitialPos, End: hcl.InitialPos}
		}
		errs = append(errs, d)
	}
	slices.SortStableFunc(errs, func(a, b *hcl.Diagnostic) int {
		return cmp.Or(strings.Compare(a.Subject.Filename, b.Subject.Filename), cmp.Compare(a.Subject.Start.Byte, b.Subject.Start.Byte))
	})
	return errs
}

// Error lists the diagnostics one per line, as FILE:LINE,COL-COL: Summary; Detail. Line
// breaks within a diagnostic (some of hcl's details have paragraphs) become spaces.
func (e diagError) Error() string {
	lines := make([]string, len(e))
	for i, d := range e {
		lines[i] = strings.Join(strings.FieldsFunc(d.Error(), isNewline), " ")
	}
	return strings.Join(lines, "\n")
}

func isNewline(r rune) bool { return r == '\n' || r == '\r' }

// Unwrap lets errors.As find the hcl.Diagnostics.
func (e diagError) Unwrap() error { return hcl.Diagnostics(e) }
