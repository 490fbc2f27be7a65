package leasehold

import "time"

// Timer is the timer that extends a held lease: a *time.Timer, or a
// test's fake.
type Timer interface {
	Stop() bool
	Reset(d time.Duration) bool
}

// AfterFunc starts the system's timer of a held lease: time.AfterFunc,
// which starts no goroutine until it fires, when it calls f.
func AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
