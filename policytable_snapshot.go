package ratelimit

import (
	"fmt"
	"maps"
)

// tableSnapshot is one version of a replica's copy of the table, never
// modified once stored. Everything in it was read from the table's HASH
// and passed the checks of decodeTableField.
type tableSnapshot struct {
	version int64 // 0 before the first load
	keys    map[string]tableEntry
	plans   map[string]Plan
	flags   map[string]bool
}

// emptySnapshot returns the copy of a table never read.
func emptySnapshot() *tableSnapshot {
	return &tableSnapshot{keys: map[string]tableEntry{}, plans: map[string]Plan{}, flags: map[string]bool{}}
}

// lookup returns the policy of part for key, and whether the copy holds
// one: a key's own policy is its part "", and a plan's parts are its keys'.
func (s *tableSnapshot) lookup(key, part string) (Policy, bool) {
	e, ok := s.keys[key]
	switch {
	case !ok:
		return Policy{}, false
	case e.plan == "":
		return e.own, part == ""
	}
	p, ok := s.plans[e.plan][part]
	return p, ok
}

// fieldValue is one field of the table's HASH and its value, or that it
// is gone.
type fieldValue struct {
	field, value string
	gone         bool
}

// snapshotOf returns the copy of the whole HASH m (as HGETALL returns
// it): a field it refuses (see decodeTableField) keeps, for its key, plan
// or flag, what prev holds (nothing, if prev holds nothing), and is
// reported among the errors. It returns an error wrapping ErrCorruptState,
// and no copy, for a HASH without a valid version.
func snapshotOf(m map[string]string, prev *tableSnapshot, check func(string, Policy) error) (*tableSnapshot, []error, error) {
	v, ok := m[tableVersion]
	version, valid := parseTableNumber(v)
	if !ok || !valid {
		return nil, nil, fmt.Errorf("%w: version %q", ErrCorruptState, clip(v))
	}
	s := &tableSnapshot{version: version, keys: make(map[string]tableEntry, len(m)), plans: map[string]Plan{}, flags: map[string]bool{}}
	var bad []error
	for field, value := range m {
		if field == tableVersion {
			continue
		}
		f, err := decodeTableField(field, value, false, check)
		if err != nil {
			bad = append(bad, err)
			s.keep(prev, f)
			continue
		}
		s.set(f)
	}
	for key, e := range s.keys {
		if _, ok := s.plans[e.plan]; e.plan != "" && !ok {
			bad = append(bad, fmt.Errorf("key %s follows plan %q, which the table does not hold: it has no policy", KeyDigest(key), clip(e.plan)))
		}
	}
	return s, bad, nil
}

// withChanges returns a copy of s at version with the fields changed as
// they are now in the HASH, copying only the maps they change. A field it
// refuses keeps what s holds, and is reported among the errors.
func (s *tableSnapshot) withChanges(version int64, changes []fieldValue, check func(string, Policy) error) (*tableSnapshot, []error) {
	next := &tableSnapshot{version: version, keys: s.keys, plans: s.plans, flags: s.flags}
	var bad []error
	var copied [3]bool // keys, plans, flags
	for _, c := range changes {
		f, err := decodeTableField(c.field, c.value, c.gone, check)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		switch {
		case f.kind == 'p' && !copied[0]:
			next.keys, copied[0] = maps.Clone(s.keys), true
		case f.kind == 'P' && !copied[1]:
			next.plans, copied[1] = maps.Clone(s.plans), true
		case f.kind == 'f' && !copied[2]:
			next.flags, copied[2] = maps.Clone(s.flags), true
		}
		next.set(f)
	}
	return next, bad
}

// set makes s hold f, or not hold its name if f is a deletion.
func (s *tableSnapshot) set(f tableField) {
	switch f.kind {
	case 'p':
		if f.del {
			delete(s.keys, f.name)
		} else {
			s.keys[f.name] = f.entry
		}
	case 'P':
		if f.del {
			delete(s.plans, f.name)
		} else {
			s.plans[f.name] = f.plan
		}
	case 'f':
		if f.del {
			delete(s.flags, f.name)
		} else {
			s.flags[f.name] = f.on
		}
	}
}

// keep makes s hold, for f's name, what prev holds, if anything.
func (s *tableSnapshot) keep(prev *tableSnapshot, f tableField) {
	switch f.kind {
	case 'p':
		if e, ok := prev.keys[f.name]; ok {
			s.keys[f.name] = e
		}
	case 'P':
		if p, ok := prev.plans[f.name]; ok {
			s.plans[f.name] = p
		}
	case 'f':
		if on, ok := prev.flags[f.name]; ok {
			s.flags[f.name] = on
		}
	}
}

// entries returns what s holds, every map a copy of its own.
func (s *tableSnapshot) entries() PolicyTableEntries {
	e := PolicyTableEntries{
		Plans:    make(map[string]Plan, len(s.plans)),
		Keys:     map[string]string{},
		Policies: map[string]Policy{},
		Flags:    maps.Clone(s.flags),
	}
	for name, plan := range s.plans {
		e.Plans[name] = maps.Clone(plan)
	}
	for key, entry := range s.keys {
		if entry.plan != "" {
			e.Keys[key] = entry.plan
		} else {
			e.Policies[key] = entry.own
		}
	}
	return e
}
