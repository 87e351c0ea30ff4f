package main

import (
	"fmt"
	"strings"

	"github.com/tinybroker/tinybroker/internal/abi"
)

// witPath is where the WIT rendering goes: a folder of its own, because WIT tools read a
// folder of .wit files as one package (wasm-tools component wit sdk/wit).
const witPath = "sdk/wit/tinybroker.wit"

// witHeader opens the WIT file: what it is and the rules that give back the core ABI from it.
// docs/ABI.md's "The ABI as WIT" says the same.
const witHeader = `// The tinybroker plugin ABI, version 1 (docs/ABI.md), in WIT: %s.
//
// The ABI is core WebAssembly, not a component: a plugin imports the functions of interface
// host from the core module "tinybroker" and exports those of world plugin, and nothing lifts
// or lowers these types as the component model's canonical ABI would. This file is the same
// contract in a form other toolchains read. The core signature of each function follows from
// these rules:
//
// - A name is the core name with '_' written '-': v1-msg-topic is the import
//   "tinybroker" "v1_msg_topic", tb-v1-on-publish the export "tb_v1_on_publish".
// - A string or list<u8> parameter is two i32s, a pointer into the plugin's memory and a
//   length in bytes: string is UTF-8 text, list<u8> any bytes. A parameter "value" is the
//   pair named (ptr, len).
// - A function that returns a string or list<u8> is a reader: in core it takes two more i32s,
//   a buffer and its capacity, copies at most the capacity there and returns the value's full
//   length as an i32; option<...> is absent as -1.
// - result<_, error-code> is an i32 status: 0 is ok, error-code's case n (from 0) is -(n+1).
//   result<s32, error-code> is a value >= 0 or such a status.
// - s32 and s64 are i32 and i64. A verdict is the i64 a hook returns: the action
//   (publish-action, redeliver-action) in the low 32 bits, its argument in the high 32.
// - The plugin also exports its linear memory as "memory", which WIT cannot say.
`

// witKeywords are WIT's keywords (WIT.md, "Keywords"), which a name must escape with '%'.
var witKeywords = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range strings.Fields(`as async bool borrow char constructor enum export f32 f64 flags from func future
		import include interface list map option own package record resource result s16 s32 s64 s8 static stream
		string tuple type u16 u32 u64 u8 use variant with world`) {
		m[k] = true
	}
	return m
}()

// witName is a core name as a WIT identifier.
func witName(s string) string {
	s = strings.ReplaceAll(strings.ToLower(s), "_", "-")
	if witKeywords[s] {
		return "%" + s
	}
	return s
}

// witDoc writes doc as a WIT doc comment, indented by indent, with a sentence's capital and
// full stop.
func witDoc(b *strings.Builder, indent, doc string) {
	doc = strings.ToUpper(doc[:1]) + doc[1:]
	if !strings.HasSuffix(doc, ".") {
		doc += "."
	}
	fmt.Fprintf(b, "%s/// %s\n", indent, doc)
}

// witEnum writes the constants of group as an enum, whose case n must be the constant
// value(n): a table where that is not so cannot be an enum, and gen says so.
func witEnum(b *strings.Builder, name, group, prefix, doc string, value func(n int) int64) error {
	witDoc(b, "  ", doc)
	fmt.Fprintf(b, "  enum %s {\n", name)
	n := 0
	for _, c := range abi.Consts {
		if c.Group != group || c.Value == abi.StatusOK && group == "status" {
			continue
		}
		if c.Value != value(n) {
			return fmt.Errorf("WIT: enum %s: %s is %d, but its case %d stands for %d", name, c.Name, c.Value, n, value(n))
		}
		fmt.Fprintf(b, "    /// %s (%d): %s.\n    %s,\n", c.Name, c.Value, c.Doc, witName(strings.TrimPrefix(c.Name, prefix)))
		n++
	}
	b.WriteString("  }\n\n")
	return nil
}

// witFunc renders f's parameters and result as WIT: "func(key: string) -> option<string>".
func witFunc(f abi.Func) (string, error) {
	var ps []string
	var out *abi.Param
	for i, p := range f.Params {
		switch p.Kind {
		case abi.I32:
			ps = append(ps, witName(p.Name)+": s32")
		case abi.I64:
			ps = append(ps, witName(p.Name)+": s64")
		case abi.In:
			if i+1 == len(f.Params) || f.Params[i+1].Kind != abi.Len {
				return "", fmt.Errorf("WIT: %s: %s has no length after it", f.Name, p.Name)
			}
			name := p.Name
			if name == "ptr" {
				name = "value"
			}
			ps = append(ps, witName(name)+": "+witBytes(p))
		case abi.Out:
			if i+2 != len(f.Params) || f.Params[i+1].Kind != abi.Len {
				return "", fmt.Errorf("WIT: %s: the buffer %s is not the last parameter but its capacity", f.Name, p.Name)
			}
			out = &f.Params[i]
		}
	}
	sig := "func(" + strings.Join(ps, ", ") + ")"
	res, err := witResult(f, out)
	if res != "" {
		sig += " -> " + res
	}
	return sig, err
}

