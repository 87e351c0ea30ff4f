package config

import (
	"fmt"
	"math"
	"math/big"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/gocty"
)

// A section is a body of the file: the attributes and blocks it may hold.
type section struct {
	attrs  []attribute
	blocks []blockType
}

// An attribute is a setting: its name, and how to decode its expression into the Config.
type attribute struct {
	name   string
	decode func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics
}

// A blockType is a kind of nested block.
type blockType struct {
	name     string
	labels   []string // label names, e.g. {"name"} for `plugin "name" { ... }`
	multiple bool     // whether the block may appear more than once
	decode   func(d *decoder, b *hcl.Block, path string) hcl.Diagnostics
}

// sectionBlock decodes a block whose body is a section of settings.
func sectionBlock(s section) func(d *decoder, b *hcl.Block, path string) hcl.Diagnostics {
	return func(d *decoder, b *hcl.Block, path string) hcl.Diagnostics {
		return d.section(b.Body, s, path)
	}
}

// declare appends v, decoded from block b, to list unless an earlier block of its kind took
// its name (name(v), b's label): kind names the blocks, noun the things they declare.
func declare[T any](list *[]T, v T, name func(T) string, b *hcl.Block, kind, noun string) hcl.Diagnostics {
	if slices.ContainsFunc(*list, func(x T) bool { return name(x) == name(v) }) {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Duplicate " + kind,
			Detail: fmt.Sprintf("A %s named %q is already declared; %s names must be unique.", noun, name(v), kind), Subject: b.LabelRanges[0].Ptr()}}
	}
	*list = append(*list, v)
	return nil
}

// decoder decodes a file into cfg, remembering where each setting was written.
type decoder struct {
	cfg    Config
	dir    string               // the file's folder: plugin paths are relative to it
	ranges map[string]hcl.Range // expression ranges by dotted path, e.g. "fanout.buffer_bytes"
}

// section decodes body, described by s, into d.cfg. path is the dotted path of the body's
// block ("" at the top level).
func (d *decoder) section(body hcl.Body, s section, path string) hcl.Diagnostics {
	schema := &hcl.BodySchema{}
	for _, a := range s.attrs {
		schema.Attributes = append(schema.Attributes, hcl.AttributeSchema{Name: a.name})
	}
	for _, bt := range s.blocks {
		schema.Blocks = append(schema.Blocks, hcl.BlockHeaderSchema{Type: bt.name, LabelNames: bt.labels})
	}
	content, diags := body.Content(schema)
	if content == nil {
		return diags
	}
	for _, a := range s.attrs {
		attr, ok := content.Attributes[a.name]
		if !ok {
			continue
		}
		d.ranges[join(path, a.name)] = attr.Expr.Range()
		diags = append(diags, a.decode(&d.cfg, a.name, attr.Expr)...)
	}
	first := make(map[string]*hcl.Block)
	for _, b := range content.Blocks {
		for _, bt := range s.blocks {
			if bt.name != b.Type {
				continue
			}
			if prev, dup := first[b.Type]; dup && !bt.multiple {
				diags = append(diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  fmt.Sprintf("Duplicate %s block", b.Type),
					Detail: fmt.Sprintf("Only one %s block is allowed; move these settings into the first one, at %s.",
						b.Type, prev.DefRange),
					Subject: b.DefRange.Ptr(),
				})
				continue
			}
			if _, seen := first[b.Type]; !seen {
				first[b.Type] = b
			}
			diags = append(diags, bt.decode(d, b, join(path, b.Type))...)
		}
	}
	return diags
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// rangeOf returns the range of the first of the settings at paths written in the file.
func (d *decoder) rangeOf(paths ...string) *hcl.Range {
	for _, p := range paths {
		if r, ok := d.ranges[p]; ok {
			return r.Ptr()
		}
	}
	return nil
}

// decodeString and decodeNumber decode expr into *dst. A value of the wrong type is reported
// as such, with want describing the right kind of value.
func decodeString(name, want string, expr hcl.Expression, dst *string) hcl.Diagnostics {
	return decodeValue(name, want, expr, cty.String, dst)
}

func decodeNumber(name, want string, expr hcl.Expression, dst *big.Float) hcl.Diagnostics {
	return decodeValue(name, want, expr, cty.Number, dst)
}

