package ratefields

import (
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// CeilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// EffectiveWindow returns policy i's effective window in d, the t of its
// service limit item (draft-ietf-httpapi-ratelimit-headers-11, section
// 4.1.2): d.NextUnit(i) in whole seconds, rounded up, at least 1, or -1
// when d does not tell it.
func EffectiveWindow(d *ratelimit.Decision, i int) int64 {
	next, ok := d.NextUnit(i)
	if !ok {
		return -1
	}
	return max(CeilSeconds(next), 1)
}
