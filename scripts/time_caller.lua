-- The caller's clock: now is ARGV[1], whole µs of Unix time below 2^52,
-- which the script takes off ARGV before it reads anything else, so that
-- its arguments are those of the server's clock from ARGV[1] on. Anything
-- else fails the call before it writes. It is the first part of every
-- script of the caller's clock (see WithCallerClock), which never reads the
-- server's time. Clients whose clocks disagree share a key as a server
-- clock that steps back does: a key keeps the latest time written to it,
-- and each TTL is computed from its writer's now.
local now = ARGV[1]
if type(now) ~= 'string' or #now > 16 or not string.find(now, '^%d+$') or tonumber(now) >= 4503599627370496 then
  return redis.error_reply(script .. ': the caller\'s time ' .. tostring(now) .. ' is not whole microseconds from 0 to 2^52')
end
now = tonumber(now)
table.remove(ARGV, 1)
