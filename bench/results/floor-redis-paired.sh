#!/bin/bash
# Before and after in turns: floor-redis.sh one round with the baseline's
# binary ($BASE), then one with the change's ($AFTER), $PAIRS times; each
# round on its own throwaway server.
cd "$(dirname "$0")"
for p in $(seq 1 ${PAIRS:-3}); do
  echo "## pair $p: before ($BASE)"; B=$BASE ROUNDS=1 ./floor-redis.sh
  echo "## pair $p: after ($AFTER)"; B=$AFTER ROUNDS=1 ./floor-redis.sh
done
