package ratefields_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/ratefields"
)

func TestPolicyNamesAreQuotedAsStructuredFieldStrings(t *testing.T) {
	tests := []struct {
		name, want string
	}{
		{"default", `"default"`},
		{`say "hi"`, `"say \"hi\""`},
		{`back\slash`, `"back\\slash"`},
		{" ", `" "`},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, ratefields.Quote(tt.name), tt.name)
		assert.True(t, ratefields.ValidName(tt.name), tt.name)
	}
}

func TestPolicyNamesOutsidePrintableASCIIAreRejectedAtTheirFirstBadByte(t *testing.T) {
	tests := []struct {
		what, name string
		bad        int
		valid      bool
	}{
		{"printable ASCII", "per-hour", -1, true},
		{"empty", "", -1, false},
		{"a control byte", "a\tb", 1, false},
		{"DEL", "ab\x7f", 2, false},
		{"UTF-8", "héllo", 1, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.bad, ratefields.BadByte(tt.name), tt.what)
		assert.Equal(t, tt.valid, ratefields.ValidName(tt.name), tt.what)
	}
}

func TestTimesAreWholeSecondsRoundedUp(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0},
		{0, 0},
		{time.Nanosecond, 1},
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{3599500 * time.Millisecond, 3600},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, ratefields.CeilSeconds(tt.d), tt.d.String())
	}
}

func TestPolicyItemsCarryQWInWholeSecondsAndQu(t *testing.T) {
	tests := []struct {
		what     string
		name     string
		limit    int
		window   time.Duration
		inFlight bool
		unit     string
		want     string
	}{
		{"a window in whole seconds", "per-hour", 1000, time.Hour, false, "", `"per-hour";q=1000;w=3600`},
		{"a window rounded up", "default", 10, 1500 * time.Millisecond, false, "", `"default";q=10;w=2`},
		{"no w without a window", "default", 10, 0, false, "", `"default";q=10`},
		{"a quota unit as qu", "tokens", 100000, time.Minute, false, "tokens", `"tokens";q=100000;w=60;qu="tokens"`},
		{"calls in flight: their unit and no w", "default", 5, time.Minute, true, "tokens", `"default";q=5;qu="concurrent-requests"`},
		{"a quoted name", `a"b`, 1, time.Second, false, "", `"a\"b";q=1;w=1`},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, ratefields.Item(tt.name, tt.limit, tt.window, tt.inFlight, tt.unit), tt.what)
	}
}

func TestQuotaUnitsApplyToPoliciesThatCountUnitsOnly(t *testing.T) {
	units := ratelimit.NamedPolicy{Name: "u"}
	perCall := ratelimit.NamedPolicy{Name: "c", PerCall: true}
	inFlight := ratelimit.NamedPolicy{Name: "f", InFlight: true}
	assert.Equal(t, "tokens", ratefields.UnitOf(units, "tokens"))
	assert.Empty(t, ratefields.UnitOf(perCall, "tokens"))
	assert.Empty(t, ratefields.UnitOf(inFlight, "tokens"))
}

func TestPoliciesSentTogetherListEveryItemAndStartTheirOwnRateLimitItem(t *testing.T) {
	policies := []ratelimit.NamedPolicy{
		{Name: "per-second", Policy: ratelimit.Policy{Limit: 10, Window: time.Second}},
		{Name: "per-hour", Policy: ratelimit.Policy{Limit: 1000, Window: time.Hour}},
	}
	ps := ratefields.NewPolicies(policies, "")
	require.Len(t, ps, 2)
	list := `"per-second";q=10;w=1, "per-hour";q=1000;w=3600`
	assert.Equal(t, ratefields.Policy{Name: "per-second", Limit: 10, Q: "10", Item: `"per-second";q=10;w=1`, List: list, BeforeR: `"per-second";r=`}, ps[0])
	assert.Equal(t, ratefields.Policy{Name: "per-hour", Limit: 1000, Q: "1000", Item: `"per-hour";q=1000;w=3600`, List: list, BeforeR: `"per-hour";r=`}, ps[1])
}

func TestAPolicySentAloneListsItselfAndAnUnknownLimitIsZero(t *testing.T) {
	alone := ratefields.NewPolicy(ratelimit.NamedPolicy{Name: "default", Policy: ratelimit.Policy{Limit: 5, Window: time.Minute}, InFlight: true}, "tokens")
	assert.Equal(t, ratefields.Policy{Name: "default", Limit: 5, Q: "5", Item: `"default";q=5;qu="concurrent-requests"`, List: `"default";q=5;qu="concurrent-requests"`, BeforeR: `"default";r=`, InFlight: true}, alone)

	unknown := ratefields.NewPolicy(ratelimit.NamedPolicy{Name: "default", Policy: ratelimit.Policy{Limit: -1}}, "")
	assert.Equal(t, 0, unknown.Limit)
	assert.Equal(t, "0", unknown.Q)
	assert.Equal(t, `"default";q=0`, unknown.Item)
}

