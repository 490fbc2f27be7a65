package ratelimit

// Must returns v, and panics with err if err is not nil. It is for limiters
// and middleware whose arguments are written in the program, as
// regexp.MustCompile is for patterns, so that a mistake stops the program
// as it starts:
//
//	limiter := ratelimit.Must(ratelimit.NewTokenBucket(ratelimit.PerSecond(5), 10))
//	h := ratelimit.Must(httplimit.PerIP(limiter, api))
//
// Never use it on values read at run time (a configuration file, a
// request): check their error, which names what is wrong. No function of
// this module panics on its own; Must is the one that does, when asked to.
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
