package ratelimit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// How a PolicyTable keeps itself in its Redis HASH: the fields, the text of
// their values, the bounds on both, and their parsers, which every value a
// replica reads goes through.
//
//	"v"            the version: a decimal integer > 0
//	"p:" + key     the key's entry: its own policy, or "@" + the plan it follows
//	"plan:" + name a plan: its policies by part, as "<part>"<policy>, joined by ","
//	"f:" + name    a flag: "1" (on) or "0" (off)
//	"n", "log:" + slot, "c:" + plan
//	               the write script's own: its change log (see
//	               scripts/policytable.lua) and the number of keys on each plan
//
// A policy is "<limit>/<window in ns>", both decimal integers > 0 without a
// sign or leading zeros, followed by ";zone=<zone>" when its Zone is set
// (a calendar window's zone for the key, see Policy.Zone). Any other text
// after a ';' is an attribute this version does not know, which it
// refuses, so that a replica never decides by part of a policy; and a
// write refuses a Policy with a field besides Limit, Window and Zone,
// which encodeTablePolicy would drop.
const (
	tableKeyPrefix   = "ratelimit:policytable:"
	tableEntryField  = "p:"
	tablePlanField   = "plan:"
	tableFlagField   = "f:"
	tableCountField  = "c:"
	tableLogField    = "log:"
	tableVersion     = "v"
	tableSeq         = "n"
	tablePlanRef     = "@"
	tableLogSize     = 64 // the changes the log keeps; scripts/policytable*.lua agree
	maxPlanParts     = 16
	maxTableValueLen = 4096 // longer than any value the table writes
)

// MaxPolicyTableName is the most bytes of a PolicyTable's key, plan name or
// flag name. A write of a longer one fails with an error wrapping
// ErrInvalidConfig, and a replica skips a field of the table's HASH that
// holds one.
const MaxPolicyTableName = 1024

// Plan is a plan of a PolicyTable: its policies by part. Every key that
// follows the plan gets them: the policy of part "" from the table's
// PolicyFunc, that of part p from PartPolicyFunc(p). A part's name is ""
// or, as a Composite's Part.Name, 1 to 64 printable ASCII characters other
// than '"' and '\'. A plan holds 1 to 16 parts.
type Plan map[string]Policy

// PolicyTableEntries is everything a PolicyTable holds besides its version:
// what Replace and Seed write, and what Entries returns. Its maps may be
// nil.
type PolicyTableEntries struct {
	// Plans are the plans by name: 1 to MaxPolicyTableName bytes.
	Plans map[string]Plan
	// Keys maps each key that follows a plan to the plan's name, which
	// Plans must hold.
	Keys map[string]string
	// Policies maps each key that has a policy of its own to it. A key is
	// in Keys or in Policies, not both.
	Policies map[string]Policy
	// Flags are the named flags (see FollowShadow).
	Flags map[string]bool
}

// tableEntry is a key's entry: the plan it follows, or, for plan "", its
// own policy.
type tableEntry struct {
	plan string
	own  Policy
}

// checkTablePolicy returns an error wrapping ErrInvalidConfig, naming what,
// for a policy no table may hold: one whose Limit or Window is not > 0, or
// one no limiter of this package can decide by (an interval under one
// nanosecond a unit, a fill time beyond the in-process clock), which every
// replica would otherwise fail its calls on.
func checkTablePolicy(what string, p Policy) error {
	if p.Limit <= 0 || p.Window <= 0 {
		return fmt.Errorf("%w: %s: policy %d per %v: limit and window must be > 0", ErrInvalidConfig, what, p.Limit, p.Window)
	}
	if _, _, err := checkLocalRate(what, p); err != nil {
		return err
	}
	return nil
}

// checkTableName returns an error for a key, plan or flag name (what says
// which) a table cannot hold: longer than MaxPolicyTableName, or, for a
// plan, empty.
func checkTableName(what, name string) error {
	if len(name) > MaxPolicyTableName {
		shown := strconv.Quote(clip(name)) + "..."
		if what == "key" {
			shown = KeyDigest(name)
		}
		return fmt.Errorf("%s of %d bytes %s is longer than MaxPolicyTableName (%d)", what, len(name), shown, MaxPolicyTableName)
	}
	if name == "" && what == "plan" {
		return fmt.Errorf("empty plan name")
	}
	return nil
}

// checkTablePart returns an error for a part name a plan cannot hold.
func checkTablePart(part string) error {
	if part == "" {
		return nil
	}
	return checkPartName(part)
}

// fieldName returns a field of the table's HASH as an error names it:
// quoted, but for a key's entry, whose key shows as its digest (see
// KeyDigest), as limiters' errors show keys.
func fieldName(field string) string {
	if key, ok := strings.CutPrefix(field, tableEntryField); ok {
		return strconv.Quote(tableEntryField) + "+" + KeyDigest(key)
	}
	return strconv.Quote(clip(field))
}

// clip returns s cut to 64 bytes, for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64]
	}
	return s
}

// tableZoneAttr starts a policy's zone attribute.
const tableZoneAttr = ";zone="

