-- What the kinds that keep a HASH (the sliding log, concurrency) share.

-- one_or_two reads a value of one number, "a", or of two, "a:b", each as
-- whole reads it, and returns a, and b for two; nil for anything else.
local function one_or_two(v)
  if type(v) ~= 'string' then
    return nil
  end
  local a = whole(v)
  if a then
    return a
  end
  local x, y = string.match(v, '^(%d+):(%d+)$')
  x, y = whole(x), whole(y)
  if x and y then
    return x, y
  end
  return nil
end

-- hdel deletes fields of key, a few thousand at a time (Lua's stack
-- bounds unpack).
local function hdel(key, fields)
  for i = 1, #fields, 4000 do
    redis.call('HDEL', key, unpack(fields, i, min(i + 3999, #fields)))
  end
end
