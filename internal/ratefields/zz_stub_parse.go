package ratefields

import "time"

type PolicyItem struct {
	Name string
	Q    int64
	W    int64
	QU   string
}
type LimitItem struct {
	Name string
	R    int64
	T    int64
}

func ParsePolicies(values []string) []PolicyItem                  { return nil }
func ParseLimits(values []string) []LimitItem                     { return nil }
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) { return 0, false }
func ParseReset(v string, now time.Time) (time.Duration, bool)      { return 0, false }