// values returns AppendValues' three values as strings.
func values(ps []ratefields.Policy, bound int, d *ratelimit.Decision, deny, items bool, pk string) (remaining, reset, rateLimit string) {
	var buf [ratefields.BufSize]byte
	b, rem, rst := ratefields.AppendValues(buf[:0], ps, bound, d, deny, items, pk)
	s := string(b)
	return s[:rem], s[rem:rst], s[rst:]
}

func TestValuesAreTheDecisionsFields(t *testing.T) {
	one := ratefields.NewPolicies([]ratelimit.NamedPolicy{{Name: "default", Policy: ratelimit.Policy{Limit: 10}}}, "")
	two := ratefields.NewPolicies([]ratelimit.NamedPolicy{
		{Name: "per-second", Policy: ratelimit.Policy{Limit: 10}},
		{Name: "per-hour", Policy: ratelimit.Policy{Limit: 1000}},
	}, "")
	allowed := &ratelimit.Decision{
		Result:   ratelimit.Result{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 2500 * time.Millisecond},
		Policies: []ratelimit.NamedPolicy{{Name: "default", Policy: ratelimit.Policy{Limit: 10}}},
	}
	denied := &ratelimit.Decision{
		Result:   ratelimit.Result{Limit: 10, Remaining: -3, ResetAfter: 9 * time.Second, RetryAfter: 1200 * time.Millisecond},
		Policies: allowed.Policies,
	}
	deniedNow := &ratelimit.Decision{Result: ratelimit.Result{Limit: 10}, Policies: allowed.Policies}
	composite := &ratelimit.Decision{
		Result:      ratelimit.Result{Allowed: true, Limit: 1000, Remaining: 990, ResetAfter: time.Hour},
		Policies:    []ratelimit.NamedPolicy{{Name: "per-second", Policy: ratelimit.Policy{Limit: 10}}, {Name: "per-hour", Policy: ratelimit.Policy{Limit: 1000}}},
		PolicyIndex: 1,
		Parts:       []ratelimit.Result{{Allowed: true, Limit: 10, Remaining: -1}, {Allowed: true, Limit: 1000, Remaining: 990}},
	}
	pk := ";pk=:AAAAAAAAAAAAAAAAAAAAAA==:"
	tests := []struct {
		what                        string
		ps                          []ratefields.Policy
		bound                       int
		d                           *ratelimit.Decision
		deny, items                 bool
		pk                          string
		remaining, reset, rateLimit string
	}{
		{"an allowed decision: reset rounded up, no t when the decision does not tell it", one, 0, allowed, false, true, "", "7", "3", `"default";r=7`},
		{"no RateLimit item unless asked", one, 0, allowed, false, false, "", "7", "3", ""},
		{"a denial: reset and t are Retry-After, rounded up", one, 0, denied, true, true, "", "0", "2", `"default";r=0;t=2`},
		{"a denial due now still waits a second", one, 0, deniedNow, true, true, "", "0", "1", `"default";r=0;t=1`},
		{"a partition key ends the item", one, 0, allowed, false, true, pk, "7", "3", `"default";r=7` + pk},
		{"a Composite's parts: the bound one first, then the others in order, each with its own r and pk", two, 1, composite, false, true, pk, "990", "3600", `"per-hour";r=990` + pk + `, "per-second";r=0` + pk},
		{"a denial of a Composite lists the bound part alone", two, 1, composite, true, true, "", "990", "1", `"per-hour";r=990;t=1`},
	}
	for _, tt := range tests {
		remaining, reset, rateLimit := values(tt.ps, tt.bound, tt.d, tt.deny, tt.items, tt.pk)
		assert.Equal(t, tt.remaining, remaining, tt.what)
		assert.Equal(t, tt.reset, reset, tt.what)
		assert.Equal(t, tt.rateLimit, rateLimit, tt.what)
	}
}

func TestValuesGiveEachItemItsEffectiveWindowInWholeSeconds(t *testing.T) {
	// A bucket of 10 refilling 10 a second has its next unit within 100 ms
	// of a take (t=1); one of 1000 refilling 1000 an hour, within 3.6 s
	// (t=4 unless the test is 0.6 s late between the take and Format).
	fast, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 10)
	require.NoError(t, err)
	slow, err := ratelimit.NewTokenBucket(ratelimit.PerHour(1000), 1000)
	require.NoError(t, err)
	c, err := ratelimit.NewComposite(ratelimit.Part{Name: "per-second", Limiter: fast}, ratelimit.Part{Name: "per-hour", Limiter: slow})
	require.NoError(t, err)
	d, err := c.Decide(context.Background(), "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)

	ps := ratefields.NewPolicies(d.Policies, "")
	_, _, rateLimit := values(ps, d.PolicyIndex, &d, false, true, "")
	items := map[string]string{}
	for _, item := range strings.Split(rateLimit, ", ") {
		name, rest, _ := strings.Cut(item, ";")
		items[name] = rest
	}
	assert.Equal(t, map[string]string{`"per-second"`: "r=9;t=1", `"per-hour"`: "r=999;t=4"}, items)
	assert.True(t, strings.HasPrefix(rateLimit, ps[d.PolicyIndex].BeforeR), "the bound policy's item comes first: %s", rateLimit)
	assert.Equal(t, int64(1), ratefields.EffectiveWindow(&d, 0))
	assert.Equal(t, int64(-1), ratefields.EffectiveWindow(&d, 2), "no such policy")
}

