-- The token bucket: kinds 't', and 'T' for a policy chosen per key, which
-- keeps its interval with the key's state. Its arithmetic is tat.lua's.
-- Its state, which every write keeps; anything else under a key is refused
-- (another type, other fields, other values, no TTL where the kind reads
-- it):
--   't'  a HASH of exactly tat: the token bucket kept as the GCRA whose
--        decisions are the same, tat being the server time in integer µs at
--        which the bucket is full again; at now it holds (capacity ×
--        interval − (tat − now)) / interval tokens, below 0 in debt after a
--        Settle or a clock step back (see prelude.lua); PEXPIRE until tat.
--   'T'  a HASH of exactly tat and interval: as 't', with the interval (µs)
--        the tat was computed with.

-- write_bucket writes a 't' key: c.tat, with PEXPIRE c.ttl.
local function write_bucket(c)
  local key, tat = c.key, c.tat
  if tat then
    redis.call('HSET', key, 'tat', tat)
    redis.call('PEXPIRE', key, c.ttl)
  end
end

-- write_keyed_bucket writes a 'T' key: c.tat and the interval, with
-- PEXPIRE c.ttl.
local function write_keyed_bucket(c)
  local key, tat = c.key, c.tat
  if tat then
    redis.call('HSET', key, 'tat', tat, 'interval', c.param)
    redis.call('PEXPIRE', key, c.ttl)
  end
end

-- read_hash is the compact form's read of a 't' key: its HGETALL, or nil
-- when it is absent.
local function read_hash(key)
  local state = redis.pcall('HGETALL', key)
  if #state > 0 or state.err then
    return state
  end
end

kinds.t = { decide = gcra, write = write_bucket, settle = gcra_settle, read = read_hash, open = gcra_open }
kinds.T = { decide = gcra, write = write_keyed_bucket, settle = gcra_settle }
