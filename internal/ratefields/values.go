package ratefields

import (
	"strconv"

	"github.com/ratelimit-go/ratelimit"
)

// BufSize is the room a caller of AppendValues keeps on its stack for the
// values: enough for one policy of a name of 40 bytes with numbers of up
// to 10 digits. Longer values, and several policies, grow the buffer on
// the heap.
const BufSize = 96

// AppendValues appends to b the values of the fields of d that change with
// each decision, and returns the extended slice with the ends of the first
// two in it: with b empty, out[:rem] is RateLimit-Remaining, out[rem:rst]
// RateLimit-Reset (also Retry-After's value on a denial) and out[rst:]
// RateLimit. d is a decision whose policies are ps (ps[bound] the one that
// bound it, which must exist), a denial when deny is true; pk is the
// partition key's parameter (see PartitionKey), or "". The caller makes
// one string of out, which backs all three values: one allocation for a
// decision of one policy when b is a buffer of BufSize on its stack.
//
// RateLimit-Remaining is d's Remaining, at least 0. RateLimit-Reset is the
// seconds until the key is back to its full limit (every policy's, d's
// ResetAfter), rounded up; on a denial it is the Retry-After value
// instead: d's RetryAfter in whole seconds, rounded up, at least 1.
//
// RateLimit, appended only when items is true, lists the service limit of
// each policy (draft-ietf-httpapi-ratelimit-headers-11, section 4): the
// bound policy's first, with r its Remaining, and then, when d is allowed
// and holds each policy's Result (a Composite's Parts), every other
// policy's, in order, with its own units remaining. Each item's t is that
// policy's effective window (see EffectiveWindow), left out when d does
// not tell it; on a denial, the one item is the bound policy's, whose t is
// the Retry-After value, as section 6 asks (Retry-After not before the end
// of the effective window). Each item ends with pk.
func AppendValues(b []byte, ps []Policy, bound int, d *ratelimit.Decision, deny, items bool, pk string) (out []byte, rem, rst int) {
	remaining := int64(max(d.Remaining, 0))
	reset := CeilSeconds(d.ResetAfter)
	if deny {
		reset = max(CeilSeconds(d.RetryAfter), 1)
	}
	b = strconv.AppendInt(b, remaining, 10)
	rem = len(b)
	b = strconv.AppendInt(b, reset, 10)
	rst = len(b)
	if !items {
		return b, rem, rst
	}
	// `"per-second";r=3;t=1, "per-hour";r=998;t=3600`
	if deny {
		return AppendItem(b, ps[bound].BeforeR, remaining, reset, pk), rem, rst
	}
	b = AppendItem(b, ps[bound].BeforeR, remaining, EffectiveWindow(d, bound), pk)
	if d.Parts != nil && len(d.Parts) == len(ps) {
		for i := range ps {
			if i != bound {
				b = append(b, ", "...)
				b = AppendItem(b, ps[i].BeforeR, int64(max(d.Parts[i].Remaining, 0)), EffectiveWindow(d, i), pk)
			}
		}
	}
	return b, rem, rst
}

// AppendItem appends to b one service limit item of RateLimit: beforeR
// (a Policy's BeforeR, `"default";r=`), r, ";t=" and t unless t < 0, and
// pk.
func AppendItem(b []byte, beforeR string, r, t int64, pk string) []byte {
	b = append(b, beforeR...)
	b = strconv.AppendInt(b, r, 10)
	if t >= 0 {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, t, 10)
	}
	return append(b, pk...)
}
