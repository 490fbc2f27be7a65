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
# Redis: the BenchmarkRedis* rows (and BenchmarkDenyCacheFlood) need a Redis
# at $RATELIMIT_BENCH_REDIS_ADDR (host:port) and skip themselves without one.
# Unless that variable is already set, this script starts a throwaway
# redis-server on a free 127.0.0.1 port, with no persistence
#   redis-server --bind 127.0.0.1 --port PORT --save "" --appendonly no
# exports the variable for every pass, and stops the server by its pid when
# the script exits (normally, on an error, or on INT or TERM). Without
# redis-server on PATH it says so and the Redis rows skip.
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
redis_pid=
redis_dir=
cleanup() {
	rm -f "$tmp"
	if [[ -n $redis_pid ]]; then
		kill "$redis_pid" 2>/dev/null || true
		wait "$redis_pid" 2>/dev/null || true
		echo "stopped redis-server (pid $redis_pid)" >&2
	fi
	if [[ -n $redis_dir ]]; then
		rm -rf "$redis_dir"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# redis_ping succeeds when a Redis answers PING on 127.0.0.1:$1.
redis_ping() {
	local reply=
	exec 9<>"/dev/tcp/127.0.0.1/$1" || return 1
	printf 'PING\r\n' >&9
	read -r -t 2 reply <&9 || true
	exec 9>&-
	[[ $reply == "+PONG"* ]]
}

# start_redis starts a throwaway redis-server on a free 127.0.0.1 port, sets
# redis_pid, and exports RATELIMIT_BENCH_REDIS_ADDR.
start_redis() {
	redis_dir="$(mktemp -d)"
	local try port i
	for try in 1 2 3 4 5 6 7 8 9 10; do
		port=$((20000 + RANDOM % 40000))
		# In use if something accepts a connection there.
		if (exec 9<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			continue
		fi
		redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
			--dir "$redis_dir" --logfile "$redis_dir/redis.log" --daemonize no &
		redis_pid=$!
		for i in $(seq 50); do
			if redis_ping "$port" 2>/dev/null; then
				export RATELIMIT_BENCH_REDIS_ADDR="127.0.0.1:$port"
				return
			fi
			if ! kill -0 "$redis_pid" 2>/dev/null; then
				break # it exited, probably the port was taken after all
			fi
			sleep 0.1
		done
		kill "$redis_pid" 2>/dev/null || true
		wait "$redis_pid" 2>/dev/null || true
		redis_pid=
	done
	echo "run.sh: could not start redis-server; see $redis_dir/redis.log" >&2
	cat "$redis_dir/redis.log" >&2 || true
	exit 1
}

if [[ -n ${RATELIMIT_BENCH_REDIS_ADDR:-} ]]; then
	redis_note="RATELIMIT_BENCH_REDIS_ADDR=$RATELIMIT_BENCH_REDIS_ADDR (given)"
elif command -v redis-server >/dev/null; then
	start_redis
	redis_note="$(redis-server --version | cut -d' ' -f1-3) started by run.sh (pid $redis_pid) on $RATELIMIT_BENCH_REDIS_ADDR, same host"
else
	redis_note="none: redis-server not found and RATELIMIT_BENCH_REDIS_ADDR unset, so the Redis rows skip"
fi

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
	echo "# redis: $redis_note"
	machine_state "before"
} | tee "$tmp"

for ((round = 1; round <= count; round++)); do
	# Pass 1: speed. Any Benchmark* added to this module runs here too,
	# including the Redis rows (BenchmarkRedis, BenchmarkDenyCacheFlood),
	# against the Redis started above.
	wait_idle
	machine_state "round $round/$count speed" | tee -a "$tmp"
	go test -run '^$' -bench . -skip '^BenchmarkMemoryPerKey$' -benchmem ./... | tee -a "$tmp"

	# Pass 2: bytes per held key, one insertion of 1M keys.
	wait_idle
	machine_state "round $round/$count memory" | tee -a "$tmp"
	go test -run '^$' -bench '^BenchmarkMemoryPerKey$' -benchtime 1x -benchmem ./... | tee -a "$tmp"
done

machine_state "after" | tee -a "$tmp"
chmod 644 "$tmp"
mv "$tmp" "$out"

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
