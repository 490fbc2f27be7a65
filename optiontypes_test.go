package ratelimit

import (
	"context"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// localConstructors are calls of every in-process constructor, and a
// Fleet's fallback, with their options left as %s.
var localConstructors = []string{
	"ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1, %s)",
	"ratelimit.NewGCRA(1, time.Second, %s)",
	"ratelimit.NewFixedWindow(1, time.Second, %s)",
	"ratelimit.NewSlidingLog(1, time.Second, %s)",
	"ratelimit.NewSlidingCounter(1, time.Second, %s)",
	"ratelimit.NewCalendarWindow(1, ratelimit.Calendar{Period: ratelimit.CalendarDay}, %s)",
	"ratelimit.NewConcurrency(1, time.Second, %s)",
	"fleet.Fallback(nil, %s)",
}

// redisConstructors are calls of every Redis constructor, with their
// options left as %s.
var redisConstructors = []string{
	"ratelimit.NewRedisTokenBucket(nil, ratelimit.PerSecond(1), 1, %s)",
	"ratelimit.NewRedisGCRA(nil, 1, time.Second, %s)",
	"ratelimit.NewRedisFixedWindow(nil, 1, time.Second, %s)",
	"ratelimit.NewRedisSlidingLog(nil, 1, time.Second, %s)",
	"ratelimit.NewRedisSlidingCounter(nil, 1, time.Second, %s)",
	"ratelimit.NewRedisCalendarWindow(nil, 1, ratelimit.Calendar{Period: ratelimit.CalendarDay}, %s)",
	"ratelimit.NewRedisConcurrency(nil, 1, time.Second, %s)",
}

// sharedOptions are calls of every option that applies to both kinds of
// limiter.
var sharedOptions = []string{
	"ratelimit.WithHooks(nil)", "ratelimit.WithName(\"n\")", "ratelimit.WithPolicyFunc(nil)",
	"ratelimit.WithMaxDebt(1)", "ratelimit.WithMaxSettle(1)", "ratelimit.WithMaxKeyLength(1)",
	"ratelimit.WithKeysShown()", "ratelimit.WithClock(nil)",
}

// redisOnlyOptions are calls of every option that applies to Redis
// limiters only.
var redisOnlyOptions = []string{
	"ratelimit.WithKeyPrefix(\"x:\")", "ratelimit.WithoutCoalescing()", "ratelimit.WithCallerClock(nil)",
}

// typeErrors type-checks a program whose main calls each of calls, one a
// line, against this package's source, and returns the type errors of
// each call by its index.
func typeErrors(t *testing.T, calls []string) map[int][]string {
	t.Helper()
	var src strings.Builder
	src.WriteString("package snippet\n\nimport (\n\t\"time\"\n\n\t\"github.com/ratelimit-go/ratelimit\"\n)\n\nvar _ = time.Second\n\nfunc calls(fleet *ratelimit.Fleet) {\n")
	const first = 12 // the line of calls[0]
	for _, c := range calls {
		fmt.Fprintf(&src, "\t_, _ = %s\n", c)
	}
	src.WriteString("}\n")
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "snippet.go", src.String(), 0)
	require.NoError(t, err)
	got := map[int][]string{}
	conf := types.Config{
		Importer: exportImporter(t, fset),
		Error: func(err error) {
			var te types.Error
			require.ErrorAs(t, err, &te)
			line := te.Fset.Position(te.Pos).Line - first
			got[line] = append(got[line], te.Msg)
		},
	}
	_, _ = conf.Check("snippet", fset, []*ast.File{f}, nil)
	return got
}

// exportImporter imports packages from the export data the go command
// keeps in its build cache (go list -export), as the compiler would: a
// fraction of a second with a warm cache, where type-checking the package
// and its dependencies from source takes seconds of CPU under -race. Without
// a go command it falls back to the source.
func exportImporter(t *testing.T, fset *token.FileSet) types.Importer {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}", ".").Output()
	if err != nil {
		t.Logf("go list -export: %v: type-checking from source", err)
		return importer.ForCompiler(fset, "source", nil)
	}
	exports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, "="); ok && file != "" {
			exports[path] = file
		}
	}
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
}

