package redisbatch

import (
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
