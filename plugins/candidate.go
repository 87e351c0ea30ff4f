package plugins

// The lifecycle's seam (issue 30): a plugin may run a second version beside its current one,
// either in shadow (run on the same messages, its results compared with the current
// version's and never applied) or as a canary (run instead of the current version for a share
// of messages, rolled back by itself when it fails too often). Who stores and deploys
// versions (the admin API, cmd/tinybroker) is not this package's business: it gets both
// modules in one Spec and reports what happened in Stats.

// CandidateMode says how a candidate version runs beside the plugin's current one.
type CandidateMode int

const (
	// Shadow runs the candidate on the same messages, acks and redeliveries as the current
	// version; its verdicts, emits, header changes, KV writes and hook decisions are compared
	// with the current version's and counted, never applied.
	Shadow CandidateMode = iota + 1
	// Canary runs the candidate instead of the current version for a share of the messages
	// (Percent, Keys); over MaxErrorRate it is rolled back: the current version takes
	// everything again.
	Canary
)

// Candidate is a second version of a plugin (Spec.Candidate). Every Spec setting other than
// the module is the plugin's, shared by both versions.
type Candidate struct {
	Mode CandidateMode
	Wasm []byte // the candidate's module
	Hash string // its content hash ("sha256:<hex>"); computed from Wasm if empty

	// Canary only. Percent (0-100) is the share of messages sent to the candidate, chosen by a
	// hash of the message's ordering key, or of its message id, or at random when it has
	// neither (so one key always goes the same way); messages whose ordering key is in Keys
	// always go to it.
	Percent float64
	Keys    []string
	// MaxErrorRate (0-1, default 0.05) is the share of failed candidate calls over which the
	// canary is rolled back, judged once it has made MinCalls calls (default 100).
	MaxErrorRate float64
	MinCalls     int
	// OnRollback, if set, is called once when the canary is rolled back, with the reason. It is
	// called from a call in progress, and must not block.
	OnRollback func(reason string)
}

// CandidateStats counts what a plugin's candidate did (PluginStats.Candidate).
type CandidateStats struct {
	Hash  string
	Mode  CandidateMode
	Calls uint64 // calls made to the candidate
	// Failures: the candidate's failed calls (a trap, a timeout, a malformed verdict).
	Failures uint64
	// Differences (shadow): calls whose results differed from the current version's, in any
	// of the verdict, the message's topic, key, payload or headers, the emits, the KV writes
	// or the hook decision.
	Differences uint64
	RolledBack  bool   // canary: rolled back (the current version takes everything)
	Reason      string // why it was rolled back
}
