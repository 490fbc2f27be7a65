// Package bench holds benchmarks that compare the limiters of
// github.com/ratelimit-go/ratelimit with other Go rate limiters: in process,
// golang.org/x/time/rate, github.com/sethvargo/go-limiter/memorystore and
// go.uber.org/ratelimit; on Redis, github.com/go-redis/redis_rate/v10 and
// github.com/ulule/limiter/v3 with its Redis store. It also times the
// library's DenyCache under a flood and its httplimit middleware.
//
// It is its own module so that the library does not depend on the libraries
// it is compared with. There is no code to import here: everything is in the
// _test.go files. See README.md for what each benchmark measures and run.sh
// for the command that produced the figures in it.
package bench
