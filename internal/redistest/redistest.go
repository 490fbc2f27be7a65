// Package redistest starts throwaway, real redis-server processes for tests.
//
// Every server listens only on 127.0.0.1 and persists nothing. Start and
// StartCluster give a test servers of its own, which keep their data
// directory and log in a per-test temporary directory and are stopped by
// process id when the test finishes (also when it fails or panics). Shared
// and SharedCluster hand a test a server or cluster kept for the whole test
// binary, emptied between tests, which saves a start per test; StopShared,
// called from TestMain, stops them. If redis-server is not installed, the
// helpers skip the calling test instead of failing it.
//
// The helpers call tb.Fatalf and tb.Skip, so they must be called from the
// goroutine running the test, like any other testing.TB method that stops the
// test.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// maxPort is the highest port handed to a server, so that the cluster bus
	// port (port+10000) is always a valid TCP port.
	maxPort = 65535 - 10000

	// clusterBusOffset is the distance between a cluster node's client port
	// and its cluster bus port.
	clusterBusOffset = 10000

	// bindAttempts is how often a server is started on a fresh port when the
	// previous port turned out to be taken.
	bindAttempts = 5

	// readyTimeout bounds how long a server may take to answer PING.
	readyTimeout = 5 * time.Second

	// stopGrace is how long Stop waits after SIGTERM before sending SIGKILL.
	stopGrace = 2 * time.Second

	// logTailBytes is how much of the end of the server log LogTail returns.
	logTailBytes = 4 << 10

	// skipMessage is the reason given when redis-server is not installed.
	skipMessage = "redis-server not installed; install it (apt-get install -y redis-server) to run the real-Redis tests"
)

// Server is one redis-server process listening on 127.0.0.1.
//
// Its methods are safe for concurrent use. Stop, Kill, Pause and Resume act on
// the currently running process and do nothing when no process is running.
type Server struct {
	// Addr is the address clients connect to, in the form "127.0.0.1:port".
	Addr string
	// Port is the TCP port the server listens on; it stays the same across
	// Restart.
	Port int

	binary  string   // absolute path of redis-server
	args    []string // complete argument list, port included
	dir     string   // working directory, also holding the log
	logPath string   // file receiving the server's stdout and stderr

	mu   sync.Mutex // serialises process changes; held for a whole Stop
	proc *process   // the running process, nil when none is running
}

// process is one started redis-server process and the result of reaping it.
type process struct {
	cmd     *exec.Cmd
	done    chan struct{} // closed once cmd.Wait has returned
	waitErr error         // result of cmd.Wait, readable after done is closed
}

// exited reports whether the process has already been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// serverConfig describes how to build the command line for a new server.
type serverConfig struct {
	// needBus requests that port+10000 is free as well, for the cluster bus.
	needBus bool
	// extra returns the arguments appended after the defaults for the chosen
	// port and data directory.
	extra func(port int, dir string) []string
}

// Start starts a redis-server on a free port of 127.0.0.1 and waits until it
// answers PING.
//
// The server runs with --save "" and --appendonly no in a fresh temporary
// directory, so nothing it stores survives a restart. extraArgs are appended
// to the command line after the defaults, for example "--maxmemory", "1mb".
// The server is stopped when the test and its subtests finish. Start skips the
// test if redis-server is not installed and fails it if the server does not
// come up.
func Start(tb testing.TB, extraArgs ...string) *Server {
	tb.Helper()
	extra := append([]string(nil), extraArgs...)
	return start(tb, serverConfig{
		extra: func(int, string) []string { return extra },
	})
}

// start finds redis-server, then starts it on fresh ports until one binds.
func start(tb testing.TB, cfg serverConfig) *Server {
	tb.Helper()
	binary := lookPath(tb)
	s, err := launchIn(binary, tb.TempDir(), cfg)
	if err != nil {
		tb.Fatalf("redistest: start redis-server: %v\nredis-server log tail:\n%s", err, s.LogTail())
	}
	// Registered after TempDir, so it runs before the directory is removed.
	tb.Cleanup(s.Stop)
	return s
}

