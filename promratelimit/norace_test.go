//go:build !race

package promratelimit_test

const raceEnabled = false
