#!/bin/bash
# hot-key pass 2: shorter processes (300 ms), more rounds; FW between every row
B=${B:-/tmp/bench.test}   # go test -c -o /tmp/bench.test . (in bench/)
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-11}
echo "# BenchmarkHotKey pass 2, same binary as pass 1 (/tmp/m-bench.test); each row its own process, -test.benchtime 300ms -test.benchmem; each round: FW, SlidingCounter, FW, SlidingLog-L100-full, FW (the two rows swapped in even rounds)"
run() { $B -test.run '^$' -test.bench "^BenchmarkHotKey\$/^ratelimit-$1\$" -test.benchtime 300ms -test.benchmem | grep '^Benchmark'; }
for r in $(seq 1 $ROUNDS); do
  echo "round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  rows="SlidingCounter SlidingLog-L100-full"
  if [ $((r % 2)) -eq 0 ]; then rows="SlidingLog-L100-full SlidingCounter"; fi
  run FixedWindow
  for row in $rows; do run $row; run FixedWindow; done
done
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
