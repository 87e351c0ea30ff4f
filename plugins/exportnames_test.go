package plugins

import (
	"strings"
	"testing"

	"github.com/tinybroker/tinybroker/broker"
)

// Every hook export carries the ABI version (tb_v1_on_publish); a plugin built before they
// did exports the first names (tb_on_publish, tb_init), which still load and run; a module
// with both is called through the versioned one (docs/ABI.md, "Export names").
func TestExportNames(t *testing.T) {
	h := newHost(t)

	c := load(t, h, Spec{Name: "new", Wasm: fixture(t, "exportnames")})
	d := broker.Draft{Topic: "a"}
	if v, err := c.OnPublish(&d); err != nil || v.Drop {
		t.Fatalf("tb_v1_on_publish (pass) beside tb_on_publish (drop): %+v %v; want the versioned one called", v, err)
	}
	rv := c.OnRedeliver(&broker.RedeliverEvent{Msg: &broker.Message{Topic: "a"}, Group: "g", Attempt: 1})
	if rv.Action != broker.RedeliverDeadLetter {
		t.Fatalf("tb_v1_on_redeliver: %+v, want a dead letter", rv)
	}

	old := load(t, h, Spec{Name: "old", Wasm: fixture(t, "oldnames")})
	if v, err := old.OnPublish(&d); err != nil || !v.Drop {
		t.Fatalf("tb_on_publish, the first name: %+v %v; want it called (drop)", v, err)
	}
	_, err := h.Load(t.Context(), []Spec{{Name: "old", Wasm: fixture(t, "oldnames"), Config: map[string]string{"refuse": "1"}}})
	if err == nil || !strings.Contains(err.Error(), "old") {
		t.Fatalf("tb_init, the first name, refusing: %v; want the load refused", err)
	}
}
