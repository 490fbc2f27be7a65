#!/bin/bash
# Redis at its floor (issue 25): BenchmarkRedisConfigs, every configuration
# {client=default,tuned} x {keys=existing,expired} x {g=64,256}, each with
# its rows redis_rate, raw EVALSHA, RedisTokenBucket, RedisGCRA and
# RedisFixedWindow one after the other (reversed in even rounds), 30,000
# decisions per row; each round its own process, on one throwaway server.
B=${B:-/tmp/bench.test}   # go test -c -o /tmp/bench.test . (in bench/)
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
N=${N:-30000}
. results/redis-server.sh floor
export RATELIMIT_BENCH_REDIS_ADDR=127.0.0.1:$PORT RATELIMIT_BENCH_REDIS_CONFIGS=1
echo "# BenchmarkRedisConfigs, library $(git -C .. rev-parse --short HEAD) (script $(git -C .. hash-object scripts/batch.lua | cut -c1-10)); binary $B (go test -c), -test.benchtime ${N}x -test.benchmem, each round its own process"
echo "# fresh $(redis-server --version | cut -d' ' -f1-3) on $RATELIMIT_BENCH_REDIS_ADDR (pid $RPID, no persistence); $(nproc) CPUs shared by server and client"
for r in $(seq 1 $ROUNDS); do
  echo "round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  rev=; [ $((r % 2)) -eq 0 ] && rev=1
  RATELIMIT_BENCH_REVERSE=$rev $B -test.run '^$' -test.bench '^BenchmarkRedisConfigs$' -test.benchtime ${N}x -test.benchmem | grep -E '^Benchmark.*/(redis_rate|raw|ratelimit)|FAIL|denied|failed'
done
echo "# server after the rounds: $(redis-cli -h 127.0.0.1 -p $PORT info memory | grep '^used_memory_human' | tr -d '\r'), $(redis-cli -h 127.0.0.1 -p $PORT dbsize) keys"
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
