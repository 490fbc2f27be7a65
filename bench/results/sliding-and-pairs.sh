#!/bin/bash
# Issue 35's other Redis goals on a throwaway server: BenchmarkRedis's rows
# of redis_rate, the fixed window and the sliding and calendar kinds at 64
# goroutines, then BenchmarkRedisConcurrencyPairs, two rounds each.
B=$B   # go test -c -o /tmp/bench.test . (in bench/)
cd "$(dirname "$0")/.."
. results/redis-server.sh perf35
export RATELIMIT_BENCH_REDIS_ADDR=127.0.0.1:$PORT
echo "# start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in 1 2; do
$B -test.run '^$' -test.bench 'BenchmarkRedis$/(redis_rate|ratelimit-RedisSliding|ratelimit-RedisCalendar|ratelimit-RedisFixedWindow)[^/]*/.*/g=64' -test.benchtime 30000x -test.benchmem | grep -E '^Benchmark'
done
echo "# pairs $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in 1 2; do
$B -test.run '^$' -test.bench 'BenchmarkRedisConcurrencyPairs$' -test.benchtime 20000x -test.benchmem | grep -E '^Benchmark'
done
echo "# end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
