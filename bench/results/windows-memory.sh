#!/bin/bash
B=${B:-/tmp/bench.test}   # go test -c -o /tmp/bench.test . (in bench/)
cd "$(dirname "$0")/.."
echo "# BenchmarkMemoryPerKey, library $(git -C .. rev-parse --short HEAD); binary $B (go test -c); -test.benchtime 1x -test.benchmem; $ROUNDS rounds, one process each"
for r in $(seq 1 ${ROUNDS:-3}); do
  echo "round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  $B -test.run '^$' -test.bench '^BenchmarkMemoryPerKey$/^ratelimit-' -test.benchtime 1x -test.benchmem | grep -E '^Benchmark|FAIL'
done
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
