#!/bin/bash
# paired Redis rounds: redis_rate, then each row followed by redis_rate again;
# keys=10000, g=64; each row its own process; new rows reversed in even rounds
B=${B:-/tmp/bench.test}   # go test -c -o /tmp/bench.test . (in bench/)
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
. results/redis-server.sh redis
export RATELIMIT_BENCH_REDIS_ADDR=127.0.0.1:$PORT
echo "# BenchmarkRedis/<row>/keys=10000/g=64, library $(git -C .. rev-parse --short HEAD); binary $B (go test -c), each row its own process, -test.benchtime 2s -test.benchmem"
echo "# fresh $(redis-server --version | cut -d' ' -f1-3) on $RATELIMIT_BENCH_REDIS_ADDR (pid $RPID, no persistence); each round: redis_rate, then each row followed by redis_rate again (rows reversed in even rounds)"
run() { $B -test.run '^$' -test.bench "^BenchmarkRedis\$/^$1\$/^keys=10000\$/^g=64\$" -test.benchtime 2s -test.benchmem | grep -E '^Benchmark|FAIL|denied|failed'; }
for r in $(seq 1 $ROUNDS); do
  echo "round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  rows="ratelimit-RedisSlidingLog ratelimit-RedisSlidingLog-existing ratelimit-RedisSlidingCounter ratelimit-RedisCalendarWindow ratelimit-RedisFixedWindow"
  if [ $((r % 2)) -eq 0 ]; then rows="ratelimit-RedisFixedWindow ratelimit-RedisCalendarWindow ratelimit-RedisSlidingCounter ratelimit-RedisSlidingLog-existing ratelimit-RedisSlidingLog"; fi
  run redis_rate
  for row in $rows; do run $row; run redis_rate; done
done
echo "# server after the rounds: $(redis-cli -h 127.0.0.1 -p $PORT info memory | grep '^used_memory_human' | tr -d '\r'), $(redis-cli -h 127.0.0.1 -p $PORT dbsize) keys"
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
