package redisbatch

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// scripts is one batch script in both its time sources: the source that
// reads the server's TIME, and the source that takes the caller's time as
// its first argument.
type scripts struct {
	server, caller string
}

// twin is one of the differential's two servers, with the SHAs of its
// script's two time sources, loaded there.
type twin struct {
	m              *miniredis.Miniredis
	client         *redis.Client
	server, caller string // SHAs
}

// twins is the old script's server and the new script's, on one virtual
// clock: every call goes to both, with the same keys and arguments, at the
// same time.
type twins struct {
	old, new twin
	now      time.Time // both servers' TIME
}

// newTwins starts the two servers at start, old running oldSrc and new
// running newSrc, each loaded in both time sources. They stop when the
// test ends.
func newTwins(t *testing.T, start time.Time, oldSrc, newSrc scripts) *twins {
	t.Helper()
	w := &twins{now: start}
	w.old = startTwin(t, start, oldSrc)
	w.new = startTwin(t, start, newSrc)
	return w
}

// startTwin starts a server whose TIME reads start, with src's two sources
// loaded.
func startTwin(t *testing.T, start time.Time, src scripts) twin {
	t.Helper()
	m := miniredis.RunT(t)
	m.SetTime(start)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	server, err := client.ScriptLoad(ctx, src.server).Result()
	require.NoError(t, err, "loading the script of the server's clock")
	caller, err := client.ScriptLoad(ctx, src.caller).Result()
	require.NoError(t, err, "loading the script of the caller's clock")
	return twin{m: m, client: client, server: server, caller: caller}
}

// step moves both servers' clock by d, which may be below 0: TIME through
// SetTime, and TTLs through FastForward, which lengthens them when d < 0,
// as a real server's absolute expiries do when its clock steps back.
func (w *twins) step(d time.Duration) {
	w.now = w.now.Add(d)
	for _, s := range []*miniredis.Miniredis{w.old.m, w.new.m} {
		s.SetTime(w.now)
		s.FastForward(d)
	}
}

// each runs f on both servers.
func (w *twins) each(f func(m *miniredis.Miniredis)) {
	f(w.old.m)
	f(w.new.m)
}

// call sends the script call args (EVALSHA, then a placeholder for the
// SHA, then the keys' count, the keys and the arguments, as
// Sender.command makes them) to both servers, each with its own SHA of
// the script of the caller's clock or of the server's, and returns both
// replies.
func (w *twins) call(ctx context.Context, args []any, caller bool) (old, new string) {
	return w.old.call(ctx, args, caller), w.new.call(ctx, args, caller)
}

// call sends args to the twin's server and returns its reply as text: the
// reply's bytes, or "error: " and the error, its script line numbers left
// out (so that an old and a new script that fail alike, but from other
// lines, reply alike).
func (s twin) call(ctx context.Context, args []any, caller bool) string {
	own := append([]any(nil), args...)
	own[1] = s.server
	if caller {
		own[1] = s.caller
	}
	reply, err := s.client.Do(ctx, own...).Result()
	if err != nil {
		msg, _, _ := strings.Cut(err.Error(), " stack traceback:")
		return "error: " + scriptLine.ReplaceAllString(msg, "$1")
	}
	text, ok := reply.(string)
	if !ok {
		return fmt.Sprintf("not a string: %T %v", reply, reply)
	}
	return text
}

// scriptLine matches where a script error names a line of the script:
// "user_script:12:" on Redis, ": :12:" on miniredis. The stack trace
// miniredis appends, which names the functions the error passed through,
// is cut off before: scripts that decide alike may be split into other
// functions.
var scriptLine = regexp.MustCompile(`(^|[^0-9]):[0-9]+:`)

// plainArgs returns args with every argument the client would marshal
// (the once-only count) as its text, so that the same arguments can be
// written to two servers.
func plainArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		if o, ok := a.(*onceArg); ok {
			out[i] = o.String()
			continue
		}
		out[i] = a
	}
	return out
}

// keys returns every key m holds, in order, each as one line: its name,
// type, TTL (PTTL; "none" without one) and content, a HASH's fields
// sorted, so that two servers that hold the same have the same lines.
func keys(t *testing.T, m *miniredis.Miniredis) []string {
	t.Helper()
	names := m.Keys()
	sort.Strings(names)
	out := make([]string, 0, len(names))
	for _, k := range names {
		ttl := "none"
		if d := m.TTL(k); d != 0 {
			ttl = d.String()
		}
		typ := m.Type(k)
		var content string
		switch typ {
		case "string":
			v, err := m.Get(k)
			require.NoError(t, err)
			content = strconv.Quote(v)
		case "hash":
			fields, err := m.HKeys(k)
			require.NoError(t, err)
			sort.Strings(fields)
			for _, f := range fields {
				content += " " + strconv.Quote(f) + "=" + strconv.Quote(m.HGet(k, f))
			}
		case "list":
			v, err := m.List(k)
			require.NoError(t, err)
			content = fmt.Sprintf("%q", v)
		case "set":
			v, err := m.Members(k)
			require.NoError(t, err)
			content = fmt.Sprintf("%q", v)
		case "zset":
			v, err := m.ZMembers(k)
			require.NoError(t, err)
			content = fmt.Sprintf("%q", v)
		default:
			content = "(not read)"
		}
		out = append(out, strconv.Quote(k)+" "+typ+" "+ttl+" "+content)
	}
	return out
}

// keysDiff returns the lines of old and new that differ, "-" for old's
// and "+" for new's; "" when they are the same.
func keysDiff(old, new []string) string {
	in := func(lines []string) map[string]bool {
		m := make(map[string]bool, len(lines))
		for _, l := range lines {
			m[l] = true
		}
		return m
	}
	inOld, inNew := in(old), in(new)
	var b strings.Builder
	for _, l := range old {
		if !inNew[l] {
			b.WriteString("\n  - " + l)
		}
	}
	for _, l := range new {
		if !inOld[l] {
			b.WriteString("\n  + " + l)
		}
	}
	return b.String()
}