// encodeTablePolicy returns p as the table keeps it in Redis.
func encodeTablePolicy(p Policy) string {
	s := strconv.Itoa(p.Limit) + "/" + strconv.FormatInt(int64(p.Window), 10)
	if p.Zone != "" {
		s += tableZoneAttr + p.Zone
	}
	return s
}

// decodeTablePolicy reads a policy as the table keeps it in Redis. It does
// not check the policy (see checkTablePolicy), but for a zone's text: one
// that is not a zone Policy.Zone takes is an error.
func decodeTablePolicy(s string) (Policy, error) {
	var zone string
	if i := strings.IndexByte(s, ';'); i >= 0 {
		attr := s[i:]
		if !strings.HasPrefix(attr, tableZoneAttr) || attr == tableZoneAttr {
			return Policy{}, fmt.Errorf("policy %q: unknown attribute %q", clip(s), clip(s[i+1:]))
		}
		zone, s = attr[len(tableZoneAttr):], s[:i]
		if strings.ContainsAny(zone, ";,\"\\ ") || len(zone) > maxTableZone {
			return Policy{}, fmt.Errorf("policy %q: zone %q is not a zone name", clip(s), clip(zone))
		}
		if err := checkPolicyZone(zone); err != nil {
			return Policy{}, fmt.Errorf("policy %q: %w", clip(s), err)
		}
	}
	p, err := decodeTableRate(s)
	p.Zone = zone
	return p, err
}

// maxTableZone is the longest zone name a table keeps: IANA names are
// under 40 bytes.
const maxTableZone = 64

// decodeTableRate reads the "<limit>/<window in ns>" of a policy.
func decodeTableRate(s string) (Policy, error) {
	l, w, ok := strings.Cut(s, "/")
	if !ok {
		return Policy{}, fmt.Errorf("policy %q is not <limit>/<window in ns>", clip(s))
	}
	limit, ok1 := parseTableNumber(l)
	window, ok2 := parseTableNumber(w)
	if !ok1 || !ok2 || int64(int(limit)) != limit {
		return Policy{}, fmt.Errorf("policy %q is not <limit>/<window in ns>, both decimal integers from 1 to 2^63-1", clip(s))
	}
	return Policy{Limit: int(limit), Window: time.Duration(window)}, nil
}

// parseTableNumber reads a decimal integer from 1 to 2^63-1, with no sign
// and no leading zero.
func parseTableNumber(s string) (int64, bool) {
	if s == "" || len(s) > 19 || s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// encodeTablePlan returns plan as the table keeps it in Redis, its parts
// in order.
func encodeTablePlan(plan Plan) string {
	parts := make([]string, 0, len(plan))
	for part := range plan {
		parts = append(parts, part)
	}
	slices.Sort(parts)
	var b strings.Builder
	for i, part := range parts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(part)
		b.WriteByte('"')
		b.WriteString(encodeTablePolicy(plan[part]))
	}
	return b.String()
}

// decodeTablePlan reads a plan as the table keeps it in Redis: its parts'
// names are checked, and their policies read but not checked.
func decodeTablePlan(s string) (Plan, error) {
	plan := Plan{}
	for rest := s; ; {
		if len(plan) == maxPlanParts {
			return nil, fmt.Errorf("plan %q has more than %d parts", clip(s), maxPlanParts)
		}
		if rest == "" || rest[0] != '"' {
			return nil, fmt.Errorf("plan %q is not \"<part>\"<policy>, joined by ','", clip(s))
		}
		end := strings.IndexByte(rest[1:], '"')
		if end < 0 {
			return nil, fmt.Errorf("plan %q: a part's name is not closed", clip(s))
		}
		part := rest[1 : 1+end]
		if err := checkTablePart(part); err != nil {
			return nil, fmt.Errorf("plan %q: %w", clip(s), err)
		}
		if _, dup := plan[part]; dup {
			return nil, fmt.Errorf("plan %q names part %q twice", clip(s), part)
		}
		rest = rest[2+end:]
		text, next, more := strings.Cut(rest, ",")
		p, err := decodeTablePolicy(text)
		if err != nil {
			return nil, fmt.Errorf("plan %q: part %q: %w", clip(s), part, err)
		}
		plan[part] = p
		if !more {
			return plan, nil
		}
		rest = next
	}
}

// encodeTableEntry returns a key's entry as the table keeps it in Redis.
func encodeTableEntry(e tableEntry) string {
	if e.plan != "" {
		return tablePlanRef + e.plan
	}
	return encodeTablePolicy(e.own)
}

// decodeTableEntry reads a key's entry as the table keeps it in Redis: a
// plan's name is checked, a policy read but not checked.
func decodeTableEntry(s string) (tableEntry, error) {
	if plan, ok := strings.CutPrefix(s, tablePlanRef); ok {
		if err := checkTableName("plan", plan); err != nil {
			return tableEntry{}, err
		}
		return tableEntry{plan: plan}, nil
	}
	p, err := decodeTablePolicy(s)
	return tableEntry{own: p}, err
}