func witBytes(p abi.Param) string {
	if p.Bytes {
		return "list<u8>"
	}
	return "string"
}

// witResult is f's result in WIT, given its buffer if it has one; "" for none. An I32 result
// whose meaning (abi.Ret) does not fit the parameters is an error: the table must say what a
// new function returns before it can be rendered.
func witResult(f abi.Func, out *abi.Param) (string, error) {
	reader := f.Ret == abi.Length || f.Ret == abi.Absent
	if (out != nil) != reader || f.Ret != abi.Number && f.Result != abi.I32 {
		return "", fmt.Errorf("WIT: %s: its Ret does not fit its signature (a reader, with an Out buffer, is Length or Absent; Status and Handle are I32 results): set Ret in internal/abi/table.go", f.Name)
	}
	switch f.Ret {
	case abi.Length:
		return witBytes(*out), nil
	case abi.Absent:
		return "option<" + witBytes(*out) + ">", nil
	case abi.Status:
		return "result<_, error-code>", nil
	case abi.Handle:
		return "result<s32, error-code>", nil
	}
	switch f.Result {
	case abi.I32:
		return "s32", nil
	case abi.I64:
		return "s64", nil
	}
	return "", nil
}

// witFile renders the whole table as a WIT package: interface types (the numbers WIT can
// name), interface host (the host functions) and world plugin (the exports).
func witFile() (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, witHeader, generated)
	fmt.Fprintf(&b, "\npackage %s:plugin@1.0.0;\n\n", abi.HostModule)

	b.WriteString("/// The numbers of the ABI that WIT can name (docs/ABI.md, \"Reference: the numbers\").\ninterface types {\n")
	if err := witEnum(&b, "error-code", "status", "STATUS_", "the status of a host function that writes, other than STATUS_OK (0)",
		func(n int) int64 { return -int64(n) - 1 }); err != nil {
		return "", err
	}
	from0 := func(n int) int64 { return int64(n) }
	if err := witEnum(&b, "publish-action", "on_publish action", "ACT_", "a verdict's action in tb_v1_on_publish", from0); err != nil {
		return "", err
	}
	if err := witEnum(&b, "redeliver-action", "on_redeliver action", "ACT_", "a verdict's action in tb_v1_on_redeliver", from0); err != nil {
		return "", err
	}
	b.WriteString("  /// What a hook returns: an action in the low 32 bits, its argument in the high 32.\n  type verdict = u64;\n\n")
	b.WriteString("  // The other numbers lay out memory (docs/ABI.md, \"The inbox\", \"Batches\"), which WIT\n  // cannot describe:\n")
	for _, c := range abi.Consts {
		switch c.Group {
		case "status", "on_publish action", "on_redeliver action":
			continue
		}
		fmt.Fprintf(&b, "  //   %s = %d (%s): %s\n", c.Name, c.Value, c.Group, c.Doc)
	}
	b.WriteString("}\n\n")

	fmt.Fprintf(&b, "/// The host functions, imported from the core module %q.\ninterface host {\n  use types.{error-code};\n", abi.HostModule)
	group := ""
	for _, f := range abi.HostFuncs {
		if f.Group != group {
			group = f.Group
			fmt.Fprintf(&b, "\n  // %s.\n\n", group)
		}
		sig, err := witFunc(f)
		if err != nil {
			return "", err
		}
		witDoc(&b, "  ", f.Doc)
		if note := hooksNote(f, "  /// Hooks: ", ".\n"); note != "" {
			b.WriteString(note)
		}
		fmt.Fprintf(&b, "  %s: %s;\n", witName(f.Name), sig)
	}
	b.WriteString("}\n\n")

	b.WriteString("/// A plugin: it imports the host functions, exports its memory and the version marker, and at\n/// least one hook.\nworld plugin {\n  use types.{verdict};\n  import host;\n\n")
	fmt.Fprintf(&b, "  /// The version marker, never called: a module without it is not a plugin.\n  export %s: func();\n", witName(abi.Marker))
	for _, e := range abi.Exports {
		sig, err := witFunc(e.Func)
		if err != nil {
			return "", err
		}
		if e.Hook != abi.HookNone && e.Result == abi.I64 {
			sig = strings.TrimSuffix(sig, "s64") + "verdict"
		}
		doc := e.Doc
		if e.Old != "" {
			doc += "; first exported as " + e.Old + ", still accepted"
		}
		witDoc(&b, "  ", doc)
		fmt.Fprintf(&b, "  export %s: %s;\n", witName(e.Name), sig)
	}
	b.WriteString("}\n")
	return b.String(), nil
}
