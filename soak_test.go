package ratelimit

import "flag"

// soak runs the random differential tests, floods and many-key tests at
// their full size: go test -race -soak -timeout 30m . (CI runs it as a step
// of its own, after the README's test command). Without it they run with
// fewer rounds, steps, calls or keys, each still crossing every case it
// exists for, so that the README's test command stays short.
var soak = flag.Bool("soak", false, "run the random differential tests, floods and many-key tests at full size")

// sized returns full under -soak and quick otherwise.
func sized(quick, full int) int {
	if *soak {
		return full
	}
	return quick
}
