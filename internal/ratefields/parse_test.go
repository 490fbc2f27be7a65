package ratefields_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ratelimit-go/ratelimit/internal/ratefields"
)

func TestPoliciesAreReadWithTheirQuotaWindowAndUnit(t *testing.T) {
	type P = ratefields.PolicyItem
	tests := []struct {
		what   string
		values []string
		want   []P
	}{
		{"one policy", []string{`"default";q=10;w=5`}, []P{{Name: "default", Q: 10, W: 5}}},
		{"several, in order", []string{`"per-second";q=10;w=1, "per-hour";q=1000;w=3600`}, []P{{"per-second", 10, 1, ""}, {"per-hour", 1000, 3600, ""}}},
		{"a token as the name", []string{`burst;q=100;w=60`}, []P{{"burst", 100, 60, ""}}},
		{"a token with the bytes tokens may hold", []string{`*a1!#$%&'*+-.^_|~:/z;q=1`}, []P{{"*a1!#$%&'*+-.^_|~:/z", 1, 0, ""}}},
		{"a quoted name with escapes", []string{`"say \"hi\" \\ bye";q=1`}, []P{{`say "hi" \ bye`, 1, 0, ""}}},
		{"an empty string as the name", []string{`"";q=1`}, []P{{"", 1, 0, ""}}},
		{"no w: 0", []string{`"default";q=10`}, []P{{"default", 10, 0, ""}}},
		{"q=0", []string{`"closed";q=0;w=60`}, []P{{"closed", 0, 60, ""}}},
		{"a quota unit", []string{`"tokens";q=100000;w=60;qu="tokens"`}, []P{{"tokens", 100000, 60, "tokens"}}},
		{"calls in flight", []string{`"default";q=5;qu="concurrent-requests"`}, []P{{"default", 5, 0, "concurrent-requests"}}},
		{"parameters in any order", []string{`"a";w=2;qu="b";q=3`}, []P{{"a", 3, 2, "b"}}},
		{"a duplicate parameter: the last wins", []string{`"a";q=1;w=9;q=2`}, []P{{"a", 2, 9, ""}}},
		{"a duplicate parameter whose last value is bad skips the member", []string{`"a";q=1;q=-1, "b";q=2`}, []P{{"b", 2, 0, ""}}},
		{"unknown parameters ignored", []string{`"a";q=1;pk=:AAECAwQFBgcICQoLDA0ODw==:;x;y=?0;z=@1;u=%"caf%c3%a9";v=1.5`}, []P{{"a", 1, 0, ""}}},
		{"a space after ';'", []string{`"a"; q=1; w=2`}, []P{{"a", 1, 2, ""}}},
		{"spaces and tabs around commas", []string{"a;q=1 \t,\t b;q=2"}, []P{{"a", 1, 0, ""}, {"b", 2, 0, ""}}},
		{"no space after commas", []string{`a;q=1,b;q=2`}, []P{{"a", 1, 0, ""}, {"b", 2, 0, ""}}},
		{"several field lines are one list", []string{`a;q=1`, ` b;q=2, c;q=3 `}, []P{{"a", 1, 0, ""}, {"b", 2, 0, ""}, {"c", 3, 0, ""}}},
		{"an empty field line adds nothing", []string{`a;q=1`, ``, ` `, `b;q=2`}, []P{{"a", 1, 0, ""}, {"b", 2, 0, ""}}},
		{"15 digits", []string{`a;q=999999999999999;w=999999999999999`}, []P{{"a", 999999999999999, 999999999999999, ""}}},
		{"leading zeros", []string{`a;q=007;w=010`}, []P{{"a", 7, 10, ""}}},
		{"a member without q skipped", []string{`a;w=1, b;q=2`}, []P{{"b", 2, 0, ""}}},
		{"a negative q skipped", []string{`a;q=-1, b;q=2`}, []P{{"b", 2, 0, ""}}},
		{"a decimal q skipped", []string{`a;q=1.5, b;q=2`}, []P{{"b", 2, 0, ""}}},
		{"a string q skipped", []string{`a;q="1", b;q=2`}, []P{{"b", 2, 0, ""}}},
		{"a q without a value (true) skipped", []string{`a;q, b;q=2`}, []P{{"b", 2, 0, ""}}},
		{"w=0 skipped", []string{`a;q=1;w=0, b;q=2`}, []P{{"b", 2, 0, ""}}},
		{"a negative w skipped", []string{`a;q=1;w=-5, b;q=2`}, []P{{"b", 2, 0, ""}}},
		{"a decimal w skipped", []string{`a;q=1;w=0.5, b;q=2`}, []P{{"b", 2, 0, ""}}},
		{"a token qu skipped", []string{`a;q=1;qu=tokens, b;q=2`}, []P{{"b", 2, 0, ""}}},
		{"an empty qu skipped", []string{`a;q=1;qu="", b;q=2`}, []P{{"b", 2, 0, ""}}},
		{"an integer as the name skipped", []string{`1;q=1, b;q=2`}, []P{{"b", 2, 0, ""}}},
		{"a byte sequence as the name skipped", []string{`:YWJj:;q=1, b;q=2`}, []P{{"b", 2, 0, ""}}},
		{"a boolean as the name skipped", []string{`?1;q=1, b;q=2`}, []P{{"b", 2, 0, ""}}},
		{"a date as the name skipped", []string{`@1700000000;q=1, b;q=2`}, []P{{"b", 2, 0, ""}}},
		{"a display string as the name skipped", []string{`%"x";q=1, b;q=2`}, []P{{"b", 2, 0, ""}}},
		{"an inner list skipped", []string{`("a" b;x=1 );q=1, c;q=2`}, []P{{"c", 2, 0, ""}}},
		{"no member to keep: nil", []string{`a;w=1`}, nil},
		{"no field: nil", nil, nil},
		{"an empty field: nil", []string{``}, nil},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, ratefields.ParsePolicies(tt.values), tt.what)
	}
}

