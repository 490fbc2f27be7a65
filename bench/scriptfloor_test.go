package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// scriptFloorRounds is how many rounds BenchmarkRedisScriptFloor makes of
// its rows, each round every row once, in an order rotated from round to
// round.
const scriptFloorRounds = 5

// scriptFloorBatchEnv names the environment variable that, when set, is the
// path of the batch script BenchmarkRedisScriptFloor times instead of
// the one batchScriptSource assembles (for example a committed version, written out by git
// show, while the working tree's is being changed).
const scriptFloorBatchEnv = "RATELIMIT_BENCH_BATCH_SCRIPT"

// scriptFloorRunEnv names the environment variable that must be set for
// BenchmarkRedisScriptFloor to run.
const scriptFloorRunEnv = "RATELIMIT_BENCH_SCRIPT_FLOOR"

// Each round of a batch row makes scriptFloorBatchCalls calls over
// scriptFloorSets sets of fullBatch keys; each round of a per-call row makes
// numRedisKeys calls, one per key, and the 64-goroutine row of redis_rate
// 2·numRedisKeys.
const (
	scriptFloorSets       = 100
	scriptFloorBatchCalls = 300
)

// The floor scripts: for each of the fullBatch keys, the redis.call
// sequence that the batch script makes for one check of that kind, with
// constant values and no other Lua, after one TIME per call, as the batch
// script reads it once per call. They ignore ARGV; they are called with the
// batch script's own KEYS and ARGV, so that what they leave out of the batch
// script's time is its Lua alone. The reads are pcalls, as in the batch
// script; numbers are passed as the batch script passes them (Lua numbers
// for TTLs and the window's increment, strings for the stored values), and
// the stored values have the length of those the batch script writes.
var floorScripts = map[string]string{
	// Token bucket on a key that exists: HGETALL, PTTL to verify its TTL,
	// HSET of tat, PEXPIRE.
	"t": perKey(`
		redis.pcall('HGETALL', k)
		redis.call('PTTL', k)
		redis.call('HSET', k, 'tat', '1700001000000000')
		redis.call('PEXPIRE', k, 10000000)
	`),
	// GCRA on a key that exists: GET, PTTL, SET PX.
	"g": perKey(`
		redis.pcall('GET', k)
		redis.call('PTTL', k)
		redis.call('SET', k, '1700001000000000', 'PX', 10000000)
	`),
	// Fixed window on a key that exists: GET, PTTL, INCRBY.
	"w": perKey(`
		redis.pcall('GET', k)
		redis.call('PTTL', k)
		redis.call('INCRBY', k, 1)
	`),
	// The same three without the PTTL.
	"t-noPTTL": perKey(`
		redis.pcall('HGETALL', k)
		redis.call('HSET', k, 'tat', '1700001000000000')
		redis.call('PEXPIRE', k, 10000000)
	`),
	"g-noPTTL": perKey(`
		redis.pcall('GET', k)
		redis.call('SET', k, '1700001000000000', 'PX', 10000000)
	`),
	"w-noPTTL": perKey(`
		redis.pcall('GET', k)
		redis.call('INCRBY', k, 1)
	`),
	// What the batch script does, per key, for a token bucket or GCRA key
	// that has expired since its last check (BenchmarkRedis's
	// configuration, see scriptFloorConfigs): the read finds nothing, so
	// there is no TTL to verify, and the write sets a TTL of 1 ms, after
	// which the key is gone again.
	"t-absent": perKey(`
		redis.pcall('HGETALL', k)
		redis.call('HSET', k, 'tat', '1700000000001000')
		redis.call('PEXPIRE', k, 1)
	`),
	"g-absent": perKey(`
		redis.pcall('GET', k)
		redis.call('SET', k, '1700000000001000', 'PX', 1)
	`),
	// The call's inputs alone: a full batch's KEYS and ARGV, made into the
	// script's tables, and nothing done with them.
	"args": `return 1`,
	// One command per key, on the keys of the floor-<kind>-existing row
	// (which hold that kind's state): what each redis.call of the batch
	// script costs inside a batch, above args.
	"cmd-HGETALL": perKey(`redis.pcall('HGETALL', k)`),
	"cmd-HGET":    perKey(`redis.pcall('HGET', k, 'tat')`),
	"cmd-PTTL":    perKey(`redis.call('PTTL', k)`),
	"cmd-HSET":    perKey(`redis.call('HSET', k, 'tat', '1700001000000000')`),
	"cmd-PEXPIRE": perKey(`redis.call('PEXPIRE', k, 10000000)`),
	"cmd-GET":     perKey(`redis.pcall('GET', k)`),
	"cmd-SET-PX":  perKey(`redis.call('SET', k, '1700001000000000', 'PX', 10000000)`),
	"cmd-INCRBY":  perKey(`redis.call('INCRBY', k, 1)`),
}

