// Package demoredis gives the example programs a Redis: the server at
// REDIS_ADDR when it is set, or else an embedded one (miniredis) listening on
// 127.0.0.1, so every example runs with no setup.
package demoredis

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Redis is a Redis server for an example and a client to it.
type Redis struct {
	// Client is connected to Addr with retries off, as the ratelimit README
	// recommends for limiters.
	Client *redis.Client
	// Addr is the server's host:port.
	Addr string

	mini *miniredis.Miniredis
	now  time.Time // the embedded server's clock, once frozen
}

// Open connects to REDIS_ADDR, or starts an embedded server when it is unset.
func Open() (*Redis, error) {
	r := &Redis{Addr: os.Getenv("REDIS_ADDR")}
	if r.Addr == "" {
		r.mini = miniredis.NewMiniRedis()
		if err := r.mini.StartAddr("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("start embedded Redis: %w", err)
		}
		r.Addr = r.mini.Addr()
	}
	r.Client = redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := r.Client.Ping(ctx).Err(); err != nil {
		r.Close()
		return nil, fmt.Errorf("Redis at %s: %w", r.Addr, err)
	}
	return r, nil
}

// Describe says which server this is.
func (r *Redis) Describe() string {
	if r.mini != nil {
		return fmt.Sprintf("embedded Redis (miniredis) on %s; set REDIS_ADDR to use a real server", r.Addr)
	}
	return "Redis at " + r.Addr
}

// Embedded reports whether the server is the embedded one.
func (r *Redis) Embedded() bool { return r.mini != nil }

// FreezeClock stops the embedded server's clock (TIME and key expiry) at the
// current time, so that from then on it moves only by Wait and the example's
// output is the same on every run. It does nothing to a real server.
func (r *Redis) FreezeClock() {
	if r.mini != nil && r.now.IsZero() {
		r.now = time.Now()
		r.mini.SetTime(r.now)
	}
}

// Wait lets d pass for the server: an embedded server's clock is frozen (see
// FreezeClock) and moved on by d at once; on a real server Wait sleeps.
func (r *Redis) Wait(d time.Duration) {
	if r.mini == nil {
		time.Sleep(d)
		return
	}
	r.FreezeClock()
	r.now = r.now.Add(d)
	r.mini.SetTime(r.now)
	r.mini.FastForward(d)
}

// Close closes the client and stops the embedded server, if any.
func (r *Redis) Close() {
	_ = r.Client.Close()
	if r.mini != nil {
		r.mini.Close()
	}
}