func TestRedisOnlyOptionsDoNotCompileInProcess(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("type-checks the package from source")
	}
	var calls []string
	var bad []bool
	for _, c := range localConstructors {
		for _, o := range redisOnlyOptions {
			calls, bad = append(calls, fmt.Sprintf(c, o)), append(bad, true)
		}
		for _, o := range sharedOptions {
			calls, bad = append(calls, fmt.Sprintf(c, o)), append(bad, false)
		}
	}
	for _, c := range redisConstructors {
		for _, o := range append(append([]string(nil), redisOnlyOptions...), sharedOptions...) {
			calls, bad = append(calls, fmt.Sprintf(c, o)), append(bad, false)
		}
	}
	// A []SharedOption passes to either kind one by one.
	calls = append(calls, "ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1, ratelimit.Option(ratelimit.WithName(\"n\")))")
	bad = append(bad, false)
	errs := typeErrors(t, calls)
	for i, c := range calls {
		if !bad[i] {
			assert.Empty(t, errs[i], "%s compiles", c)
			continue
		}
		if assert.NotEmpty(t, errs[i], "%s does not compile", c) {
			assert.Contains(t, errs[i][0], "missing method applyLocal", c)
		}
	}
}

func TestOptionsThatCannotApplyAreRefusedByName(t *testing.T) {
	_, client, _ := redistest.Miniredis(t, epoch)
	clock := ratelimittest.NewClock(epoch)
	day := Calendar{Period: CalendarDay}
	build := map[string]func(...RedisOption) error{
		"NewRedisTokenBucket": func(o ...RedisOption) error { _, err := NewRedisTokenBucket(client, PerSecond(1), 1, o...); return err },
		"NewRedisGCRA":        func(o ...RedisOption) error { _, err := NewRedisGCRA(client, 1, time.Second, o...); return err },
		"NewRedisFixedWindow": func(o ...RedisOption) error { _, err := NewRedisFixedWindow(client, 1, time.Second, o...); return err },
		"NewRedisSlidingLog":  func(o ...RedisOption) error { _, err := NewRedisSlidingLog(client, 1, time.Second, o...); return err },
		"NewRedisSlidingCounter": func(o ...RedisOption) error {
			_, err := NewRedisSlidingCounter(client, 1, time.Second, o...)
			return err
		},
		"NewRedisConcurrency": func(o ...RedisOption) error { _, err := NewRedisConcurrency(client, 1, time.Second, o...); return err },
	}
	for name, b := range build {
		err := b(WithClock(clock))
		require.ErrorIs(t, err, ErrInvalidConfig, name)
		assert.ErrorContains(t, err, name+": WithClock does not apply", name)
		require.NoError(t, b(WithName("n")), name)
	}
	_, err := NewRedisCalendarWindow(client, 1, day, WithClock(clock))
	require.NoError(t, err, "RedisCalendarWindow cuts its windows' bounds on WithClock's clock")
	for _, o := range []SharedOption{WithMaxDebt(1), WithMaxSettle(1)} {
		_, err := NewConcurrency(1, time.Second, o)
		require.ErrorIs(t, err, ErrInvalidConfig)
		assert.ErrorContains(t, err, "does not apply; a concurrency limiter has no")
		_, err = NewRedisConcurrency(client, 1, time.Second, o)
		require.ErrorIs(t, err, ErrInvalidConfig)
		assert.ErrorContains(t, err, "does not apply; a concurrency limiter has no")
	}
	fleet, err := NewFleet(client, FleetConfig{Name: "f"})
	require.NoError(t, err)
	backend, err := NewRedisGCRA(client, 1, time.Second)
	require.NoError(t, err)
	_, err = fleet.Fallback(backend, WithPolicyFunc(func(context.Context, string) (Policy, error) { return Policy{}, nil }))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.ErrorContains(t, err, "WithPolicyFunc does not apply")
	for name, err := range map[string]error{
		"nil Option":        func() error { _, err := NewTokenBucket(PerSecond(1), 1, nil); return err }(),
		"nil RedisOption":   func() error { _, err := NewRedisGCRA(client, 1, time.Second, nil); return err }(),
		"zero SharedOption": func() error { _, err := NewGCRA(1, time.Second, SharedOption{}); return err }(),
		"zero on Redis":     func() error { _, err := NewRedisGCRA(client, 1, time.Second, SharedOption{}); return err }(),
	} {
		require.ErrorIs(t, err, ErrInvalidConfig, name)
	}
}