// lookPath returns the absolute path of redis-server, or skips the test.
func lookPath(tb testing.TB) string {
	tb.Helper()
	binary, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Skip(skipMessage)
	}
	return binary
}

// launchIn starts binary with its data directory and log in dir, on fresh
// ports until one binds, and waits until it answers PING. It returns the
// Server also on error, for its LogTail; no process runs then.
func launchIn(binary, dir string, cfg serverConfig) (*Server, error) {
	s := &Server{
		binary:  binary,
		dir:     dir,
		logPath: filepath.Join(dir, "redis-server.log"),
	}
	var lastErr error
	for range bindAttempts {
		port, err := freePort(cfg.needBus)
		if err != nil {
			return s, fmt.Errorf("find a free port: %w", err)
		}
		s.Port = port
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.args = append([]string{
			"--bind", "127.0.0.1",
			"--port", strconv.Itoa(port),
			"--save", "",
			"--appendonly", "no",
			"--dir", dir,
			"--protected-mode", "yes",
		}, cfg.extra(port, dir)...)

		err = s.launch()
		if err == nil {
			return s, nil
		}
		lastErr = err
		if !isPortInUse(err) {
			break
		}
	}
	return s, lastErr
}

// portInUseError reports a start that failed because a port was already
// taken, so that trying again (on another port, or later) may succeed.
type portInUseError struct{ err error }

func (e *portInUseError) Error() string { return "port already in use: " + e.err.Error() }
func (e *portInUseError) Unwrap() error { return e.err }

// isPortInUse reports whether err is a portInUseError.
func isPortInUse(err error) bool {
	var pe *portInUseError
	return errors.As(err, &pe)
}

// launch starts one process with s.args and waits until it answers PING. On
// error the process has been killed and reaped.
func (s *Server) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.exited() {
		return fmt.Errorf("redis-server already running as pid %d", s.proc.cmd.Process.Pid)
	}

	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open log file: %w", err)
	}
	logStart, err := logFile.Seek(0, io.SeekEnd)
	if err != nil {
		_ = logFile.Close()
		return fmt.Errorf("seek log file: %w", err)
	}
	cmd := exec.Command(s.binary, s.args...)
	cmd.Dir = s.dir
	cmd.Stdout = logFile // an *os.File is handed to the child directly
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	_ = logFile.Close() // the child holds its own descriptor
	if err != nil {
		return fmt.Errorf("exec %s: %w", s.binary, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	s.proc = p

	if err := waitReady(s.Addr, cmd.Process.Pid, p.done, readyTimeout); err != nil {
		p.stop(0)
		if s.logSince(logStart, "Address already in use") {
			return &portInUseError{err: err}
		}
		return err
	}
	return nil
}

// logSince reports whether the log, from byte offset off on, contains substr.
func (s *Server) logSince(off int64, substr string) bool {
	f, err := os.Open(s.logPath)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return false
	}
	b, err := io.ReadAll(f)
	return err == nil && strings.Contains(string(b), substr)
}

// Pid returns the process id of the running redis-server, or 0 if no process
// is running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Stop shuts the server down: it sends SIGTERM (and SIGCONT, in case the
// server is paused), waits up to two seconds for the process to exit, then
// sends SIGKILL, and reaps the process. Stop is idempotent and safe to call
// from several goroutines; every call returns once the process is gone.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.stop(stopGrace)
	}
}

// Kill sends SIGKILL to the server and waits until the process is gone,
// simulating a crash. It does nothing if the server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.stop(0)
	}
}

// Pause freezes the server with SIGSTOP. Connections stay open, but the
// server answers nothing until Resume, Stop or Kill is called.
func (s *Server) Pause() {
	s.signal(syscall.SIGSTOP)
}

// Resume lets a server frozen by Pause continue with SIGCONT.
func (s *Server) Resume() {
	s.signal(syscall.SIGCONT)
}

// signal sends sig to the running process, if any.
func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.exited() {
		// The only failure is that the process has just exited.
		_ = s.proc.cmd.Process.Signal(sig)
	}
}