// floorCommands are the cmd- rows of BenchmarkRedisScriptFloor: each
// command, on the keys of the floor row of the kind named.
var floorCommands = []struct{ script, kind string }{
	{"cmd-HGETALL", "t"}, {"cmd-HGET", "t"}, {"cmd-PTTL", "t"}, {"cmd-HSET", "t"}, {"cmd-PEXPIRE", "t"},
	{"cmd-GET", "g"}, {"cmd-SET-PX", "g"}, {"cmd-INCRBY", "w"},
}

// perKey returns a floor script: one TIME, then body, one statement a
// line (indented as the caller likes), for each key k of KEYS, then 'ok'.
func perKey(body string) string {
	var sb strings.Builder
	sb.WriteString("redis.call('TIME')\nfor i = 1, #KEYS do\n  local k = KEYS[i]\n")
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		sb.WriteString("  " + strings.TrimSpace(line) + "\n")
	}
	sb.WriteString("end\nreturn 'ok'")
	return sb.String()
}

// scriptFloorConfigs are the limits of the batch rows. "existing" keeps
// every key: a token or a request costs 1000 s (a window lasts 1000 s), so
// a key is far from full, and has a TTL of 1000 s or more, after any check;
// every check finds its key and verifies its TTL. "bench" is
// BenchmarkRedis's and BenchmarkRedisFullBatch's 1,000,000 per 1000 s: a
// check leaves a token bucket or GCRA key 1 ms from full, so it has expired
// by the key's next check (100 calls later here, about 0.1 s later in
// BenchmarkRedis at 64 goroutines over 10,000 keys), and the check reads
// nothing and verifies no TTL; the window is the same in both.
var scriptFloorConfigs = map[string]map[string][]any{
	"existing": {
		"t": {"t", 1_000_000, 1_000_000_000}, // µs per token
		"g": {"g", 1_000_000, 1_000_000_000}, // µs per request
		"w": {"w", 1_000_000, 1_000_000},     // window in ms
	},
	"bench": {
		"t": {"t", 1_000_000, 1000},
		"g": {"g", 1_000_000, 1000},
	},
}

// floorRow is one row of BenchmarkRedisScriptFloor: calls calls (call(i)
// makes call i), each deciding perCall decisions in scripts script calls.
type floorRow struct {
	name    string
	perCall int
	scripts int
	calls   int
	call    func(ctx context.Context, i int) error
}

// floorSample is what one row measured in one round, per decision.
type floorSample struct {
	scriptUS float64            // EVAL/EVALSHA usec (INFO commandstats)
	serverUS float64            // used_cpu_sys + used_cpu_user (INFO cpu)
	commands map[string]float64 // calls of every other command but INFO
}

