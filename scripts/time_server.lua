-- The server's clock: now is the server's TIME, whole µs of Unix time. It is
-- the first part of every script that decides on the server's clock, and
-- the only TIME any script of this package reads.
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000000 + tonumber(now[2])
