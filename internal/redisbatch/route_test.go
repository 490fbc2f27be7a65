package redisbatch

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestHashSlotMatchesRedisCluster(t *testing.T) {
	// The slots Redis's CLUSTER KEYSLOT gives for these keys.
	for key, want := range map[string]int{
		"":                     0,
		"123456789":            12739, // CRC16/XMODEM's check value 0x31C3
		"foo":                  12182,
		"user:1000":            1649,
		"{user1000}.following": 3443,
		"{user1000}.followers": 3443,
		"user1000":             3443,
		"foo{}{bar}":           8363,
		"foo{{bar}}zap":        4015,
		"foo{bar}{zap}":        5061,
		"bar":                  5061,
	} {
		assert.Equal(t, want, HashSlot(key), "slot of %q", key)
	}
}

func TestSlotTagsAreInTheirSlots(t *testing.T) {
	for slot, tag := range slotTags {
		s := string(tag[:])
		if strings.Trim(s, slotTagChars) != "" || HashSlot(s) != slot || HashSlot("{"+s+"}#a}b:c") != slot {
			t.Fatalf("slot %d: tag %q, in slot %d", slot, s, HashSlot(s))
		}
	}
}

func TestTokenKeyIsInTheKeysSlotWhereSlotsMatter(t *testing.T) {
	keys := []string{
		"ac}me", "}", "{}", "a{}b}", "}{", "{}{a}", "", "{", "a{b", "{a}", "}{a}",
		"{{a}}", "x{}{y}", "acme", "ratelimit:tb:10:360000000:ac}me",
		"ratelimit:gcra:5:1000:}", "tenant}:acme", ":x}", "rl:{}:u}1",
		"ratelimit:fw:3:60000:{tenant}:user",
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = "{}:ab"[r.IntN(5)]
		}
		keys = append(keys, string(b))
	}
	for _, route := range []route{routeSlot, routeAlone} {
		for _, key := range keys {
			for _, token := range []string{"req-1", "{t}", "a:b}", "}{"} {
				name := tokenKey(route, key, token)
				if HashSlot(name) != HashSlot(key) {
					t.Fatalf("route %d: the token key %q of %q is in slot %d, not %d", route, name, key, HashSlot(name), HashSlot(key))
				}
			}
		}
	}
}

func TestTokenKeyKeepsTheNamesThatWorked(t *testing.T) {
	for _, tc := range []struct {
		route     route
		key, want string
	}{
		// Every route: in braces, or under the key's own hash tag.
		{routeOne, "ratelimit:tb:10:100000:bob", "ratelimit:settled:{ratelimit:tb:10:100000:bob}:req-1"},
		{routeSlot, "ratelimit:tb:10:100000:bob", "ratelimit:settled:{ratelimit:tb:10:100000:bob}:req-1"},
		{routeTag, "a{b", "ratelimit:settled:{a{b}:req-1"},
		{routeSlot, "a{b", "ratelimit:settled:{a{b}:req-1"},
		{routeOne, "rl:{acme}:u}1", "ratelimit:settled:rl:{acme}:u}1:req-1"},
		{routeSlot, "rl:{acme}:u}1", "ratelimit:settled:rl:{acme}:u}1:req-1"},
		{routeAlone, "rl:{acme}:u}1", "ratelimit:settled:rl:{acme}:u}1:req-1"},
		// A single server and a Ring, where the slot does not matter: as
		// before for keys that braces cannot hold.
		{routeOne, "ac}me", "ratelimit:settled:ac}me:req-1"},
		{routeTag, "ac}me", "ratelimit:settled:ac}me:req-1"},
		{routeOne, "", "ratelimit:settled:{}:req-1"},
		{routeTag, "", "ratelimit:settled:{}:req-1"},
		// Where it matters, those keys follow their slot's tag.
		{routeSlot, "ac}me", "ratelimit:settled:{2bd}#ac}me:req-1"},
		{routeAlone, "ac}me", "ratelimit:settled:{2bd}#ac}me:req-1"},
		{routeSlot, "ratelimit:tb:10:360000000:ac}me", "ratelimit:settled:{69d}#ratelimit:tb:10:360000000:ac}me:req-1"},
		{routeSlot, "}", "ratelimit:settled:{2Rd}#}:req-1"},
		// "#" keeps the empty key's name apart from that of a key equal
		// to its slot's tag.
		{routeSlot, "", "ratelimit:settled:{06S}#:req-1"},
		{routeSlot, "06S", "ratelimit:settled:{06S}:req-1"},
	} {
		assert.Equal(t, tc.want, tokenKey(tc.route, tc.key, "req-1"), "route %d, key %q", tc.route, tc.key)
	}
}

func TestHashSlotOfIsTheSlotOfTheWholeKey(t *testing.T) {
	parts := []string{"", "{", "}", "{}", "a", "{a", "a}", "{a}", "}{", "x{y", "ratelimit:tb:10:1:", "rl:{t}:", "{{", "}}"}
	r := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		b := make([]byte, r.IntN(8))
		for i := range b {
			b[i] = "{}:ab"[r.IntN(5)]
		}
		parts = append(parts, string(b))
	}
	for _, prefix := range parts[:200] {
		for _, key := range parts {
			if got, want := HashSlotOf(prefix, key), HashSlot(prefix+key); got != want {
				t.Fatalf("HashSlotOf(%q, %q) = %d, HashSlot = %d", prefix, key, got, want)
			}
			a, b := hashTagOf(prefix, key)
			if tag := hashTag(prefix + key); tag != a+b {
				t.Fatalf("hashTagOf(%q, %q) = %q + %q, hashTag = %q", prefix, key, a, b, tag)
			}
		}
	}
}
