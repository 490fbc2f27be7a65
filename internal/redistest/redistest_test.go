package redistest_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// requireGone checks that none of the processes exists any more.
func requireGone(t *testing.T, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		require.NotZero(t, pid)
		err := syscall.Kill(pid, 0)
		assert.ErrorIsf(t, err, syscall.ESRCH, "redis-server pid %d still exists", pid)
	}
}

// noRetry makes a client fail fast: no command retries, a single dial attempt
// (go-redis otherwise dials five times, 100 ms apart, per command attempt) and
// a 200 ms read timeout.
func noRetry(o *redis.Options) {
	o.MaxRetries = -1
	o.DialerRetries = 1
	o.ReadTimeout = 200 * time.Millisecond
	o.DialTimeout = 200 * time.Millisecond
}

func TestServer(t *testing.T) {
	var pids []int

	t.Run("lifecycle", func(t *testing.T) {
		ctx := context.Background()
		s := redistest.Start(t)
		require.NotZero(t, s.Pid())
		pids = append(pids, s.Pid())
		assert.Equal(t, fmt.Sprintf("127.0.0.1:%d", s.Port), s.Addr)
		assert.LessOrEqual(t, s.Port, 55535)

		c := s.Client(t)
		require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
		got, err := c.Get(ctx, "k").Result()
		require.NoError(t, err)
		assert.Equal(t, "v", got)
		assert.Contains(t, s.LogTail(), "Ready to accept connections")

		fast := s.Client(t, noRetry)
		require.NoError(t, fast.Ping(ctx).Err())

		s.Pause()
		begin := time.Now()
		err = fast.Get(ctx, "k").Err()
		elapsed := time.Since(begin)
		require.Error(t, err)
		var netErr net.Error
		require.ErrorAs(t, err, &netErr)
		assert.True(t, netErr.Timeout(), "want a timeout, got %v", err)
		assert.Less(t, elapsed, 2*time.Second)

		s.Resume()
		got, err = fast.Get(ctx, "k").Result()
		require.NoError(t, err)
		assert.Equal(t, "v", got)

		oldPid := s.Pid()
		s.Restart(t)
		require.NotZero(t, s.Pid())
		pids = append(pids, s.Pid())
		assert.NotEqual(t, oldPid, s.Pid())
		requireGone(t, oldPid)
		require.NoError(t, c.Ping(ctx).Err())
		assert.ErrorIs(t, c.Get(ctx, "k").Err(), redis.Nil)
		require.NoError(t, c.Set(ctx, "k", "v2", 0).Err())

		killed := s.Pid()
		s.Kill()
		assert.Equal(t, 0, s.Pid())
		requireGone(t, killed)
		assert.Error(t, fast.Ping(ctx).Err())
		assert.Error(t, fast.Get(ctx, "k").Err())
	})

	t.Run("extra args", func(t *testing.T) {
		s := redistest.Start(t, "--maxmemory", "1mb")
		pids = append(pids, s.Pid())
		got, err := s.Client(t).ConfigGet(context.Background(), "maxmemory").Result()
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"maxmemory": "1048576"}, got)
	})

	t.Run("stop is idempotent and concurrent", func(t *testing.T) {
		s := redistest.Start(t)
		pid := s.Pid()
		pids = append(pids, pid)

		// A paused server must still stop promptly, not after the grace period.
		s.Pause()
		begin := time.Now()
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(s.Stop)
		}
		wg.Wait()
		assert.Less(t, time.Since(begin), 2*time.Second)
		requireGone(t, pid)
		assert.Equal(t, 0, s.Pid())

		s.Stop()
		s.Kill()
		s.Pause()
		s.Resume()
		assert.Equal(t, 0, s.Pid())

		// A stopped server can be brought back.
		s.Restart(t)
		pids = append(pids, s.Pid())
		require.NoError(t, s.Client(t).Ping(context.Background()).Err())
	})

	requireGone(t, pids...)
}

func TestStartSkipsWithoutRedisServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var inner *testing.T
	t.Run("inner", func(t *testing.T) {
		inner = t
		redistest.Start(t)
		t.Error("Start returned although redis-server is not on PATH")
	})
	assert.True(t, inner.Skipped())
}

