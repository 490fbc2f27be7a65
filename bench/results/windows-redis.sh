#!/bin/bash
# paired Redis rounds: redis_rate, then each row followed by redis_rate again;
# keys=10000, g=64; each row its own process; new rows reversed in even rounds
B=${B:-/tmp/bench.test}   # go test -c -o /tmp/bench.test . (in bench/)
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
T=$(mktemp -d /tmp/ratelimit-bench-redis.XXXX)
for try in 1 2 3 4 5; do
  PORT=$((20000 + RANDOM % 40000))
  if redis-cli -h 127.0.0.1 -p $PORT ping >/dev/null 2>&1; then continue; fi
  redis-server --bind 127.0.0.1 --port $PORT --save "" --appendonly no --dir $T --logfile $T/redis.log --daemonize no &
  RPID=$!
  for i in $(seq 1 50); do redis-cli -h 127.0.0.1 -p $PORT ping >/dev/null 2>&1 && break; sleep 0.1; done
  if redis-cli -h 127.0.0.1 -p $PORT ping >/dev/null 2>&1; then break; fi
  kill $RPID 2>/dev/null; RPID=
done
trap '[ -n "$RPID" ] && kill $RPID' EXIT
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
