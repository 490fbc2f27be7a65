package redisbatch

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// oddKeys are keys whose braces, colons and '#' lie in every place that
// matters to a name, with random keys of those bytes.
func oddKeys(n int) []string {
	keys := []string{
		"", "a", "alice", "{", "}", "{}", "}{", "{a}", "{a}#", "{a}#b", "{a}b", "{{a}}",
		"a{b", "a}b", "ac}me", "{}{a}", "x{}{y}", "{acme}", "{acme}:alice", "{acme}:alice:x",
		"x:y", "{abc}#", "{ab}#c", "{06S}#", "06S", "{2bd}#ac}me", "tenant}:acme", "rl:{}:u}1",
		"{a}#{a}", "#", "{#}", "{a}}", "{a}{b}",
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range n {
		b := make([]byte, r.IntN(9))
		for i := range b {
			b[i] = "{}:#ab"[r.IntN(6)]
		}
		keys = append(keys, string(b))
	}
	return keys
}

func TestStoredKeysOfTwoKeysNeverMeet(t *testing.T) {
	seen := map[string]string{}
	for _, key := range oddKeys(20000) {
		name := StoredKey("", "", key)
		if other, ok := seen[name]; ok && other != key {
			t.Fatalf("keys %q and %q are both stored at %q", other, key, name)
		}
		seen[name] = key
		if got := KeyOf(name); got != key {
			t.Fatalf("the name %q of %q reads back as %q", name, key, got)
		}
	}
}

func TestAStoredKeyIsInTheSlotOfItsKey(t *testing.T) {
	for _, key := range oddKeys(20000) {
		for _, prefix := range []string{"", "ratelimit:tb:10:100000:", "ratelimit:cal:keyed:5:day:UTC:"} {
			for _, seg := range []string{"", "month:Europe/Berlin:"} {
				name := StoredKey(prefix, seg, key)
				if HashSlot(name) != HashSlot(key) {
					t.Fatalf("%q, the name of %q, is in slot %d, not %d", name, key, HashSlot(name), HashSlot(key))
				}
				if !strings.HasPrefix(name, prefix+seg) {
					t.Fatalf("%q, the name of %q, does not start with %q", name, key, prefix+seg)
				}
			}
		}
	}
}

func TestStoredKeysKeepTheCallersHashTag(t *testing.T) {
	for _, tc := range []struct{ key, want, tag string }{
		{"alice", "p:{alice}", "alice"},
		{"a{b", "p:{a{b}", "a{b"},
		{"{acme}:alice", "p:{acme}:alice", "acme"},
		{"u:{acme}", "p:u:{acme}", "acme"},
		{"{acme}", "p:{acme}#{acme}", "acme"},
		{"{acme}#x", "p:{acme}#{acme}#x", "acme"},
		{"ac}me", "p:{2bd}#ac}me", "2bd"},
		{"", "p:{06S}#", "06S"},
	} {
		name := StoredKey("p:", "", tc.key)
		assert.Equal(t, tc.want, name, "key %q", tc.key)
		// A Ring shards by the hash tag's text, which parts of one key
		// (or of keys of one tag) thus share.
		assert.Equal(t, tc.tag, hashTag(name), "key %q", tc.key)
	}
}

// TestTokenKeysOfTwoPairsNeverMeet holds the pairs whose names met when a
// token's key was the key and the token joined by ':'.
func TestTokenKeysOfTwoPairsNeverMeet(t *testing.T) {
	for _, pair := range [][2][2]string{
		{{"{acme}:alice", "x:y"}, {"{acme}:alice:x", "y"}},
		{{"a", "b:c"}, {"a:b", "c"}},
		{{"ac}me", "x:y"}, {"ac}me:x", "y"}},
		{{"", "a:b"}, {":a", "b"}},
		{{"p:{u}", "1"}, {"p:{u}:1", ""}},
	} {
		a, b := pair[0], pair[1]
		assert.NotEqual(t, tokenKey(a[0], a[1]), tokenKey(b[0], b[1]), "(%q, %q) and (%q, %q)", a[0], a[1], b[0], b[1])
	}
	seen := map[string][2]string{}
	keys := oddKeys(3000)
	for _, key := range keys {
		for _, token := range []string{"req-1", "{t}", "a:b}", "}{", ":", "1:a", "x"} {
			name := tokenKey(key, token)
			if other, ok := seen[name]; ok && other != [2]string{key, token} {
				t.Fatalf("(%q, %q) and (%q, %q) both name %q", other[0], other[1], key, token, name)
			}
			seen[name] = [2]string{key, token}
		}
	}
}

func TestATokenKeyIsInItsKeysSlot(t *testing.T) {
	for _, key := range oddKeys(20000) {
		for _, token := range []string{"req-1", "{t}", "a:b}", "}{", "{", "{x}{y}"} {
			for _, stored := range []string{key, StoredKey("ratelimit:tb:10:100000:", "", key)} {
				name := tokenKey(stored, token)
				if HashSlot(name) != HashSlot(stored) {
					t.Fatalf("the token key %q of %q is in slot %d, not %d", name, stored, HashSlot(name), HashSlot(stored))
				}
				if !strings.HasPrefix(name, tokenPrefix) {
					t.Fatalf("the token key %q of %q does not start with %q", name, stored, tokenPrefix)
				}
			}
		}
	}
}

func TestTokenKeyNames(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"ratelimit:tb:10:100000:{bob}", "ratelimit:settled:28:ratelimit:tb:10:100000:{bob}:req-1"},
		{"rl:{acme}:u}1", "ratelimit:settled:13:rl:{acme}:u}1:req-1"},
		{"ac}me", "ratelimit:settled:{2bd}5:ac}me:req-1"},
		{"", "ratelimit:settled:{06S}0::req-1"},
	} {
		assert.Equal(t, tc.want, tokenKey(tc.key, "req-1"), "key %q", tc.key)
	}
}

// A ring hashes a stored key's hash tag: storedTag names it without the
// stored key, so that a Guard finds a key's shard without making its name.
func TestStoredTagIsTheHashTagOfEveryStoredKey(t *testing.T) {
	for _, key := range oddKeys(20000) {
		for _, prefix := range []string{"", "ratelimit:tb:10:100000:"} {
			name := StoredKey(prefix, "month:Europe/Berlin:", key)
			if got, want := storedTag(key), hashTag(name); got != want {
				t.Fatalf("storedTag(%q) = %q, but the hash tag of its name %q is %q", key, got, name, want)
			}
		}
	}
}
