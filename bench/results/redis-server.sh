# Sourced by the round scripts here: starts a throwaway redis-server on a
# free 127.0.0.1 port, without persistence, in a temporary directory named
# after $1, and stops it by its pid (and removes the directory) when the
# script exits. Sets PORT and RPID.
T=$(mktemp -d "/tmp/ratelimit-bench-${1:-redis}.XXXX")
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
