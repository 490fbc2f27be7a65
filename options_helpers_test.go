package ratelimit

// redisOpts returns opts, each of which must be a SharedOption, as
// RedisOptions: the tests keep one []Option for an in-process limiter and
// its Redis twin.
func redisOpts(opts []Option) []RedisOption {
	out := make([]RedisOption, len(opts))
	for i, o := range opts {
		out[i] = o.(SharedOption)
	}
	return out
}

// localOpts returns opts, each of which must be a SharedOption, as Options.
func localOpts(opts []RedisOption) []Option {
	out := make([]Option, len(opts))
	for i, o := range opts {
		out[i] = o.(SharedOption)
	}
	return out
}