// BenchmarkRedisScriptFloor measures the server's script time per decision
// (the usec of EVAL and EVALSHA in INFO commandstats, diffed around each
// row) of:
//
//   - batch-<kind>-<config>: the library's batch script, full batches of
//     fullBatch requests of one check each, as BenchmarkRedisFullBatch calls
//     it, over scriptFloorSets sets of keys in turn (scriptFloorConfigs);
//   - floor-<kind>…: the floor scripts (floorScripts), on fullBatch keys of
//     their own per call, with the batch script's ARGV;
//   - args-only-return-1: `return 1` with a full batch's KEYS and ARGV;
//   - redis_rate: go-redis/redis_rate's Allow, one call per key over
//     numRedisKeys keys at BenchmarkRedis's configuration, one call at a
//     time; redis_rate-g64 the same from 64 goroutines, for the server's
//     CPU per decision under the load of the goal's rows;
//   - raw-return-1: EVALSHA of `return 1` per call, as BenchmarkRedis's raw
//     row sends it.
//
// Each row also reports the server's CPU per decision and the calls per
// decision of every command the scripts made (commandstats), which shows
// the path each script took. It runs scriptFloorRounds rounds in one
// process, every row once a round, so that rows compared are measured
// seconds apart; run it with -benchtime 1x. It prints a table per
// round to stdout, then the medians and the ratios to redis_rate's figures.
func BenchmarkRedisScriptFloor(b *testing.B) {
	if os.Getenv(scriptFloorRunEnv) == "" {
		// About a minute of rounds whatever -benchtime says: not for a
		// smoke run of every benchmark.
		b.Skipf("set %s=1 to run it", scriptFloorRunEnv)
	}
	c := redisClient(b)
	ctx := context.Background()
	path := "assembled from ../scripts"
	src, err := batchScriptSource()
	if p := os.Getenv(scriptFloorBatchEnv); p != "" {
		path = p
		src, err = os.ReadFile(path)
	}
	if err != nil {
		b.Fatal(err)
	}
	batchSHA, err := c.ScriptLoad(ctx, string(src)).Result()
	if err != nil {
		b.Fatal(err)
	}
	fmt.Printf("batch script: %s, SHA1 %s\n", path, batchSHA)

	var rows []floorRow
	// batchRow adds a row that calls sha with the batch script's arguments
	// for limits, over key sets of its own; check, if not nil, checks the
	// reply of each warm-up call.
	// keysOf holds each row's key sets, by the row's name.
	keysOf := map[string][][]string{}
	batchRow := func(name, sha string, limits []any, check func(string) error) {
		args := append([]any{fullBatch, 1}, limits...)
		for range fullBatch {
			args = append(args, 1, 1, 1) // one check, of limit 1, cost 1
		}
		if strings.HasPrefix(name, "compact-") {
			// The compact form, as a plain limiter's batch sends it: -R,
			// the limit, and the one cost of every request.
			args = append(append([]any{-fullBatch, 1}, limits...), 1)
		}
		sets := keysOf[name]
		if sets == nil {
			sets = make([][]string, scriptFloorSets)
			for i := range sets {
				sets[i] = redisBenchKeys(fullBatch)
			}
			keysOf[name] = sets
		}
		call := func(ctx context.Context, i int) error {
			return c.EvalSha(ctx, sha, sets[i%len(sets)], args...).Err()
		}
		// Warm up: every set once, which creates its keys.
		for i := range sets {
			reply, err := c.EvalSha(ctx, sha, sets[i], args...).Result()
			if err == nil && check != nil {
				s, _ := reply.(string)
				err = check(s)
			}
			if err != nil {
				b.Fatalf("%s: %v", name, err)
			}
		}
		rows = append(rows, floorRow{name: name, perCall: fullBatch, scripts: 1, calls: scriptFloorBatchCalls, call: call})
	}
	// allAllowed checks a batch reply: fullBatch records of one check (25
	// bytes: allowed, then three 64-bit integers), every one allowed.
	allAllowed := func(reply string) error {
		const record = 25
		if len(reply) != fullBatch*record {
			return fmt.Errorf("%d bytes in the reply, not %d records of %d", len(reply), fullBatch, record)
		}
		for i := 0; i < len(reply); i += record {
			if reply[i] != 1 {
				return fmt.Errorf("request %d not allowed: %q", i/record, reply[i:i+record])
			}
		}
		return nil
	}
	load := func(name string) string {
		sha, err := c.ScriptLoad(ctx, floorScripts[name]).Result()
		if err != nil {
			b.Fatal(err)
		}
		return sha
	}
	for _, kind := range []string{"t", "g", "w"} {
		limits := scriptFloorConfigs["existing"][kind]
		batchRow("batch-"+kind+"-existing", batchSHA, limits, allAllowed)
		batchRow("compact-"+kind+"-existing", batchSHA, limits, allAllowed)
		batchRow("floor-"+kind+"-existing", load(kind), limits, nil)
		batchRow("floor-"+kind+"-existing-noPTTL", load(kind+"-noPTTL"), limits, nil)
	}
	for _, kind := range []string{"t", "g"} {
		limits := scriptFloorConfigs["bench"][kind]
		batchRow("batch-"+kind+"-bench", batchSHA, limits, allAllowed)
		batchRow("compact-"+kind+"-bench", batchSHA, limits, allAllowed)
		batchRow("floor-"+kind+"-bench-absent", load(kind+"-absent"), limits, nil)
	}
	batchRow("args-only-return-1", load("args"), scriptFloorConfigs["existing"]["t"], nil)
	for _, cmd := range floorCommands {
		keysOf[cmd.script] = keysOf["floor-"+cmd.kind+"-existing"]
		batchRow(cmd.script, load(cmd.script), scriptFloorConfigs["existing"][cmd.kind], nil)
	}

	// The per-call rows, over numRedisKeys keys each, asked once first.
	perCall := func(name, impl string, goroutines, calls int) {
		i := slices.IndexFunc(redisImpls(), func(r redisImpl) bool { return r.name == impl })
		decide := decisions(redisImpls()[i].setup(b, c, redisBenchConfig), redisBenchKeys(numRedisKeys))
		touchAll(b, decide, 64)
		row := floorRow{name: name, perCall: 1, scripts: 1, calls: calls}
		if goroutines == 1 {
			row.call = func(ctx context.Context, i int) error {
				_, err := decide[i%len(decide)](ctx)
				return err
			}
		} else {
			// One call of the row makes them all.
			row.perCall, row.scripts, row.calls = calls, calls, 1
			row.call = func(ctx context.Context, _ int) error {
				res := startRedisLoad(ctx, decide, goroutines, calls, nil).run()
				if res.failed > 0 {
					return res.firstErr
				}
				return nil
			}
		}
		rows = append(rows, row)
	}
	perCall("redis_rate", "redis_rate", 1, numRedisKeys)
	perCall("raw-return-1", rawRedisImpl, 1, numRedisKeys)
	perCall("redis_rate-g64", "redis_rate", 64, 2*numRedisKeys)

	samples := make(map[string][]floorSample)
	for round := range scriptFloorRounds {
		start := round * len(rows) / scriptFloorRounds
		order := append(slices.Clone(rows[start:]), rows[:start]...)
		for _, row := range order {
			s, err := measureFloorRow(ctx, c, row)
			if err != nil {
				b.Fatalf("round %d, %s: %v", round+1, row.name, err)
			}
			samples[row.name] = append(samples[row.name], s)
		}
		// To stdout: the testing package keeps only 10 lines of a
		// benchmark's log.
		fmt.Printf("round %d:\n%s", round+1, floorTable(rows, samples, round))
	}
	fmt.Printf("median of %d rounds:\n%s", scriptFloorRounds, floorTable(rows, samples, -1))
	fmt.Printf("ratios and differences, median of the rounds' and each round's:\n%s", floorRatios(samples))
	for _, name := range []string{"batch-t-existing", "floor-t-existing", "batch-g-existing", "floor-g-existing",
		"batch-w-existing", "floor-w-existing", "redis_rate"} {
		b.ReportMetric(median(floorValues(samples[name], func(s floorSample) float64 { return s.scriptUS })),
			name+"-script-us/decision")
	}
}

