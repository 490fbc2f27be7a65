package redisbatch

import "flag"

// soak runs the random differential tests at their full size, as the root
// package's -soak does: go test ./internal/redisbatch -soak -timeout 3h -run
// TestScriptDiff (the package before -soak: go test hands the binary
// everything after the first flag it does not know, a package path too, and
// would test the current directory's package). Without it they run a
// quick size, which still crosses every kind, form and op, so that the
// README's test command stays short.
var soak = flag.Bool("soak", false, "run the random differential tests at full size")

// sized returns full under -soak and quick otherwise; under the race
// detector, which runs them about raceSlowdown times slower and has
// nothing to find in their one goroutine per stream, quick / raceSlowdown,
// so that the quick size takes about as long with -race as without.
func sized(quick, full int) int {
	if *soak {
		return full
	}
	return max(1, quick/raceSlowdown)
}
