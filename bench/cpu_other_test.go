//go:build !unix

package bench

import "time"

// processCPU returns 0: this system's CPU time is not read here, and the
// client-us/decision figure of the Redis rows is then 0.
func processCPU() time.Duration { return 0 }