// measureFloorRow makes row's calls, one at a time, and returns the
// server's figures per decision over them.
func measureFloorRow(ctx context.Context, c *redis.Client, row floorRow) (floorSample, error) {
	before, err := readServerStats(ctx, c)
	if err != nil {
		return floorSample{}, err
	}
	cmdsBefore, err := readCommandCalls(ctx, c)
	if err != nil {
		return floorSample{}, err
	}
	for i := range row.calls {
		if err := row.call(ctx, i); err != nil {
			return floorSample{}, err
		}
	}
	after, err := readServerStats(ctx, c)
	if err != nil {
		return floorSample{}, err
	}
	cmdsAfter, err := readCommandCalls(ctx, c)
	if err != nil {
		return floorSample{}, err
	}
	d := after.sub(before)
	n := float64(row.calls * row.perCall)
	if want := int64(row.calls * row.scripts); d.scriptCalls != want {
		return floorSample{}, fmt.Errorf("%d script calls, not %d: something else called scripts", d.scriptCalls, want)
	}
	s := floorSample{scriptUS: float64(d.scriptUsec) / n, serverUS: d.cpuSeconds * 1e6 / n, commands: map[string]float64{}}
	for name, calls := range cmdsAfter {
		if dc := calls - cmdsBefore[name]; dc > 0 {
			s.commands[name] = float64(dc) / n
		}
	}
	return s, nil
}

// readCommandCalls returns the calls of every command in INFO
// commandstats but the script commands and INFO, by name.
func readCommandCalls(ctx context.Context, c *redis.Client) (map[string]int64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	calls := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || scriptCommands[name] || name == "cmdstat_info" {
			continue
		}
		v, _, _ := strings.Cut(strings.TrimPrefix(value, "calls="), ",")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("INFO %s: %w", name, err)
		}
		calls[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return calls, sc.Err()
}

// floorValues returns f of each sample.
func floorValues(samples []floorSample, f func(floorSample) float64) []float64 {
	v := make([]float64, len(samples))
	for i, s := range samples {
		v[i] = f(s)
	}
	return v
}