// Restart stops the server if it is running and starts a new process on the
// same port with the same arguments, then waits until it answers PING. The
// data set is empty afterwards, since nothing is persisted. Restart fails the
// test if the server does not come back.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Stop()
	var err error
	// The port stays the same, so a bind failure can only be waited out.
	for attempt := range bindAttempts {
		if attempt > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		if err = s.launch(); err == nil || !isPortInUse(err) {
			break
		}
	}
	if err != nil {
		tb.Fatalf("redistest: restart redis-server on %s: %v\nredis-server log tail:\n%s", s.Addr, err, s.LogTail())
	}
}

// Client returns a go-redis client for the server. opts may adjust the
// options before the client is created; Addr is preset. The client is closed
// when the test finishes.
func (s *Server) Client(tb testing.TB, opts ...func(*redis.Options)) *redis.Client {
	tb.Helper()
	o := &redis.Options{Addr: s.Addr}
	for _, opt := range opts {
		opt(o)
	}
	c := redis.NewClient(o)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// LogTail returns the last few KiB of everything the server processes have
// written to stdout and stderr, for use in failure messages.
func (s *Server) LogTail() string {
	f, err := os.Open(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if off := info.Size() - logTailBytes; off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return fmt.Sprintf("(no log: %v)", err)
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

// stop ends the process: with a positive grace it sends SIGTERM and SIGCONT
// and waits up to grace before SIGKILL; otherwise it sends SIGKILL at once.
// It returns after the process has been reaped.
func (p *process) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	// Signal goes through the process handle (a pidfd on Linux), so it can
	// never hit an unrelated process that reused the pid.
	if grace > 0 {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		// A paused server only acts on SIGTERM once it runs again.
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.done:
			return
		case <-t.C:
		}
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// freePort returns a port on 127.0.0.1 that was free a moment ago and is at
// most maxPort. With needBus, port+10000 was free as well.
func freePort(needBus bool) (int, error) {
	var lastErr error
	for range 200 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port > maxPort {
			continue
		}
		if needBus {
			bl, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+clusterBusOffset)))
			if err != nil {
				lastErr = err
				continue
			}
			_ = bl.Close()
		}
		return port, nil
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("every port offered was above %d", maxPort)
	}
	return 0, fmt.Errorf("no usable port: %w", lastErr)
}

// waitReady polls addr until the redis-server with the given pid answers PING,
// the process exits (done is closed) or timeout passes. Checking the pid makes
// sure the answer does not come from some other process that took the port.
func waitReady(addr string, pid int, done <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		select {
		case <-done:
			return fmt.Errorf("redis-server (pid %d) exited during startup", pid)
		default:
		}
		got, err := pingPid(addr)
		switch {
		case err != nil:
			lastErr = err
		case got != pid:
			lastErr = fmt.Errorf("%s is served by pid %d, not by pid %d", addr, got, pid)
		default:
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server (pid %d) did not answer PING on %s within %v: %v", pid, addr, timeout, lastErr)
		}
		select {
		case <-done:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// pingPid sends PING and INFO server over one short-lived connection using
// plain RESP and returns the process_id the server reports.
func pingPid(addr string) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close() }()
	if err := conn.SetDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
		return 0, err
	}
	const req = "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != "+PONG\r\n" {
		return 0, fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	line, err = r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if !strings.HasPrefix(line, "$") {
		return 0, fmt.Errorf("INFO answered %q", strings.TrimSpace(line))
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 0 || n > 1<<20 {
		return 0, fmt.Errorf("INFO answered %q", strings.TrimSpace(line))
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	v, ok := infoField(string(body), "process_id")
	if !ok {
		return 0, errors.New("INFO server has no process_id")
	}
	return strconv.Atoi(v)
}

// infoField returns the value of key in the text of an INFO or CLUSTER INFO
// reply.
func infoField(info, key string) (string, bool) {
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && k == key {
			return v, true
		}
	}
	return "", false
}
