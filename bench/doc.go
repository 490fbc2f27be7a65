// Package bench holds benchmarks that compare the in-process limiters of
// github.com/ratelimit-go/ratelimit with other Go rate limiters:
// golang.org/x/time/rate, github.com/sethvargo/go-limiter/memorystore and
// go.uber.org/ratelimit.
//
// It is its own module so that the library does not depend on the libraries
// it is compared with. There is no code to import here: everything is in the
// _test.go files. See README.md for what each benchmark measures and run.sh
// for the command that produced the figures in it.
package bench