// median returns the median of v, which is not empty.
func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// floorTable formats round's figures of every row (round −1: the medians
// over the rounds; the commands per decision are the last round's).
func floorTable(rows []floorRow, samples map[string][]floorSample, round int) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "  %-32s %12s %12s  %s\n", "row", "script-us/dec", "server-us/dec", "commands per decision")
	for _, row := range rows {
		ss := samples[row.name]
		var script, server float64
		cmds := ss[len(ss)-1].commands
		if round < 0 {
			script = median(floorValues(ss, func(s floorSample) float64 { return s.scriptUS }))
			server = median(floorValues(ss, func(s floorSample) float64 { return s.serverUS }))
		} else {
			script, server, cmds = ss[round].scriptUS, ss[round].serverUS, ss[round].commands
		}
		names := make([]string, 0, len(cmds))
		for name := range cmds {
			names = append(names, name)
		}
		slices.Sort(names)
		var cs []string
		for _, name := range names {
			cs = append(cs, fmt.Sprintf("%s=%.3f", name, cmds[name]))
		}
		fmt.Fprintf(&sb, "  %-32s %12.2f %12.2f  %s\n", row.name, script, server, strings.Join(cs, " "))
	}
	return sb.String()
}

// floorRatios formats, per round and as the median of the rounds' ratios,
// each batch and floor row's script time per decision over redis_rate's
// (one call at a time), and over a third of redis_rate-g64's server CPU
// per decision (the goal's bound), and the batch script's Lua overhead
// over the floor, batch − floor, in µs per decision.
func floorRatios(samples map[string][]floorSample) string {
	var sb strings.Builder
	script := func(name string, r int) float64 { return samples[name][r].scriptUS }
	type ratio struct {
		label string
		f     func(r int) float64
	}
	var rows []string
	for _, kind := range []string{"t", "g", "w"} {
		rows = append(rows, "batch-"+kind+"-existing", "floor-"+kind+"-existing", "floor-"+kind+"-existing-noPTTL")
	}
	for _, kind := range []string{"t", "g"} {
		rows = append(rows, "batch-"+kind+"-bench", "floor-"+kind+"-bench-absent")
	}
	var ratios []ratio
	for _, name := range rows {
		ratios = append(ratios,
			ratio{name + " / redis_rate script", func(r int) float64 { return script(name, r) / script("redis_rate", r) }},
			ratio{name + " / (redis_rate-g64 server / 3)", func(r int) float64 {
				return script(name, r) / (samples["redis_rate-g64"][r].serverUS / 3)
			}})
	}
	for _, kind := range []string{"t", "g", "w"} {
		ratios = append(ratios,
			ratio{"Lua overhead " + kind + "-existing, compact − floor (us/dec)", func(r int) float64 {
				return script("compact-"+kind+"-existing", r) - script("floor-"+kind+"-existing", r)
			}},
			ratio{"compact-" + kind + "-existing / (redis_rate-g64 server / 3)", func(r int) float64 {
				return script("compact-"+kind+"-existing", r) / (samples["redis_rate-g64"][r].serverUS / 3)
			}})
	}
	for _, kind := range []string{"t", "g"} {
		ratios = append(ratios,
			ratio{"Lua overhead " + kind + "-bench, compact − floor (us/dec)", func(r int) float64 {
				return script("compact-"+kind+"-bench", r) - script("floor-"+kind+"-bench-absent", r)
			}})
	}
	for _, kind := range []string{"t", "g", "w"} {
		ratios = append(ratios,
			ratio{"Lua overhead " + kind + "-existing, batch − floor (us/dec)", func(r int) float64 {
				return script("batch-"+kind+"-existing", r) - script("floor-"+kind+"-existing", r)
			}},
			ratio{"PTTL " + kind + "-existing, floor − noPTTL (us/dec)", func(r int) float64 {
				return script("floor-"+kind+"-existing", r) - script("floor-"+kind+"-existing-noPTTL", r)
			}})
	}
	for _, kind := range []string{"t", "g"} {
		ratios = append(ratios, ratio{"Lua overhead " + kind + "-bench, batch − floor (us/dec)", func(r int) float64 {
			return script("batch-"+kind+"-bench", r) - script("floor-"+kind+"-bench-absent", r)
		}})
	}
	for _, cmd := range floorCommands {
		ratios = append(ratios, ratio{cmd.script + " − args-only (us per call)", func(r int) float64 {
			return script(cmd.script, r) - script("args-only-return-1", r)
		}})
	}
	ratios = append(ratios, ratio{"redis_rate-g64 server / 3 (us/dec)", func(r int) float64 {
		return samples["redis_rate-g64"][r].serverUS / 3
	}})
	for _, q := range ratios {
		v := make([]float64, scriptFloorRounds)
		for r := range v {
			v[r] = q.f(r)
		}
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = fmt.Sprintf("%.3f", x)
		}
		fmt.Fprintf(&sb, "  %-58s median %7.3f  rounds %s\n", q.label, median(v), strings.Join(parts, " "))
	}
	return sb.String()
}
