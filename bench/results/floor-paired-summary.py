#!/usr/bin/env python3
"""Summarises floor-redis-paired.sh output: per configuration and limiter,
the median over the pairs of each goal's ratio before and after (each
within its own round), and of after's decisions/s over before's."""
import re, sys, statistics
from collections import defaultdict

data = defaultdict(lambda: defaultdict(dict))  # (pair, side) -> cfg -> impl -> metrics
side = None
lines = []
for i, path in enumerate(sys.argv[1:]):
    lines += [(i, line) for line in open(path)]
for i, line in lines:
    m = re.match(r'## pair (\d+): (before|after)', line)
    if m:
        side = (100 * i + int(m.group(1)), m.group(2))
        continue
    m = re.match(r'BenchmarkRedisConfigs/client=(\w+)/keys=(\w+)/g=(\d+)/(\S+?)-\d+\s+\d+\s+(.*)', line)
    if m and side:
        data[side][(m.group(1), m.group(2), int(m.group(3)))][m.group(4)] = dict((u, float(v)) for v, u in re.findall(r'([\d.]+) (\S+)', m.group(5)))
pairs = sorted({p for p, _ in data if (p, 'before') in data and (p, 'after') in data})
med = statistics.median
rng = lambda v: '%.2f–%.2f' % (min(v), max(v))
names = {'ratelimit-RedisTokenBucket': 'TokenBucket', 'ratelimit-RedisGCRA': 'GCRA', 'ratelimit-RedisFixedWindow': 'FixedWindow'}
print('%d pairs' % len(pairs))
print('| client | keys | g | limiter | × redis_rate before → after | × raw before → after | server ÷ redis_rate\'s before → after | after ÷ before, decisions/s |')
print('|---|---|--:|---|--:|--:|--:|--:|')
cfgs = sorted(data[(pairs[0], 'after')], key=lambda c: (c[0] != 'default', c[1] != 'existing', c[2]))
for cfg in cfgs:
    for impl in names:
        def ratios(s):
            rs = [data[(p, s)][cfg] for p in pairs]
            return (med(r[impl]['decisions/s'] / r['redis_rate']['decisions/s'] for r in rs),
                    med(r[impl]['decisions/s'] / r['raw-EVALSHA-return-1']['decisions/s'] for r in rs),
                    med(r[impl]['server-us/decision'] / r['redis_rate']['server-us/decision'] for r in rs))
        b, a = ratios('before'), ratios('after')
        gain = med(data[(p, 'after')][cfg][impl]['decisions/s'] / data[(p, 'before')][cfg][impl]['decisions/s'] for p in pairs)
        mark = lambda v, ok: ('%.2f' % v) if ok else ('**%.2f**' % v)
        print('| %s | %s | %d | %s | %.2f → %s | %.2f → %s | %.2f → %s | %.2f |' % (cfg[0], cfg[1], cfg[2], names[impl],
              b[0], mark(a[0], a[0] >= 3), b[1], mark(a[1], a[1] >= 2), b[2], mark(a[2], a[2] <= 1 / 3), gain))
