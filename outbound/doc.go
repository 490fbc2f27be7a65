// Package outbound keeps a service's calls to other people's APIs within
// their limits: an http.RoundTripper (Transport), and through package
// grpclimit gRPC client interceptors, that wait for a limiter before each
// call and learn the upstream's limits from its answers.
//
// An Upstream holds three things: a ratelimit.Limiter, the budget you
// configure (on Redis, one budget for the whole fleet); a Store, what the
// upstream's answers taught (in Redis, shared by the fleet); and the
// parsers that read the answers. Calls are partitioned by a key, per host
// by default: per credential or per route with Transport.Partition.
//
//	limiter := ratelimit.Must(ratelimit.NewRedisGCRA(rdb, 10, time.Second, // the upstream's documented 10/s
//		ratelimit.WithPolicyFunc(outbound.LearnedPolicy)))
//	up := ratelimit.Must(outbound.New(limiter, outbound.Config{Store: ratelimit.Must(outbound.NewRedisStore(rdb, ""))}))
//	client := &http.Client{Transport: &outbound.Transport{Upstream: up}}
//
// # What answers teach
//
// The default parsers (DefaultParsers) read:
//
//   - a 429, and a 429 or 503 with a Retry-After (seconds or an
//     HTTP-date): the partition is paused until then (a 429 without one,
//     for Config.LimitedPause);
//   - the RateLimit field of draft-ietf-httpapi-ratelimit-headers-11: an
//     item with r=0 and a t pauses the partition for t seconds;
//   - its RateLimit-Policy field: a limit of q calls per w seconds (q
//     units of Config.Unit, tokens say, for a limiter that counts them)
//     lowers the limiter's, never above what you configured, until an
//     answer states another (a larger one brings the limiter back up, at
//     most to its own) or Config.Forget passes without one;
//   - the vendor fields X-RateLimit-Remaining and X-RateLimit-Reset (a
//     Unix time, seconds or a duration), with their -Requests and
//     -Tokens forms: a remaining count of 0 pauses until the reset.
//
// The fields are read with the code that writes them in package
// httplimit, so that a client of this package and a server of that one
// speak one language. VendorHeaders and a Parser of your own read others.
// What the parsers read is merged the cautious way: the longest pause and
// the tightest limit win. Nothing an upstream sends can raise the limit
// above the limiter's own or pause a partition longer than
// Config.MaxPause; a field that does not parse tells nothing.
//
// # What a fleet shares, and what it cannot promise
//
// With a RedisStore, a pause or a limit one replica reads holds for every
// replica from its next call: each call reads the partition's state
// before it asks the limiter, one extra round trip. The pause's end is
// kept in the Redis server's time, as a duration from when the answer was
// read, so replicas whose clocks disagree agree on it. What it cannot
// promise:
//
//   - Calls already admitted when an answer is read are sent: with many
//     callers, some calls cross a 429 in flight and are refused too.
//   - An absolute time in a field (an HTTP-date, a Unix time) is read
//     against the answer's Date field when it has one, which removes the
//     skew between the upstream's clock and ours but for Date's whole
//     seconds; without a Date, against our clock, and the skew between
//     the two is in the pause.
//   - The upstream's window and ours are not aligned: a limit configured
//     exactly as the upstream's can still meet a 429 when the two count
//     from different instants, or when the upstream's clock runs fast.
//   - When answers that state different limits cross, the last one read
//     wins until the next.
//   - A Store that fails (Redis down) is reported (StoreFailed) and calls
//     go on by the limiter alone; wrap the limiter in a ratelimit.Guard
//     to choose what happens when it fails too.
//
// # Waits and retries
//
// A call waits for the limiter's next unit and for a pause to end, with
// jitter, never past Config.MaxWait or its context's deadline: one that
// would is refused at once with an error wrapping ErrLimited. Retries are
// off unless Transport.Retries is set, and then only for requests that
// can be replayed (see Transport).
//
// # Observability
//
// Config.Observer hears every Event: waits, refusals, upstream 429s,
// pauses, learned limits, retries, and the store's failures. Package
// otelratelimit turns them into OpenTelemetry metrics.
package outbound
