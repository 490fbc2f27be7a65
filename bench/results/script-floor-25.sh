#!/bin/bash
# BenchmarkRedisScriptFloor on a throwaway server, for issue 25: the batch
# script of the working tree (or $RATELIMIT_BENCH_BATCH_SCRIPT), 5 rounds.
B=${B:-/tmp/bench.test}   # go test -c -o /tmp/bench.test . (in bench/)
cd "$(dirname "$0")/.."
T=$(mktemp -d /tmp/ratelimit-bench-sfloor.XXXX)
for try in 1 2 3 4 5; do
  PORT=$((20000 + RANDOM % 40000))
  if redis-cli -h 127.0.0.1 -p $PORT ping >/dev/null 2>&1; then continue; fi
  redis-server --bind 127.0.0.1 --port $PORT --save "" --appendonly no --dir $T --logfile $T/redis.log --daemonize no &
  RPID=$!
  for i in $(seq 1 50); do redis-cli -h 127.0.0.1 -p $PORT ping >/dev/null 2>&1 && break; sleep 0.1; done
  if redis-cli -h 127.0.0.1 -p $PORT ping >/dev/null 2>&1; then break; fi
  kill $RPID 2>/dev/null; RPID=
done
trap '[ -n "$RPID" ] && kill $RPID; rm -rf $T' EXIT
echo "# BenchmarkRedisScriptFloor, library $(git -C .. rev-parse --short HEAD); $(redis-server --version | cut -d' ' -f1-3); start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
RATELIMIT_BENCH_SCRIPT_FLOOR=1 RATELIMIT_BENCH_REDIS_ADDR=127.0.0.1:$PORT $B -test.run '^$' -test.bench '^BenchmarkRedisScriptFloor$' -test.benchtime 1x
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