func TestPartitionKeysAreAnHMACOfTheKeyThatNeverShowsIt(t *testing.T) {
	secret := []byte("0123456789abcdef")
	pk := ratefields.PartitionKey(secret, "alice")
	assert.Regexp(t, `^;pk=:[A-Za-z0-9+/]{22}==:$`, pk, "16 bytes as a structured-field byte sequence")
	assert.NotContains(t, pk, "alice")
	assert.Equal(t, pk, ratefields.PartitionKey([]byte("0123456789abcdef"), "alice"), "the same secret and key give the same pk")
	assert.NotEqual(t, pk, ratefields.PartitionKey(secret, "bob"), "another key")
	assert.NotEqual(t, pk, ratefields.PartitionKey([]byte("0123456789abcdeF"), "alice"), "another secret")
}

func TestQuotaUnitsAreLowerCaseTokensOfAtMost64Bytes(t *testing.T) {
	tests := []struct {
		unit string
		ok   bool
	}{
		{"requests", true},
		{"content-bytes", true},
		{"tokens2", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"", false},
		{"Tokens", false},
		{"2tokens", false},
		{"-tokens", false},
		{"to kens", false},
		{`to"kens`, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.ok, ratefields.ValidQuotaUnit(tt.unit), tt.unit)
	}
}

func TestIPv6PrefixesDefaultTo64AndStayWithin0To128(t *testing.T) {
	tests := []struct {
		prefix, bits int
		ok           bool
	}{
		{0, 64, true}, {1, 1, true}, {48, 48, true}, {128, 128, true},
		{-1, 0, false}, {129, 0, false},
	}
	for _, tt := range tests {
		bits, ok := ratefields.IPv6Bits(tt.prefix)
		assert.Equal(t, tt.ok, ok, "prefix %d", tt.prefix)
		assert.Equal(t, tt.bits, bits, "prefix %d", tt.prefix)
	}
}

func TestClientAddressesAreKeyedAsIPv4OrByTheirIPv6Prefix(t *testing.T) {
	tests := []struct {
		what, addr string
		bits       int
		want       string
		in6        bool
	}{
		{"IPv4 as it is", "192.0.2.1", 64, "192.0.2.1", false},
		{"IPv4-mapped as IPv4", "::ffff:192.0.2.1", 64, "192.0.2.1", true},
		{"NAT64 as IPv4", "64:ff9b::c000:201", 64, "192.0.2.1", true},
		{"SIIT as IPv4", "::ffff:0:c000:201", 64, "192.0.2.1", true},
		{"IPv6 by its /64", "2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64", false},
		{"IPv6 by its /48", "2001:db8:1:2:3:4:5:6", 48, "2001:db8:1::/48", false},
		{"IPv6 alone at 128", "2001:db8::1", 128, "2001:db8::1", false},
		{"a zone dropped", "fe80::1%eth0", 128, "fe80::1", false},
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		assert.Equal(t, tt.in6, ratefields.IsIPv4In6(a), tt.what)
		assert.Equal(t, tt.want, ratefields.AddrKey(ratefields.Normalize(a), tt.bits), tt.what)
	}
}

func TestPlannedNamesTheOnePolicyAfterItsKeysPlanWhenTheNameCanBeSent(t *testing.T) {
	one := []ratelimit.NamedPolicy{{Name: "default", Policy: ratelimit.Policy{Limit: 10, Window: time.Minute}}}
	plans := map[string]string{"bob": "pro", "eve": "", "mallory": "pro\n"}
	plan := func(key string) (string, bool) { p, ok := plans[key]; return p, ok }

	named, ok := ratefields.Planned(one, plan, "bob")
	assert.True(t, ok)
	assert.Equal(t, "pro", named[0].Name)
	assert.Equal(t, "default", one[0].Name, "the Decision's own slice is not written")
	for _, key := range []string{"carol", "eve", "mallory"} {
		kept, ok := ratefields.Planned(one, plan, key)
		assert.False(t, ok, key)
		assert.Equal(t, one, kept, key)
	}
	_, ok = ratefields.Planned(one, nil, "bob")
	assert.False(t, ok)
	_, ok = ratefields.Planned(append(one, one[0]), plan, "bob")
	assert.False(t, ok, "a limiter of several policies")
}
