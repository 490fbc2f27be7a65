#!/bin/bash
# hot-key pass 3: the sliding counter alone, 1 s
B=${B:-/tmp/bench.test}   # go test -c -o /tmp/bench.test . (in bench/)
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-11}
echo "# BenchmarkHotKey pass 3, library code at 96ede2e, the same binary as windows-hotkey.txt; each row its own process, -test.benchtime 1s -test.benchmem; each round: FW, SlidingCounter, FW"
run() { $B -test.run '^$' -test.bench "^BenchmarkHotKey\$/^ratelimit-$1\$" -test.benchtime 1s -test.benchmem | grep '^Benchmark'; }
for r in $(seq 1 $ROUNDS); do
  echo "round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  rows="SlidingCounter"
  if [ $((r % 2)) -eq 0 ]; then rows="SlidingCounter"; fi
  run FixedWindow
  for row in $rows; do run $row; run FixedWindow; done
done
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