// encodeTableFlag returns a flag as the table keeps it in Redis.
func encodeTableFlag(on bool) string {
	if on {
		return "1"
	}
	return "0"
}

// tableField is one field of the table's HASH as a replica reads it.
type tableField struct {
	kind  byte   // 'p' a key's entry, 'P' a plan, 'f' a flag; 0 a field of the scripts' own
	name  string // the key's, plan's or flag's
	del   bool   // the field is gone from the HASH
	entry tableEntry
	plan  Plan
	on    bool
}

// what names the kind of f's name: "key", "plan" or "flag".
func (f *tableField) what() string {
	switch f.kind {
	case 'p':
		return "key"
	case 'P':
		return "plan"
	}
	return "flag"
}

// decodeTableField reads one field of the table's HASH and its value, or
// that it is gone, and checks it as a write would: names and parts,
// and every policy by checkTablePolicy and then by check (nil: none),
// with the part it is for ("" for a key's own). The version is not a
// field this reads. It returns an error for a field that is not the
// table's own, or that fails a check.
func decodeTableField(field, value string, gone bool, check func(part string, p Policy) error) (tableField, error) {
	var f tableField
	switch {
	case strings.HasPrefix(field, tableEntryField):
		f.kind, f.name = 'p', field[len(tableEntryField):]
	case strings.HasPrefix(field, tablePlanField):
		f.kind, f.name = 'P', field[len(tablePlanField):]
	case strings.HasPrefix(field, tableFlagField):
		f.kind, f.name = 'f', field[len(tableFlagField):]
	case field == tableSeq || strings.HasPrefix(field, tableLogField) || strings.HasPrefix(field, tableCountField):
		return f, nil
	default:
		return f, fmt.Errorf("field %s is not one a table writes", fieldName(field))
	}
	if err := checkTableName(f.what(), f.name); err != nil {
		return f, fmt.Errorf("field %s: %w", fieldName(field), err)
	}
	if gone {
		f.del = true
		return f, nil
	}
	if len(value) > maxTableValueLen {
		return f, fmt.Errorf("field %s: a value of %d bytes, above %d", fieldName(field), len(value), maxTableValueLen)
	}
	var err error
	switch f.kind {
	case 'p':
		if f.entry, err = decodeTableEntry(value); err == nil && f.entry.plan == "" {
			err = checkTablePolicyFor(check, "", f.entry.own)
		}
	case 'P':
		if f.plan, err = decodeTablePlan(value); err == nil {
			err = checkTablePlan(check, f.plan)
		}
	case 'f':
		if value != "0" && value != "1" {
			err = fmt.Errorf("flag value %q is not 0 or 1", clip(value))
		}
		f.on = value == "1"
	}
	if err != nil {
		return f, fmt.Errorf("field %s: %w", fieldName(field), err)
	}
	return f, nil
}

// checkTablePolicyFor checks p, for part, by checkTablePolicy and then by
// check (nil: none), whose error it wraps with ErrInvalidConfig.
func checkTablePolicyFor(check func(string, Policy) error, part string, p Policy) error {
	if err := checkTablePolicy("policy", p); err != nil {
		return err
	}
	if (Policy{Limit: p.Limit, Window: p.Window, Zone: p.Zone}) != p {
		// A field of Policy this codec does not write would be lost.
		return fmt.Errorf("%w: policy %+v has a field a PolicyTable cannot store", ErrInvalidConfig, p)
	}
	if p.Zone != "" {
		if len(p.Zone) > maxTableZone || strings.ContainsAny(p.Zone, ";,\"\\ ") {
			return fmt.Errorf("%w: policy zone %q is not a zone name a PolicyTable stores", ErrInvalidConfig, clip(p.Zone))
		}
		if err := checkPolicyZone(p.Zone); err != nil {
			return fmt.Errorf("%w: policy zone %q: %w", ErrInvalidConfig, clip(p.Zone), err)
		}
		if periodOfNominal(p.Window) == 0 {
			return fmt.Errorf("%w: policy %d per %v has a zone, which only a calendar window's policy takes: its window must be a CalendarPeriod's nominal length (1m, 1h, 24h, 168h or 720h)", ErrInvalidConfig, p.Limit, p.Window)
		}
	}
	if check == nil {
		return nil
	}
	if err := check(part, p); err != nil {
		return fmt.Errorf("%w: policy %d per %v of part %q refused by the table's Check: %w", ErrInvalidConfig, p.Limit, p.Window, part, err)
	}
	return nil
}

// checkTablePlan checks a plan's parts and each of its policies (see
// checkTablePolicyFor).
func checkTablePlan(check func(string, Policy) error, plan Plan) error {
	if len(plan) == 0 || len(plan) > maxPlanParts {
		return fmt.Errorf("%w: a plan holds 1 to %d parts, not %d", ErrInvalidConfig, maxPlanParts, len(plan))
	}
	for part, p := range plan {
		if err := checkTablePart(part); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		if err := checkTablePolicyFor(check, part, p); err != nil {
			return err
		}
	}
	return nil
}
