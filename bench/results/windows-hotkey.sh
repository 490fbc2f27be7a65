#!/bin/bash
# hot-key rounds: each row its own process, every new row between two FixedWindow runs;
# the new rows' order is reversed in even rounds
B=${B:-/tmp/bench.test}   # go test -c -o /tmp/bench.test . (in bench/)
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-9}
echo "# BenchmarkHotKey, library $(git -C .. rev-parse --short HEAD), bench/ as in this commit's parent plus its inprocess_test.go; binary $B (go test -c)"
echo "# each row its own process, -test.benchtime 1s -test.benchmem; each round: FW, row, FW, row, FW, row, FW, row, FW (rows reversed in even rounds)"
run() { $B -test.run '^$' -test.bench "^BenchmarkHotKey\$/^ratelimit-$1\$" -test.benchtime 1s -test.benchmem | grep '^Benchmark'; }
for r in $(seq 1 $ROUNDS); do
  echo "round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  rows="SlidingCounter SlidingLog-L100 SlidingLog-L100-full CalendarWindow"
  if [ $((r % 2)) -eq 0 ]; then rows="CalendarWindow SlidingLog-L100-full SlidingLog-L100 SlidingCounter"; fi
  run FixedWindow
  for row in $rows; do run $row; run FixedWindow; done
done
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
