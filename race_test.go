//go:build race

package ratelimit

// raceEnabled tells whether the tests run under the race detector, whose
// sync.Pool drops a quarter of what it is given, at random: allocation
// counts of a path that takes from a pool are exact only without it.
const raceEnabled = true