func TestCluster(t *testing.T) {
	var pids []int

	t.Run("keys spread across masters", func(t *testing.T) {
		ctx := context.Background()
		cl := redistest.StartCluster(t, 3)
		require.Len(t, cl.Servers, 3)
		require.Len(t, cl.Addrs, 3)
		for i, s := range cl.Servers {
			require.NotZero(t, s.Pid())
			pids = append(pids, s.Pid())
			assert.Equal(t, s.Addr, cl.Addrs[i])
			assert.LessOrEqual(t, s.Port, 55535)
		}

		cc := cl.Client(t)
		const keys = 200
		for i := range keys {
			require.NoError(t, cc.Set(ctx, fmt.Sprintf("key:%d", i), i, 0).Err())
		}
		for i := range keys {
			got, err := cc.Get(ctx, fmt.Sprintf("key:%d", i)).Int()
			require.NoError(t, err)
			assert.Equal(t, i, got)
		}

		var mu sync.Mutex
		perMaster := map[string]int64{}
		require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			n, err := c.DBSize(ctx).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			perMaster[c.Options().Addr] = n
			return nil
		}))
		require.Len(t, perMaster, 3)
		var total int64
		for _, addr := range cl.Addrs {
			n, ok := perMaster[addr]
			require.Truef(t, ok, "no master at %s; masters: %v", addr, perMaster)
			assert.Positivef(t, n, "master %s owns no keys", addr)
			total += n
		}
		assert.Equal(t, int64(keys), total)
	})

	requireGone(t, pids...)
}

// Environment variables that turn TestHelperProcess into a child process.
const (
	helperModeEnv = "REDISTEST_HELPER_MODE"
	helperPidEnv  = "REDISTEST_HELPER_PIDFILE"
)

// TestHelperProcess is not a real test: TestProcessDeath runs the test binary
// again with only this test and helperModeEnv set. It starts a server, writes
// the server's pid to a file and then panics or hangs until killed.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperModeEnv)
	if mode == "" {
		t.Skip("helper for TestProcessDeath")
	}
	s := redistest.Start(t)
	pidFile := os.Getenv(helperPidEnv)
	tmp := pidFile + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(strconv.Itoa(s.Pid())), 0o600))
	require.NoError(t, os.Rename(tmp, pidFile))
	switch mode {
	case "panic":
		panic("deliberate panic to check that cleanups stop the server")
	case "hang":
		time.Sleep(time.Minute)
	}
}

// TestProcessDeath checks that a server dies with its test binary: through
// t.Cleanup when the test panics, and through Pdeathsig when the binary is
// killed without running cleanups.
func TestProcessDeath(t *testing.T) {
	if os.Getenv(helperModeEnv) != "" {
		t.Skip("running as a helper process")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed; install it (apt-get install -y redis-server) to run the real-Redis tests")
	}
	for _, mode := range []string{"panic", "hang"} {
		t.Run(mode, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			var out bytes.Buffer
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), helperModeEnv+"="+mode, helperPidEnv+"="+pidFile)
			cmd.Stdout = &out
			cmd.Stderr = &out
			require.NoError(t, cmd.Start())
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-exited
			})

			var pid int
			require.Eventuallyf(t, func() bool {
				b, err := os.ReadFile(pidFile)
				if err != nil {
					return false
				}
				pid, err = strconv.Atoi(string(b))
				return err == nil
			}, 10*time.Second, 10*time.Millisecond, "helper wrote no pid; output:\n%s", &out)

			if mode == "hang" {
				require.NoError(t, cmd.Process.Kill())
			}
			select {
			case err := <-exited:
				exited <- err // for the cleanup
				require.Error(t, err, "helper output:\n%s", &out)
			case <-time.After(10 * time.Second):
				t.Fatalf("helper did not exit; output:\n%s", &out)
			}
			if mode == "panic" {
				assert.Contains(t, out.String(), "deliberate panic")
			}
			// After SIGKILL of the helper, the orphaned server is reaped by
			// init, so it may briefly linger as a zombie; that counts as dead.
			assert.Eventuallyf(t, func() bool { return !alive(pid) }, 5*time.Second, 10*time.Millisecond,
				"redis-server pid %d outlived its test binary", pid)
		})
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}
