-- Fleet script of ratelimit: the membership of a fleet of replicas, kept in
-- one sorted set so that each replica learns how many are alive.
--
-- KEYS[1]  the fleet's ZSET: one member per replica, its id, scored with
--          the time now, in whole milliseconds since the epoch, at which
--          it expires unless it beats again
-- ARGV[1]  the replica's id
-- ARGV[2]  its TTL in whole milliseconds, >= 1, to join or stay; 0 to leave
-- ARGV[3]  its heartbeat in whole milliseconds, below half the TTL
--
-- On the time now, in whole ms, it removes every member that has expired (score <=
-- now), adds or refreshes the caller (score now + TTL) or removes it, sets
-- the set's own expiry to its latest member's, so that a fleet whose
-- replicas all stopped leaves nothing behind, and returns the number of
-- live replicas, the caller included unless it left: the members that do
-- not expire before the caller's next heartbeat (score > now + heartbeat),
-- so that a replica that stopped beating is no longer counted by any other
-- once its TTL is up.
-- Another type under the key is an error, and the key is left as it was.
-- now is set, in µs, by the time file the script is assembled after
-- (internal/redisbatch.AssembleTimed): the server's TIME, or, for a Fleet
-- with a CallerClock, the caller's time, which that script takes off
-- ARGV[1] before ARGV above is read.
local key = KEYS[1]
local ttl = tonumber(ARGV[2])
now = math.floor(now / 1000) -- the time file's µs, as whole ms
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now))
if ttl > 0 then
  redis.call('ZADD', key, string.format('%.0f', now + ttl), ARGV[1])
else
  redis.call('ZREM', key, ARGV[1])
end
local n = redis.call('ZCARD', key)
local live = 0
if n > 0 then
  live = redis.call('ZCOUNT', key, string.format('(%.0f', now + tonumber(ARGV[3])), '+inf')
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local left = math.max(1, tonumber(last[2]) - now)
  redis.call('PEXPIRE', key, string.format('%.0f', left))
end
return live