// malformed are fields that RFC 9651 fails to parse as lists, each after
// a valid member, so that the whole field is ignored.
var malformed = []struct{ what, v string }{
	{"a trailing comma", `x;q=1;r=1,`},
	{"a leading comma", `, x;q=1;r=1`},
	{"two commas", `x;q=1;r=1,, y;q=2;r=2`},
	{"16 digits", `x;q=1;r=1, y;q=1000000000000000;r=1000000000000000`},
	{"a sign alone", `x;q=1;r=1, y;q=-;r=-`},
	{"a trailing point", `x;q=1;r=1, y;q=1.;r=1.`},
	{"4 decimals", `x;q=1;r=1, y;q=1.2345;r=1.2345`},
	{"13 digits before a point", `x;q=1;r=1, y;q=1234567890123.5;r=1234567890123.5`},
	{"an unterminated string", `x;q=1;r=1, "y;q=1;r=1`},
	{"a bad escape", `x;q=1;r=1, "\y";q=1;r=1`},
	{"an escape at the end", `x;q=1;r=1, "y\`},
	{"a control byte in a string", "x;q=1;r=1, \"a\tb\";q=1;r=1"},
	{"a non-ASCII byte in a string", `x;q=1;r=1, "é";q=1;r=1`},
	{"a key with an upper-case letter", `x;q=1;r=1, y;Q=1;r=1`},
	{"a key starting with a digit", `x;q=1;r=1, y;1q=1;r=1`},
	{"a space before ';'", `x;q=1;r=1, y ;q=1;r=1`},
	{"a space around '='", `x;q=1;r=1, y;q= 1;r=1`},
	{"an empty parameter", `x;q=1;r=1, y;;q=1;r=1`},
	{"a bad boolean", `x;q=1;r=1, y;q=1;r=1;b=?2`},
	{"a byte sequence with a bad byte", `x;q=1;r=1, y;q=1;r=1;pk=:a*b=:`},
	{"an unterminated byte sequence", `x;q=1;r=1, y;q=1;r=1;pk=:YWJj`},
	{"a byte sequence of a lone sextet", `x;q=1;r=1, y;q=1;r=1;pk=:YWJjZ:`},
	{"a byte sequence padded wrong", `x;q=1;r=1, y;q=1;r=1;pk=:YQ=:`},
	{"a decimal date", `x;q=1;r=1, y;q=1;r=1;d=@1.5`},
	{"a display string with upper-case hex", `x;q=1;r=1, y;q=1;r=1;u=%"caf%C3%A9"`},
	{"a display string that is not UTF-8", `x;q=1;r=1, y;q=1;r=1;u=%"%ff"`},
	{"a display string without quotes", `x;q=1;r=1, y;q=1;r=1;u=%x`},
	{"an unterminated inner list", `x;q=1;r=1, (a b`},
	{"an inner list without spaces", `x;q=1;r=1, (a,b)`},
	{"junk after a member", `x;q=1;r=1, y;q=1;r=1 z`},
	{"a bare item that is none", `x;q=1;r=1, &;q=1;r=1`},
	{"a tab after ';'", "x;q=1;r=1, y;\tq=1;r=1"},
	{"a NUL byte after a member", "x;q=1;r=1\x00y"},
}

func TestMalformedFieldsAreIgnoredAsAWhole(t *testing.T) {
	for _, tt := range malformed {
		assert.Nil(t, ratefields.ParsePolicies([]string{tt.v}), tt.what)
		assert.Nil(t, ratefields.ParseLimits([]string{tt.v}), tt.what)
		// The same fault on a field line of its own.
		assert.Nil(t, ratefields.ParsePolicies([]string{`z;q=1`, tt.v}), tt.what)
	}
	// The same members as valid fields, without the faults.
	assert.Len(t, ratefields.ParsePolicies([]string{`x;q=1;r=1, "\\";q=1;r=1;pk=:YQ:;b=?1;d=@-1;u=%"caf%c3%a9"`}), 2)
	assert.Len(t, ratefields.ParseLimits([]string{`x;q=1;r=1, y;q=1;r=1;pk=:YQ==:, (a b), ();x`}), 2)
}

func TestLimitsAreReadWithTheirRemainingQuotaAndEffectiveWindow(t *testing.T) {
	type L = ratefields.LimitItem
	tests := []struct {
		what   string
		values []string
		want   []L
	}{
		{"one item", []string{`"default";r=7;t=3`}, []L{{"default", 7, 3}}},
		{"no t: -1", []string{`"default";r=7`}, []L{{"default", 7, -1}}},
		{"t=0", []string{`"default";r=7;t=0`}, []L{{"default", 7, 0}}},
		{"r=0", []string{`"default";r=0;t=2`}, []L{{"default", 0, 2}}},
		{"several with a partition key", []string{`"per-hour";r=990;pk=:AAECAwQFBgcICQoLDA0ODw==:, "per-second";r=0;t=1;pk=:AAECAwQFBgcICQoLDA0ODw==:`}, []L{{"per-hour", 990, -1}, {"per-second", 0, 1}}},
		{"a token as the name", []string{`burst;r=1`}, []L{{"burst", 1, -1}}},
		{"a quoted name with escapes", []string{`"a\"b\\c";r=1`}, []L{{`a"b\c`, 1, -1}}},
		{"a duplicate parameter: the last wins", []string{`a;r=1;t=5;r=2;t=6`}, []L{{"a", 2, 6}}},
		{"unknown parameters ignored", []string{`a;r=1;q=5;w;x=?1`}, []L{{"a", 1, -1}}},
		{"several field lines", []string{`a;r=1`, `b;r=2;t=3`}, []L{{"a", 1, -1}, {"b", 2, 3}}},
		{"15 digits", []string{`a;r=999999999999999;t=999999999999999`}, []L{{"a", 999999999999999, 999999999999999}}},
		{"no r skipped", []string{`a;t=1, b;r=2`}, []L{{"b", 2, -1}}},
		{"a negative r skipped", []string{`a;r=-1, b;r=2`}, []L{{"b", 2, -1}}},
		{"a decimal r skipped", []string{`a;r=1.0, b;r=2`}, []L{{"b", 2, -1}}},
		{"a negative t skipped", []string{`a;r=1;t=-1, b;r=2`}, []L{{"b", 2, -1}}},
		{"a decimal t skipped", []string{`a;r=1;t=1.5, b;r=2`}, []L{{"b", 2, -1}}},
		{"a boolean t skipped", []string{`a;r=1;t, b;r=2`}, []L{{"b", 2, -1}}},
		{"a string t skipped", []string{`a;r=1;t="1", b;r=2`}, []L{{"b", 2, -1}}},
		{"an integer name skipped", []string{`5;r=1, b;r=2`}, []L{{"b", 2, -1}}},
		{"an inner list skipped", []string{`(a);r=1, b;r=2`}, []L{{"b", 2, -1}}},
		{"no member to keep: nil", []string{`a;t=1`}, nil},
		{"malformed: nil", []string{`a;r=1, b;r=2,`}, nil},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, ratefields.ParseLimits(tt.values), tt.what)
	}
}

