-- GCRA: kinds 'g', and 'G' for a policy chosen per key, which keeps its
-- interval with the key's state. Its arithmetic is tat.lua's.
-- Its state, which every write keeps; anything else under a key is refused
-- (another type, other fields, other values, no TTL where the kind reads
-- it):
--   'g'  a STRING: the theoretical arrival time in integer µs, the server time
--        at which the key is full again; PX until then.
--   'G'  as 'g', a STRING "tat:interval", the interval the tat was
--        computed with, in µs.

-- write_gcra writes a 'g' key: c.tat, with PX c.ttl.
local function write_gcra(c)
  local tat = c.tat
  if tat then
    redis.call('SET', c.key, tat, 'PX', c.ttl)
  end
end

-- write_keyed_gcra writes a 'G' key: "c.tat:interval", with PX c.ttl.
local function write_keyed_gcra(c)
  local tat = c.tat
  if tat then
    redis.call('SET', c.key, string.format('%.0f:%.0f', tat, c.param), 'PX', c.ttl)
  end
end

kinds.g = { decide = gcra, write = write_gcra, settle = gcra_settle, read = read_string, open = gcra_open }
kinds.G = { decide = gcra, write = write_keyed_gcra, settle = gcra_settle }
