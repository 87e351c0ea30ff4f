package main

import (
	"testing"
	"time"
)

func TestRecord(t *testing.T) {
	r := ackRecord{group: "resizers", subscription: "thumbs", id: "5f3a9c01-7", topic: "jobs.thumb.1", attempt: 2, inFlight: 12500 * time.Microsecond}
	if got, want := string(r.payload()), "group=resizers subscription=thumbs id=5f3a9c01-7 topic=jobs.thumb.1 attempt=2 in_flight_ms=12"; got != want {
		t.Errorf("payload = %q, want %q", got, want)
	}
	h := r.headers()
	if h["audit-attempt"] != "2" || h["audit-in-flight-ms"] != "12" || h["audit-topic"] != "jobs.thumb.1" || len(h) != 6 {
		t.Errorf("headers = %v", h)
	}
}