func TestNamesWithoutEscapesAreNotCopied(t *testing.T) {
	field := `"per-second";q=10;w=1, per-hour;q=1000;w=3600`
	allocs := testing.AllocsPerRun(100, func() {
		_ = ratefields.ParsePolicies([]string{field})
	})
	assert.LessOrEqual(t, allocs, 2.0, "the slice returned as it grows, and nothing else")
}

func FuzzParsePolicies(f *testing.F) {
	for _, v := range []string{`"default";q=10;w=5`, `a;q=1, "b\"";q=2;qu="tokens";w=3`, `(a b);q=1`, `x;q=1;pk=:YWJj:;d=@5;u=%"%c3%a9";v=1.5;b=?0`, `a;q=1,`, `"\`} {
		f.Add(v, "b;q=2")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, p := range ratefields.ParsePolicies([]string{a, b}) {
			if p.Q < 0 || p.W < 0 {
				t.Fatalf("%q, %q: %+v", a, b, p)
			}
		}
	})
}

func FuzzParseLimits(f *testing.F) {
	for _, v := range []string{`"default";r=7;t=3`, `a;r=1;pk=:AAECAwQFBgcICQoLDA0ODw==:, "b\\";r=0`, `(a);r=1`, `a;r=1;t=-1`, `a;r=1,,`} {
		f.Add(v, "b;r=2")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		items := ratefields.ParseLimits([]string{a, b})
		for _, l := range items {
			if l.R < 0 || l.T < -1 {
				t.Fatalf("%q, %q: %+v", a, b, l)
			}
		}
		// Two valid field lines are the list they make joined, when they
		// hold no spaces or tabs at their ends.
		if items != nil && a != "" && b != "" && strings.Trim(a, " \t") == a && strings.Trim(b, " \t") == b {
			assert.Equal(t, items, ratefields.ParseLimits([]string{a + ", " + b}), "%q, %q", a, b)
		}
	})
}
