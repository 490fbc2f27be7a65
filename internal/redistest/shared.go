package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// sharedClusterMasters is the number of masters of a cluster
	// SharedCluster hands out.
	sharedClusterMasters = 3

	// resetTimeout bounds how long handing a shared server back may take:
	// a server that does not answer in time (killed, paused) is stopped
	// instead of handed out again.
	resetTimeout = 2 * time.Second
)

// pool holds the servers and clusters that Shared and SharedCluster hand
// out, each to one test at a time, until StopShared stops them.
type pool struct {
	mu       sync.Mutex
	servers  []*Server  // idle servers, flushed
	clusters []*Cluster // idle clusters, flushed
	started  []*Server  // every process started for the pool, cluster nodes included
	dirs     []string   // the directories of started, removed by StopShared
}

// shared is the test binary's pool: servers outlive the test that started
// them, so that the next test needs no start of its own.
var shared pool

// Shared returns a running redis-server that the test has to itself until
// it and its subtests finish, without starting one when an idle one is
// left by a test that has finished: the servers are started on demand and
// kept for the whole test binary, so a test binary that uses Shared must
// call StopShared from its TestMain after m.Run.
//
// The server runs with Start's defaults and no extra arguments. When the
// test finishes, the server is emptied (FLUSHALL), its script cache
// flushed (SCRIPT FLUSH) and its statistics reset (CONFIG RESETSTAT), so
// that the next test finds it as a fresh one; a server that does not
// answer then, because the test killed, stopped or paused it, is stopped
// and never handed out again. A test that reconfigures the server, or
// needs it gone or frozen, should still use Start, which gives it a server
// of its own. Shared is safe for concurrent use; it skips the test if
// redis-server is not installed and fails it if the server does not come
// up.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	binary := lookPath(tb)
	s := shared.takeServer()
	if s == nil {
		dir, err := shared.newDir()
		if err != nil {
			tb.Fatalf("redistest: shared redis-server: %v", err)
		}
		s, err = launchIn(binary, dir, serverConfig{extra: func(int, string) []string { return nil }})
		if err != nil {
			tb.Fatalf("redistest: start shared redis-server: %v\nredis-server log tail:\n%s", err, s.LogTail())
		}
		shared.mu.Lock()
		shared.started = append(shared.started, s)
		shared.mu.Unlock()
	}
	tb.Cleanup(func() {
		if err := resetServer(s.Addr); err != nil {
			tb.Logf("redistest: shared redis-server %s not handed out again: %v", s.Addr, err)
			s.Stop()
			return
		}
		shared.mu.Lock()
		shared.servers = append(shared.servers, s)
		shared.mu.Unlock()
	})
	return s
}

// SharedCluster returns a running Redis Cluster of three masters, as
// StartCluster(tb, 3) does, that the test has to itself until it and its
// subtests finish. Like Shared, it starts one only when no idle one is
// left, keeps them for the whole test binary (StopShared stops them), and
// empties every master (FLUSHALL, SCRIPT FLUSH, CONFIG RESETSTAT) when the
// test finishes; a cluster any of whose nodes does not answer then, or no
// longer reports a healthy cluster, is stopped and never handed out again.
// A test that kills, pauses or reconfigures a node should still use
// StartCluster. SharedCluster is safe for concurrent use.
func SharedCluster(tb testing.TB) *Cluster {
	tb.Helper()
	binary := lookPath(tb)
	c := shared.takeCluster()
	if c == nil {
		var err error
		c, err = startCluster(binary, sharedClusterMasters, shared.newDir)
		shared.mu.Lock()
		shared.started = append(shared.started, c.Servers...)
		shared.mu.Unlock()
		if err != nil {
			c.Stop()
			tb.Fatalf("redistest: shared cluster: %v\n%s", err, c.logTails())
		}
	}
	tb.Cleanup(func() {
		if err := resetCluster(c); err != nil {
			tb.Logf("redistest: shared cluster %v not handed out again: %v", c.Addrs, err)
			c.Stop()
			return
		}
		shared.mu.Lock()
		shared.clusters = append(shared.clusters, c)
		shared.mu.Unlock()
	})
	return c
}

// StopShared stops every server and cluster node Shared and SharedCluster
// started, in parallel, and removes their directories. Call it from
// TestMain after m.Run (before a goroutine leak check: each running server
// has a goroutine waiting for its process). Servers still handed out are
// stopped too. Shared and SharedCluster start new ones if called after it.
func StopShared() {
	shared.mu.Lock()
	started, dirs := shared.started, shared.dirs
	shared.started, shared.dirs, shared.servers, shared.clusters = nil, nil, nil, nil
	shared.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range started {
		wg.Go(s.Stop)
	}
	wg.Wait()
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}

// takeServer removes an idle server from the pool and returns it, or nil.
func (p *pool) takeServer() *Server {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.servers) == 0 {
		return nil
	}
	s := p.servers[len(p.servers)-1]
	p.servers = p.servers[:len(p.servers)-1]
	return s
}

// takeCluster removes an idle cluster from the pool and returns it, or nil.
func (p *pool) takeCluster() *Cluster {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.clusters) == 0 {
		return nil
	}
	c := p.clusters[len(p.clusters)-1]
	p.clusters = p.clusters[:len(p.clusters)-1]
	return c
}

// newDir makes a fresh directory for a pooled server, removed by
// StopShared.
func (p *pool) newDir() (string, error) {
	d, err := os.MkdirTemp("", "redistest-shared-")
	if err != nil {
		return "", fmt.Errorf("make a directory: %w", err)
	}
	p.mu.Lock()
	p.dirs = append(p.dirs, d)
	p.mu.Unlock()
	return d, nil
}

// resetServer empties the server at addr as a fresh one is: no keys, no
// cached scripts, no command statistics.
func resetServer(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), resetTimeout)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second, ContextTimeoutEnabled: true})
	defer func() { _ = c.Close() }()
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.FlushAll(ctx)
		p.ScriptFlush(ctx)
		p.ConfigResetStat(ctx)
		return nil
	})
	if err != nil {
		return err
	}
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return fmt.Errorf("%s: %w", cmd.Name(), err)
		}
	}
	return nil
}

// resetCluster empties every master of c as resetServer does, and checks
// that each still reports a healthy cluster of all of them.
func resetCluster(c *Cluster) error {
	var errs []error
	for _, s := range c.Servers {
		if err := resetServer(s.Addr); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Addr, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.healthy()
}
