package main

import "time"

// The scenarios, in the order of issue 8's findings; each function is in the file of its
// finding: memory.go (1-3), ids.go (4), resources.go (5), plugins.go (6).

const (
	maxHeaderBytes = 64 << 10 // the default max_header_bytes
	maxHeaders     = 1024     // the default max_headers
)

var scenarios = []*scenario{
	{name: "memberless-1MiB", finding: "1", run: memberlessLarge,
		what: "8 consumer groups abandoned by their only member receive 1 MiB payloads from 4 publishers until each refuses, then 50 more each"},
	{name: "headers-group", finding: "1", run: headersGroup,
		what: "one publisher sends a message of 21,845 three-byte headers (refused: max_headers), then messages of max_headers headers filling max_header_bytes into 8 memberless groups until each refuses, then 20 more each"},
	{name: "headers-fanout", finding: "1", run: headersFanout,
		what: "8 fanout subscribers that never read, on 8 connections, each sent 450 messages of max_headers headers filling max_header_bytes (~180 KB as charged) by its own publisher"},
	{name: "groups-1000", finding: "1", run: thousandGroups,
		what: "1,000 memberless groups on one topic, 31,000 16-byte publishes in PublishStream frames of 1,000"},
	{name: "abandoned-gt", finding: "2", run: abandonedAll,
		what: "a group opened on \">\" and abandoned, then 100,000 8-byte publishes; then 1,000 jobs to a live group and the canary's own topic, both also matched by the full group"},
	{name: "stream-frame-16MiB", finding: "3", limits: true, run: hugeStreamFrames,
		what: "4 PublishStreams at once, each one frame of 16 MiB holding 8.4 million empty messages, repeated for 5 s"},
	{name: "unary-15MiB", finding: "3", limits: true, run: hugeUnary,
		what: "32 concurrent unary Publish calls of 15 MiB, repeated for 5 s"},
	{name: "guess-ids", finding: "4", run: guessIDs,
		what: "a non-member acks and nacks 20,000 random ids and 1,408 mutations of its own id, unary and on a stream, against a group holding 200 messages"},
	{name: "squatter", finding: "4", run: squatter, config: squatterConfig,
		what: "a client opens a declared group and an undeclared one first, with other patterns, then leaves; the real members then work"},
	{name: "subs-200k-stream", finding: "5", limits: true, run: manySubscriptions,
		what: "200,000 fanout subscriptions opened on one Subscribe stream"},
	{name: "patterns-1.5M", finding: "5", limits: true, run: manyPatterns,
		what: "one subscription with 1,500,000 topic patterns (a 15 MB frame), on 2 streams at once, repeated for 5 s"},
	{name: "streams-20k-conn", finding: "5", limits: true, run: manyStreams,
		what: "20,000 Subscribe streams on one raw HTTP/2 connection that ignores MAX_CONCURRENT_STREAMS"},
	{name: "conns-10k-idle", finding: "5", limits: true, run: manyConns,
		what: "5,000 idle TCP connections and 5,000 that send only the HTTP/2 preface, held 15 s"},
	{name: "detach-100k+stats", finding: "5", limits: true, run: detachMany,
		what: "100,000 fanout subscriptions on one pattern (2 streams): Stats read by a default gRPC client, then both streams closed"},
	{name: "plugin-devzero-start", finding: "6", limits: true, noServer: true, run: pluginAtStart("/dev/zero"),
		what: "serve with a plugin path of /dev/zero"},
	{name: "plugin-fifo-start", finding: "6", limits: true, noServer: true, run: pluginAtStart("fifo"),
		what: "serve with a plugin path naming a FIFO"},
	{name: "plugin-1GiB-start", finding: "6", limits: true, noServer: true, run: pluginAtStart("huge"),
		what: "serve with a plugin path naming a 1 GiB (sparse) file"},
	{name: "plugin-sighup-load", finding: "6", limits: true, run: pluginReload, config: reloadConfig,
		what: "SIGHUP to a 1 GiB file, /dev/zero and a FIFO in turn, under publishing load, with 2,000 messages queued and a plugin running"},
	{name: "dead-letter topic escape", finding: "23.2", run: deadLetterEscape, config: escapeConfig, canaryToken: escapeTokens["canary"],
		what: "alice, denied canary.bal, opens 1,000 groups dead-lettering to bob's group there, to her deny list, and under bob's group name (first and later opens), then dead-letters 1,000 of her own; bob's group gets only his 200"},
	{name: "zero-delay nack loop", finding: "23.6", run: nackLoop,
		what: "max_deliveries 4294967295, then a member nacking each of 1,000 messages at once for 20 s, max_deliveries unlimited, beside a group receiving 500 first deliveries a second"},
	{name: "wrong-token flood", finding: "23.3", run: tokenFlood, config: floodConfig, canaryToken: escapeTokens["canary"],
		what: "200 callers in a process under nice -n 19 guess tokens for bob and for unknown names (bcrypt's default cost); after 3 s, three users log in for the first time, one after another"},
	{name: "memberless-default-budget", finding: "23.4", run: memberlessLarge, gomemlimit: 768 << 20,
		what: "memberless-1MiB with the default memory budget, on what serve sets for a 1 GiB machine (GOMEMLIMIT 768 MiB, so a budget of 192 MiB): peak RSS must stay under 2 × budget + 64 MiB = 448 MiB"},
	{name: "plugin-loop-default", finding: "23.1", run: loopingPublishes(5*time.Second, 0), config: loopConfig(""),
		what: "a plugin whose on_publish loops forever, at the defaults (call_timeout 1s, fail_open), on loop.>; 8 publishers send to loop.x for 5 s"},
	{name: "plugin-loop-none", finding: "23.1", run: loopingPublishes(3*time.Second, 4), config: loopConfig("  call_timeout = \"none\"\n"),
		what: "the same plugin with call_timeout = \"none\": its first call loops until shutdown; 8 publishers send to loop.x for 5 s"},
}
