#!/bin/bash
# BenchmarkRedisScriptFloor on a throwaway server, for issue 25: the batch
# script of the working tree (or $RATELIMIT_BENCH_BATCH_SCRIPT), 5 rounds.
B=${B:-/tmp/bench.test}   # go test -c -o /tmp/bench.test . (in bench/)
cd "$(dirname "$0")/.."
. results/redis-server.sh sfloor
echo "# BenchmarkRedisScriptFloor, library $(git -C .. rev-parse --short HEAD); $(redis-server --version | cut -d' ' -f1-3); start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
RATELIMIT_BENCH_SCRIPT_FLOOR=1 RATELIMIT_BENCH_REDIS_ADDR=127.0.0.1:$PORT $B -test.run '^$' -test.bench '^BenchmarkRedisScriptFloor$' -test.benchtime 1x
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
