package ratelimit

import (
	"bytes"
	"maps"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// fuzzSnapshot is the copy the PolicyTable fuzz targets change: a key on
// a plan, a key with a policy of its own, and a flag.
func fuzzSnapshot() *tableSnapshot {
	s := emptySnapshot()
	s.version = 100
	s.plans["free"] = Plan{"": planFree, "day": {Limit: 100, Window: 24 * time.Hour}}
	s.keys["acme"] = tableEntry{plan: "free"}
	s.keys["globex"] = tableEntry{own: planPro}
	s.flags["enforce"] = true
	return s
}

// checkFuzzSnapshot fails t unless everything s holds is within the
// table's bounds and passes the checks Set applies.
func checkFuzzSnapshot(t *testing.T, s *tableSnapshot) {
	t.Helper()
	for key, e := range s.keys {
		if len(key) > MaxPolicyTableName || len(e.plan) > MaxPolicyTableName {
			t.Fatalf("key %q of %d bytes, plan of %d", clip(key), len(key), len(e.plan))
		}
		if e.plan == "" {
			if err := checkTablePolicy("policy", e.own); err != nil {
				t.Fatalf("key %q holds %v: %v", clip(key), e.own, err)
			}
		}
	}
	for name, plan := range s.plans {
		if err := checkTableName("plan", name); err != nil {
			t.Fatal(err)
		}
		if err := checkTablePlan(nil, plan); err != nil {
			t.Fatalf("plan %q: %v", clip(name), err)
		}
	}
	for name := range s.flags {
		if len(name) > MaxPolicyTableName {
			t.Fatalf("flag of %d bytes", len(name))
		}
	}
}

// fuzzTableField is FuzzPolicyTableField's body.
func fuzzTableField(t *testing.T, field, value string, gone bool) {
	f, err := decodeTableField(field, value, gone, nil)
	if err == nil && !gone {
		switch f.kind {
		case 'p':
			back, err := decodeTableEntry(encodeTableEntry(f.entry))
			if err != nil || back != f.entry {
				t.Fatalf("entry %+v reads back as %+v, %v", f.entry, back, err)
			}
		case 'P':
			back, err := decodeTablePlan(encodeTablePlan(f.plan))
			if err != nil || !maps.Equal(back, f.plan) {
				t.Fatalf("plan %v reads back as %v, %v", f.plan, back, err)
			}
		case 'f':
			if value != encodeTableFlag(f.on) {
				t.Fatalf("flag %q read as %v", value, f.on)
			}
		}
	}
	prev := fuzzSnapshot()
	next, bad := prev.withChanges(prev.version+1, []fieldValue{{field: field, value: value, gone: gone}}, nil)
	checkFuzzSnapshot(t, next)
	if (err != nil) != (len(bad) == 1) {
		t.Fatalf("decode says %v, the change %v", err, bad)
	}
	if err != nil && !(reflect.DeepEqual(next.keys, prev.keys) && reflect.DeepEqual(next.plans, prev.plans) && reflect.DeepEqual(next.flags, prev.flags)) {
		t.Fatalf("a refused field (%v) changed the copy", err)
	}
	if !reflect.DeepEqual(prev, fuzzSnapshot()) {
		t.Fatal("a change wrote into the copy it was made on")
	}
	whole, _, err := snapshotOf(map[string]string{tableVersion: "7", field: value}, prev, nil)
	if field != tableVersion && err != nil {
		t.Fatalf("a valid version refused: %v", err)
	}
	if whole != nil {
		checkFuzzSnapshot(t, whole)
	}
}

// fuzzTableReply is FuzzPolicyTableReply's body.
func fuzzTableReply(t *testing.T, data []byte) {
	var reply []any
	for _, b := range bytes.Split(data, []byte{0}) {
		if n, err := strconv.ParseInt(string(bytes.TrimPrefix(b, []byte("#"))), 10, 64); err == nil && bytes.HasPrefix(b, []byte("#")) {
			reply = append(reply, n)
		} else {
			reply = append(reply, string(b))
		}
	}
	r, err := parseTableReply(reply)
	if err != nil {
		return
	}
	if r.version <= 0 || len(r.changes) > tableLogSize || (r.reload && len(r.changes) > 0) {
		t.Fatalf("accepted %+v", r)
	}
	next, _ := fuzzSnapshot().withChanges(r.version, r.changes, nil)
	checkFuzzSnapshot(t, next)
	if next.version != r.version {
		t.Fatalf("copy at %d, reply at %d", next.version, r.version)
	}
}
