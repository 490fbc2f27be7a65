package ratelimit

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"

	"go.uber.org/goleak"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// TestMain stops the real servers the tests shared, then fails the run if
// any test left a goroutine behind: the limiters start none, and every test
// stops the clients and servers it starts.
//
// The tests that run in parallel wait on servers (miniredis, redis-server)
// about as much as they compute, so twice GOMAXPROCS of them run at once
// unless -parallel says otherwise.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(2*runtime.GOMAXPROCS(0))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	code := m.Run()
	redistest.StopShared()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
