#!/usr/bin/env python3
"""Summarises floor-redis.sh output: for each configuration and limiter, the
median over the rounds of decisions/s, of its ratio to redis_rate's and to
raw EVALSHA's in the same round, of server µs per decision and its ratio to
redis_rate's in the same round, of client µs per decision, and the load."""
import re, sys, statistics
from collections import defaultdict

rows = defaultdict(lambda: defaultdict(dict))  # (config) -> round -> impl -> metrics
rnd = 0
for line in open(sys.argv[1]):
    if line.startswith('round '):
        rnd += 1
        continue
    m = re.match(r'BenchmarkRedisConfigs/client=(\w+)/keys=(\w+)/g=(\d+)/(\S+?)-\d+\s+\d+\s+(.*)', line)
    if not m:
        continue
    cfg = (m.group(1), m.group(2), int(m.group(3)))
    vals = dict((u, float(v)) for v, u in re.findall(r'([\d.]+) (\S+)', m.group(5)))
    rows[cfg][rnd][m.group(4)] = vals

names = {'ratelimit-RedisTokenBucket': 'TokenBucket', 'ratelimit-RedisGCRA': 'GCRA', 'ratelimit-RedisFixedWindow': 'FixedWindow',
         'redis_rate': 'redis_rate', 'raw-EVALSHA-return-1': 'raw EVALSHA'}
print('| client | keys | g | row | decisions/s | × redis_rate | × raw EVALSHA | server µs/dec | ÷ redis_rate\'s | client µs/dec | pttl/dec | load |')
print('|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|')
med = statistics.median
for cfg in sorted(rows, key=lambda c: (c[0], c[1], c[2])):
    rounds = rows[cfg]
    for impl in ['redis_rate', 'raw-EVALSHA-return-1', 'ratelimit-RedisTokenBucket', 'ratelimit-RedisGCRA', 'ratelimit-RedisFixedWindow']:
        rs = [r for r in rounds.values() if impl in r and 'redis_rate' in r and 'raw-EVALSHA-return-1' in r]
        if not rs:
            continue
        d = med(r[impl]['decisions/s'] for r in rs)
        xr = med(r[impl]['decisions/s'] / r['redis_rate']['decisions/s'] for r in rs)
        xw = med(r[impl]['decisions/s'] / r['raw-EVALSHA-return-1']['decisions/s'] for r in rs)
        su = med(r[impl]['server-us/decision'] for r in rs)
        sr = med(r[impl]['server-us/decision'] / r['redis_rate']['server-us/decision'] for r in rs)
        cu = med(r[impl]['client-us/decision'] for r in rs)
        pt = med(r[impl].get('pttl/decision', 0) for r in rs)
        ld = ' '.join('%.1f' % r[impl]['load1'] for r in rs)
        flag = lambda ok: '' if ok else ' ✗'
        lim = impl.startswith('ratelimit')
        print('| %s | %s | %d | %s | %.0f | %.2f%s | %.2f%s | %.1f | %.2f%s | %.1f | %.2f | %s |' % (
            cfg[0], cfg[1], cfg[2], names[impl], d,
            xr, flag(not lim or xr >= 3), xw, flag(not lim or xw >= 2), su, sr, flag(not lim or sr <= 1 / 3), cu, pt, ld))
