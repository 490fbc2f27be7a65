package ratelimit

// Which server serves a key's calls, for a Guard's breaker per node (see
// breakers): the Redis limiters and a Composite of Redis parts name it on a
// Redis Cluster or Ring client, and every other limiter sends all its calls
// to one place.

// nodes returns the function that names the server of a call's keys, all
// in one hash slot (or with one hash tag): that of its first part's key;
// nil for in-process parts, or Redis parts on a client of one server.
func (c *Composite) nodes() func(key string) string {
	if c.remote == nil || !c.remote.send.ByNode() {
		return nil
	}
	send, keyOf := c.remote.send, c.parts[0].Key
	if keyOf == nil {
		return send.Node
	}
	return func(key string) string { return send.Node(keyOf(key)) }
}
