//go:build race

package otelratelimit_test

const raceEnabled = true