func decodeValue(name, want string, expr hcl.Expression, ty cty.Type, dst any) hcl.Diagnostics {
	if diags := constant(expr); diags.HasErrors() {
		return diags
	}
	val, diags := expr.Value(nil)
	if diags.HasErrors() {
		return diags
	}
	got := val.Type()
	switch {
	case val.IsNull():
		return invalid(expr, "Wrong type for "+name, "%s must be %s; got null.", name, want)
	case got == ty && val.IsWhollyKnown():
		if err := gocty.FromCtyValue(val, dst); err != nil {
			return invalid(expr, "Wrong type for "+name, "%s must be %s; %v.", name, want, err)
		}
		return nil
	case got == cty.String:
		return invalid(expr, "Wrong type for "+name, "%s must be %s, written without quotes; got a string.", name, want)
	case ty == cty.String && (got == cty.Number || got == cty.Bool):
		return invalid(expr, "Wrong type for "+name, "%s must be %s, in quotes; got a %s.", name, want, got.FriendlyName())
	default:
		return invalid(expr, "Wrong type for "+name, "%s must be %s; got a %s.", name, want, got.FriendlyName())
	}
}

// constant reports expressions other than constants: quoted strings, numbers, true, false
// and null, and + - * / on numbers. Variables, functions and for expressions have no use in
// this file, and some expressions are slow to evaluate: "${1e999999}", say, spells out a
// million digits.
func constant(expr hcl.Expression) hcl.Diagnostics {
	switch e := expr.(type) {
	case *hclsyntax.LiteralValueExpr:
		if e.Val.Type() == cty.Number && e.Val.IsKnown() && !e.Val.IsNull() {
			// Bounding the literals bounds the cost of arithmetic: adding numbers of very
			// different magnitudes, such as 1e300000000 + 1, takes time in proportion to the
			// difference of their exponents.
			f := e.Val.AsBigFloat()
			if exp := f.MantExp(nil); f.IsInf() || exp > 64 || (exp < -64 && f.Sign() != 0) {
				return invalid(expr, "Number out of range",
					"Numbers in this file must be less than 2^64 in magnitude, and not fractions smaller than 2^-64.")
			}
		}
		return nil
	case *hclsyntax.TemplateExpr:
		for _, part := range e.Parts {
			if _, ok := part.(*hclsyntax.LiteralValueExpr); !ok {
				return interpolation(part)
			}
		}
		return nil
	case *hclsyntax.TemplateWrapExpr: // "${...}" alone
		return interpolation(e.Wrapped)
	case *hclsyntax.ParenthesesExpr:
		return constant(e.Expression)
	case *hclsyntax.UnaryOpExpr:
		if e.Op == hclsyntax.OpNegate {
			return constant(e.Val)
		}
	case *hclsyntax.BinaryOpExpr:
		// Not %: cty's modulo of numbers of very different magnitudes takes seconds.
		switch e.Op {
		case hclsyntax.OpAdd, hclsyntax.OpSubtract, hclsyntax.OpMultiply, hclsyntax.OpDivide:
			return append(constant(e.LHS), constant(e.RHS)...)
		}
	case *hclsyntax.ScopeTraversalExpr:
		if len(e.Traversal) == 1 {
			name := e.Traversal.RootName()
			return invalid(expr, "Unquoted string", "Strings must be in quotes: write %q rather than %s.", name, name)
		}
	}
	return invalid(expr, "Not a constant",
		"Only constants are allowed here: a quoted string, a number, or numbers combined with + - * /, such as 64 * 1024.")
}

func interpolation(part hcl.Expression) hcl.Diagnostics {
	return invalid(part, "Interpolation not allowed",
		"Only plain quoted strings are allowed in this file, without ${...} or %%{...} sequences. Write $${ or %%%%{ for a literal ${ or %%{.")
}

// invalid reports a value of the right type that is not acceptable.
func invalid(expr hcl.Expression, summary, detail string, args ...any) hcl.Diagnostics {
	return hcl.Diagnostics{{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(detail, args...),
		Subject:  expr.Range().Ptr(),
	}}
}

