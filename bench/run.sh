#!/usr/bin/env bash
# Runs every benchmark of this module, side by side, and writes the raw
# `go test` output to results/latest.txt and the median of each figure to
# results/summary.txt.
#
#   ./run.sh              # from anywhere; COUNT=5 by default
#   COUNT=10 ./run.sh
#
# Each of the COUNT rounds runs two `go test` passes:
#   1. speed: every benchmark except BenchmarkMemoryPerKey, at the default
#      -benchtime (1s per sub-benchmark), with -benchmem;
#   2. memory: BenchmarkMemoryPerKey with -benchtime 1x, so each
#      sub-benchmark inserts its 1M keys exactly once.
# Rounds rather than one -count $COUNT run, so that a burst of load from
# something else on the machine spoils one sample of several rows instead of
# every sample of one row. The output is ordinary `go test` output (benchstat
# reads it). One round is the same as
#   go test -run '^$' -bench . -skip '^BenchmarkMemoryPerKey$' -benchmem ./...
#   go test -run '^$' -bench '^BenchmarkMemoryPerKey$' -benchtime 1x -benchmem ./...
#
# The machine should be otherwise idle. Each pass waits (up to WAIT_IDLE
# seconds, 60 by default; 0 to not wait) for the CPU to be at least 90% idle,
# and latest.txt records the load and CPU idle before every pass, so a noisy
# run can be spotted.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"

count="${COUNT:-5}"
out=results/latest.txt
summary=results/summary.txt
mkdir -p results
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT

# cpu_idle prints the share of CPU time spent idle over the next second.
cpu_idle() {
	local a b
	read -r -a a </proc/stat
	sleep 1
	read -r -a b </proc/stat
	local total=0 idle i
	for i in 1 2 3 4 5 6 7 8; do
		total=$((total + b[i] - a[i]))
	done
	idle=$((b[4] + b[5] - a[4] - a[5]))
	echo "$((100 * idle / (total > 0 ? total : 1)))%"
}

machine_state() {
	echo "# $1: loadavg $(cut -d' ' -f1-3 /proc/loadavg), cpu idle $(cpu_idle)"
}

# wait_idle waits up to $WAIT_IDLE seconds for a second in which the CPU is
# at least 90% idle.
wait_idle() {
	local deadline=$((SECONDS + ${WAIT_IDLE:-60})) idle
	while ((SECONDS < deadline)); do
		idle="$(cpu_idle)"
		if ((${idle%\%} >= 90)); then
			return
		fi
	done
}

{
	echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "# $(go version)"
	echo "# kernel: $(uname -sr), nproc: $(nproc), cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
	echo "# library: $(git -C .. log -1 --format='%h %s' 2>/dev/null || echo unknown)"
	echo "# uncommitted outside bench/: $(git -C .. status --porcelain -- . ':!bench' 2>/dev/null | awk '{print $2}' | tr '\n' ' ')"
	machine_state "before"
} | tee "$tmp"

for ((round = 1; round <= count; round++)); do
	# Pass 1: speed. Any Benchmark* added to this module runs here too,
	# including the Redis rows (see "Redis" below and in README.md).
	wait_idle
	machine_state "round $round/$count speed" | tee -a "$tmp"
	go test -run '^$' -bench . -skip '^BenchmarkMemoryPerKey$' -benchmem ./... | tee -a "$tmp"

	# Pass 2: bytes per held key, one insertion of 1M keys.
	wait_idle
	machine_state "round $round/$count memory" | tee -a "$tmp"
	go test -run '^$' -bench '^BenchmarkMemoryPerKey$' -benchtime 1x -benchmem ./... | tee -a "$tmp"
done

# Redis: benchmarks against a real Redis go in redis_test.go (BenchmarkRedis*)
# and run in pass 1. They skip themselves unless RATELIMIT_BENCH_REDIS_ADDR
# (host:port) is set, so export it before running this script to get them.

machine_state "after" | tee -a "$tmp"
chmod 644 "$tmp"
mv "$tmp" "$out"
trap - EXIT

# The median of every figure of every benchmark, in the order they ran, and
# for timings the range [min-max] as well.
awk '
/^Benchmark/ {
	name = $1
	if (!(name in seen)) { seen[name] = 1; order[++nnames] = name }
	for (i = 3; i + 1 <= NF; i += 2) {
		key = name SUBSEP $(i + 1)
		if (!(key in nvals)) { units[name] = units[name] SUBSEP $(i + 1) }
		vals[key, ++nvals[key]] = $i
	}
}
# sorted fills s[1..n] with the values of key in increasing order.
function sorted(key, s,    n, i, j, t) {
	n = nvals[key]
	for (i = 1; i <= n; i++) s[i] = vals[key, i] + 0
	for (i = 2; i <= n; i++) { t = s[i]; for (j = i - 1; j >= 1 && s[j] > t; j--) s[j + 1] = s[j]; s[j + 1] = t }
	return n
}
END {
	for (k = 1; k <= nnames; k++) {
		name = order[k]
		line = name
		nu = split(substr(units[name], 2), us, SUBSEP)
		for (u = 1; u <= nu; u++) {
			key = name SUBSEP us[u]
			n = sorted(key, s)
			med = n % 2 ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2
			if (u == 1) line = line sprintf("  n=%d", n)
			line = line sprintf("  %s %.4g", us[u], med)
			# Timings: also the spread, min-max.
			if (us[u] == "ns/op" || us[u] == "ns/insert") line = line sprintf(" [%.4g-%.4g]", s[1], s[n])
		}
		print line
	}
}' "$out" >"$summary"

echo
echo "raw output: bench/$out"
echo "medians:    bench/$summary"
cat "$summary"
