package bench

import (
	"testing"
	"time"
)

// TestConfigurations checks the arithmetic the benchmarks rely on.
func TestConfigurations(t *testing.T) {
	if hotInterval != 10*time.Nanosecond {
		t.Errorf("hotInterval = %v, want 10ns", hotInterval)
	}
	if hotPeriod != 10485760*time.Nanosecond {
		t.Errorf("hotPeriod = %v, want 10.48576ms", hotPeriod)
	}
	gcd := func(a, b int) int {
		for b != 0 {
			a, b = b, a%b
		}
		return a
	}
	for _, s := range strides {
		if gcd(s%numParallelKeys, numParallelKeys) != 1 {
			t.Errorf("stride %d shares a factor with %d: a goroutine would not visit every key", s, numParallelKeys)
		}
	}
	keys := benchKeys(numMemoryKeys)
	if keys[0] != "key:0" || keys[numMemoryKeys-1] != "key:999999" {
		t.Errorf("keys run from %q to %q", keys[0], keys[numMemoryKeys-1])
	}
}

// TestMutexAndSyncMaps checks the hand-rolled x/time/rate maps limit per key.
func TestMutexAndSyncMaps(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for name, allow := range map[string]func(string, time.Time, int) bool{
		"mutexmap": newMutexRateMap(1, 2).allowN,
		"syncmap":  newSyncRateMap(1, 2).allowN,
	} {
		got := []bool{allow("a", now, 1), allow("a", now, 1), allow("a", now, 1), allow("b", now, 1)}
		want := []bool{true, true, false, true}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: call %d allowed = %v, want %v", name, i, got[i], want[i])
			}
		}
	}
}
