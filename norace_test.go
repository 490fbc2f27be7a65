//go:build !race

package ratelimit

// raceEnabled is false without the race detector (see race_test.go).
const raceEnabled = false
