package ratelimit

// kinds lists every limiter kind of this package. A new kind is its files
// (its limiters, its declaration, its script) and one line here.
var kinds = [...]kind{
	bucketKind{},
	gcraKind{},
	fixedWindowKind{},
	slidingLogKind{},
	slidingCounterKind{},
	calendarWindowKind{},
	concurrencyKind{},
}