// positiveIntAttr is a whole number greater than zero.
func positiveIntAttr(name string, field func(*Config) *int) attribute {
	return attribute{name: name, decode: func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics {
		var f big.Float
		if diags := decodeNumber(name, "a whole number greater than zero", expr, &f); diags.HasErrors() {
			return diags
		}
		switch {
		case f.IsInf():
			return invalid(expr, "Invalid "+name, "%s is too large; the most is %d.", name, math.MaxInt)
		case !f.IsInt():
			return invalid(expr, "Invalid "+name, "%s must be a whole number; got %s.", name, show(&f))
		case f.Sign() <= 0:
			return invalid(expr, "Invalid "+name, "%s must be greater than zero; got %s.", name, show(&f))
		case f.Cmp(big.NewFloat(math.MaxInt)) >= 0: // MaxInt rounds up to 2^63 as a float64
			return invalid(expr, "Invalid "+name, "%s is too large; got %s, the most is %d.", name, show(&f), math.MaxInt)
		}
		n, _ := f.Int64()
		*field(c) = int(n)
		return nil
	}}
}

// show formats a number for a message. Numbers of extreme magnitude, which would take long
// to print in decimal, are only described.
func show(f *big.Float) string {
	switch exp := f.MantExp(nil); {
	case exp > 1024:
		return "a number with more than 300 digits"
	case exp < -1024 && f.Sign() != 0:
		return "a number too close to zero to show"
	}
	return f.Text('g', 20)
}

// durationAttr is a Go duration string greater than zero, such as "30s" or "1m30s".
func durationAttr(name string, field func(*Config) *time.Duration) attribute {
	return attribute{name: name, decode: func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics {
		var s string
		if diags := decodeString(name, `a duration string such as "30s"`, expr, &s); diags.HasErrors() {
			return diags
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return invalid(expr, "Invalid duration", `%q is not a Go duration; write e.g. "10s" or "1m30s".`, s)
		}
		if v <= 0 {
			return invalid(expr, "Invalid "+name, "%s must be greater than zero; got %q.", name, s)
		}
		*field(c) = v
		return nil
	}}
}

// A choice is one allowed value of an enumerated setting.
type choice[T any] struct {
	name  string
	value T
}

// names are choices whose values are their names.
func names(ns ...string) []choice[string] {
	cs := make([]choice[string], len(ns))
	for i, n := range ns {
		cs[i] = choice[string]{n, n}
	}
	return cs
}

// enumAttr is a string, one of choices.
func enumAttr[T any](name string, choices []choice[T], field func(*Config) *T) attribute {
	quoted := make([]string, len(choices))
	for i, ch := range choices {
		quoted[i] = strconv.Quote(ch.name)
	}
	allowed := strings.Join(quoted, ", ")
	if n := len(quoted); n > 1 {
		allowed = strings.Join(quoted[:n-1], ", ") + " or " + quoted[n-1]
	}
	return attribute{name: name, decode: func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics {
		var s string
		if diags := decodeString(name, "one of "+allowed, expr, &s); diags.HasErrors() {
			return diags
		}
		for _, ch := range choices {
			if ch.name == s {
				*field(c) = ch.value
				return nil
			}
		}
		return invalid(expr, "Invalid "+name, "%q is not a valid %s; use %s.", s, name, allowed)
	}}
}

// listenAttr is a listen address, host:port with a numeric port; the host may be empty.
func listenAttr(name string, field func(*Config) *string) attribute {
	return attribute{name: name, decode: func(c *Config, name string, expr hcl.Expression) hcl.Diagnostics {
		var s string
		if diags := decodeString(name, `an address such as "127.0.0.1:7878"`, expr, &s); diags.HasErrors() {
			return diags
		}
		_, port, err := net.SplitHostPort(s)
		if err != nil {
			return invalid(expr, "Invalid listen address",
				`%q is not host:port (%v); write e.g. "127.0.0.1:7878", ":7878" or "[::1]:7878".`, s, unwrapAddrErr(err))
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return invalid(expr, "Invalid listen address",
				`%q has port %q; the port must be a number from 0 to 65535, e.g. "127.0.0.1:7878".`, s, port)
		}
		*field(c) = s
		return nil
	}}
}

// unwrapAddrErr returns the reason of a net.SplitHostPort error without repeating the address.
func unwrapAddrErr(err error) string {
	if ae, ok := err.(*net.AddrError); ok {
		return ae.Err
	}
	return err.Error()
}
