package redistest

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// clusterSlots is the number of hash slots in a Redis Cluster.
	clusterSlots = 16384

	// clusterReadyTimeout bounds how long StartCluster waits for every node to
	// report a healthy cluster. Redis holds a fresh master's cluster state at
	// "fail" for about two seconds after startup, so this cannot be tiny.
	clusterReadyTimeout = 15 * time.Second
)

// Cluster is a Redis Cluster of master-only redis-server processes on
// 127.0.0.1, with the hash slots split evenly between them.
type Cluster struct {
	// Servers are the cluster's nodes; Servers[i] owns the i-th share of the
	// hash slots, in slot order.
	Servers []*Server
	// Addrs are the nodes' addresses, in the same order as Servers.
	Addrs []string
}

// StartCluster starts a Redis Cluster of masters nodes without replicas and
// waits until every node reports cluster_state:ok and knows all the others.
//
// Each node runs with --cluster-enabled yes and a node timeout of five
// seconds on a port whose cluster bus port (port+10000) was free as well. The
// nodes are stopped when the test and its subtests finish. StartCluster skips
// the test if redis-server is not installed and fails it if the cluster does
// not become healthy.
func StartCluster(tb testing.TB, masters int) *Cluster {
	tb.Helper()
	if masters < 1 || masters > clusterSlots {
		tb.Fatalf("redistest: StartCluster needs between 1 and %d masters, got %d", clusterSlots, masters)
	}
	binary := lookPath(tb)
	c, err := startCluster(binary, masters, func() (string, error) { return tb.TempDir(), nil })
	// Cleanups run last-registered first, so the directories TempDir made
	// are removed after this stop.
	tb.Cleanup(c.Stop)
	if err != nil {
		tb.Fatalf("redistest: %v\n%s", err, c.logTails())
	}
	return c
}

// startCluster starts masters nodes of binary, each in a directory dir
// returns, and forms them into a cluster. On error it returns the nodes it
// started, for their log tails and to be stopped.
func startCluster(binary string, masters int, dir func() (string, error)) (*Cluster, error) {
	c := &Cluster{}
	cfg := serverConfig{
		needBus: true,
		extra: func(port int, dir string) []string {
			return []string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(dir, "nodes-"+strconv.Itoa(port)+".conf"),
				"--cluster-node-timeout", "5000",
				// Make every node advertise 127.0.0.1 in MOVED replies and
				// CLUSTER SLOTS, never an address it guessed.
				"--cluster-announce-ip", "127.0.0.1",
			}
		},
	}
	for range masters {
		d, err := dir()
		if err != nil {
			return c, fmt.Errorf("start a cluster node: %w", err)
		}
		s, err := launchIn(binary, d, cfg)
		if err != nil {
			return c, fmt.Errorf("start a cluster node: %w\nredis-server log tail:\n%s", err, s.LogTail())
		}
		c.Servers = append(c.Servers, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	if err := c.form(); err != nil {
		return c, fmt.Errorf("form cluster of %d masters at %v: %w", masters, c.Addrs, err)
	}
	return c, nil
}

// form assigns the slots, introduces the nodes to each other and waits until
// every node sees a healthy cluster of all nodes.
func (c *Cluster) form() error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()

	admins := c.admins()
	defer closeAll(admins)

	n := len(c.Servers)
	for i, a := range admins {
		first, last := i*clusterSlots/n, (i+1)*clusterSlots/n-1
		if err := a.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", first, last).Err(); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE %d %d on %s: %w", first, last, c.Addrs[i], err)
		}
	}
	for _, s := range c.Servers[1:] {
		if err := admins[0].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", s.Port).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET 127.0.0.1 %d from %s: %w", s.Port, c.Addrs[0], err)
		}
	}

	for {
		notReady := c.state(ctx, admins)
		if notReady == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready within %v: %w", clusterReadyTimeout, notReady)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// state returns nil if every node, asked through admins (one client per
// node, in the order of c.Servers), reports cluster_state:ok and knows all
// the others, and otherwise what the first node that does not says.
func (c *Cluster) state(ctx context.Context, admins []*redis.Client) error {
	want := strconv.Itoa(len(c.Servers))
	for i, a := range admins {
		info, err := a.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("CLUSTER INFO on %s: %w", c.Addrs[i], err)
		}
		state, _ := infoField(info, "cluster_state")
		known, _ := infoField(info, "cluster_known_nodes")
		if state != "ok" || known != want {
			return fmt.Errorf("%s reports cluster_state:%s and cluster_known_nodes:%s, want ok and %s",
				c.Addrs[i], state, known, want)
		}
	}
	return nil
}

// healthy reports, as an error, whether every node of c answers and
// reports a healthy cluster of all of them now.
func (c *Cluster) healthy() error {
	ctx, cancel := context.WithTimeout(context.Background(), resetTimeout)
	defer cancel()
	admins := c.admins()
	defer closeAll(admins)
	return c.state(ctx, admins)
}

// admins returns a client for each node, in the order of c.Servers, that
// fails fast: one dial of at most a second, no retries.
func (c *Cluster) admins() []*redis.Client {
	admins := make([]*redis.Client, len(c.Servers))
	for i, s := range c.Servers {
		admins[i] = redis.NewClient(&redis.Options{
			Addr:        s.Addr,
			DialTimeout: time.Second,
			ReadTimeout: time.Second,
			MaxRetries:  -1,
		})
	}
	return admins
}

// closeAll closes every client.
func closeAll(clients []*redis.Client) {
	for _, a := range clients {
		_ = a.Close()
	}
}

// Stop stops every node of the cluster in parallel, as Server.Stop does for
// one server. Stop is idempotent and safe to call from several goroutines.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, s := range c.Servers {
		wg.Go(s.Stop)
	}
	wg.Wait()
}

// Client returns a go-redis cluster client seeded with all node addresses.
// opts may adjust the options before the client is created; Addrs is preset.
// The client is closed when the test finishes.
func (c *Cluster) Client(tb testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	tb.Helper()
	o := &redis.ClusterOptions{Addrs: append([]string(nil), c.Addrs...)}
	for _, opt := range opts {
		opt(o)
	}
	cc := redis.NewClusterClient(o)
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// logTails returns the log tails of all nodes, labelled by address.
func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, s := range c.Servers {
		fmt.Fprintf(&b, "redis-server %s log tail:\n%s\n", s.Addr, s.LogTail())
	}
	return b.String()
}
