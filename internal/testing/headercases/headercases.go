// Package headercases is the one table of header names and values that every engine must
// treat alike (README.md, "Headers"): the seam's check (broker.CheckHeader), every engine
// through the real server, and the JetStream engine's codec run it. It imports nothing of
// the broker's, so that any package's tests can use it.
package headercases

// Case is one header. Refused is empty for a valid header, which every engine must carry
// unchanged; for an invalid one, a fragment of the refusal (INVALID_ARGUMENT), which names
// the rule.
type Case struct {
	Key, Value string
	Refused    string
}

// Valid reports whether the broker accepts c.
func (c Case) Valid() bool { return c.Refused == "" }

// Cases are headers that engines once treated differently, and the grammar's edges.
var Cases = []Case{
	{Key: "content-type", Value: "application/json"},
	{Key: "Content-Type", Value: "text/plain"}, // names are case-sensitive: both kept
	{Key: "a[b", Value: "x"},                   // issue 23: nats.go refused the name, JetStream said "retry"
	{Key: "a(b)", Value: "x"},
	{Key: "a/b", Value: "x"},
	{Key: "a=b", Value: "x"},
	{Key: "a@b,c;d", Value: "x"},
	{Key: `a"b\c{d}<e>?`, Value: "x"},
	{Key: "a:b", Value: "colon in a name"},
	{Key: "a b", Value: "space in a name"},
	{Key: " lead", Value: "x"},
	{Key: "tab\tname", Value: "x"},
	{Key: "line\r\nname", Value: "x"},
	{Key: "nul\x00name", Value: "x"},
	{Key: "ключ", Value: "значение"},
	{Key: "é", Value: "ü"},
	{Key: "emoji-🙂", Value: "🙂"},
	{Key: "NATS/1.0", Value: "x"},
	{Key: "Nats-Msg-Id", Value: "1"},                 // JetStream would deduplicate on it
	{Key: "Nats-Rollup", Value: "all"},               // JetStream would purge the stream
	{Key: "Nats-Expected-Last-Sequence", Value: "0"}, // JetStream would refuse the message
	{Key: "nats-ttl", Value: "1s"},
	{Key: "Status", Value: "404"},       // the engine reads JetStream's answers by it
	{Key: "Description", Value: "gone"}, // likewise
	{Key: "Tb-Time", Value: "1"},        // the JetStream engine's own prefix
	{Key: "Tb-Hx", Value: `{"a":"b"}`},
	{Key: "tb-custom", Value: "x"},
	{Key: "k1", Value: ""},
	{Key: "k2", Value: " padded "},
	{Key: "k3", Value: "\ttabs\t"},
	{Key: "k4", Value: "line\r\nbreak"},
	{Key: "k5", Value: "\n"},
	{Key: "k6", Value: "nul\x00and\x01control\x7f"},
	{Key: "k7", Value: "inner\ttab and spaces"},
	{Key: "k8", Value: "x[y]:z; q=\"r\""},
	{Key: "k9", Value: "\u2028\u0085\u00a0"},
	{Key: "k10", Value: "{\"json\": [1, 2]}"},

	{Key: "", Value: "x", Refused: "empty name"},
	{Key: "", Value: "", Refused: "empty name"},
	{Key: "bad\xffname", Value: "x", Refused: "not valid UTF-8"},
	{Key: "k", Value: "bad\xc3value", Refused: "not valid UTF-8"},
}
