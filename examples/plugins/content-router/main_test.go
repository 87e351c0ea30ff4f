package main

import "testing"

func TestPriorityTopic(t *testing.T) {
	for in, want := range map[string]string{
		"orders.created":          "orders.priority.created",
		"orders.priority":         "orders.priority.priority",
		"orders":                  "",
		"orders.":                 "",
		"orders.a.b":              "",
		"orders.priority.created": "",
		"shipments.created":       "",
	} {
		got, ok := priorityTopic(in)
		if got != want || ok != (want != "") {
			t.Errorf("priorityTopic(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}
