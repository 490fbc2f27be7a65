-- The state an outbound partition's callers share: one HASH per partition.
--   p  the end of the partition's pause
--   q  the limit the upstream stated, w its window
--   f  the end of the time q and w are kept
-- p, w and f are microseconds (p and f of the server's TIME); a field that
-- is absent is 0; q, w and f are there together or not at all. Every
-- write sets the key's TTL to the later of p and f, and deletes the key
-- when both have passed. Another type, a HASH without a TTL, any other
-- field, a value that is not a non-negative integer of at most 16 digits,
-- or a part of a limit is another's state: the script then answers an
-- error and changes nothing.
--
-- KEYS[1]  the partition's key
-- ARGV[1]  "L" load: answers {pause left, q, w, policy left}, in µs
--          "P" pause: ARGV[2] the pause in µs, > 0
--          "K" learn: ARGV[2] q, ARGV[3] w in µs, ARGV[4] the keeping in µs;
--                     q 0 forgets the policy; answers 1 when the limit
--                     changed (another q or w, or none kept before), 0
--                     otherwise
-- "P" answers 1.
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local ty = redis.call('TYPE', key)['ok']
if ty ~= 'none' and ty ~= 'hash' then
	return redis.error_reply('CORRUPT the key holds a ' .. ty .. ', not an outbound partition\'s HASH')
end
local p, q, w, f = 0, 0, 0, 0
if ty == 'hash' then
	if redis.call('PTTL', key) < 0 then
		return redis.error_reply('CORRUPT the key has no TTL, which an outbound partition\'s always has')
	end
	local all = redis.call('HGETALL', key)
	local seen = {}
	for i = 1, #all, 2 do
		local name, v = all[i], all[i + 1]
		if not (name == 'p' or name == 'q' or name == 'w' or name == 'f') or not string.match(v, '^%d+$') or #v > 16 then
			return redis.error_reply('CORRUPT the key holds fields that are not an outbound partition\'s')
		end
		seen[name] = tonumber(v)
	end
	p, q, w, f = seen.p or 0, seen.q, seen.w, seen.f
	if (q == nil) ~= (w == nil) or (q == nil) ~= (f == nil) then
		return redis.error_reply('CORRUPT the key holds a part of a stated limit, not q, w and f together')
	end
	q, w, f = q or 0, w or 0, f or 0
end

local op = ARGV[1]
if op == 'L' then
	if f <= now then
		q, w, f = 0, 0, now
	end
	return {math.max(p - now, 0), q, w, f - now}
end

local changed = 1
if op == 'P' then
	local e = now + tonumber(ARGV[2])
	if e > p then
		p = e
		redis.call('HSET', key, 'p', string.format('%d', p))
	end
elseif op == 'K' then
	local oldq, oldw = q, w
	if f <= now then
		oldq, oldw = 0, 0
	end
	q = tonumber(ARGV[2])
	if q == oldq and (q == 0 or tonumber(ARGV[3]) == oldw) then
		changed = 0
	end
	if q == 0 then
		f = 0
		redis.call('HDEL', key, 'q', 'w', 'f')
	else
		w, f = tonumber(ARGV[3]), now + tonumber(ARGV[4])
		redis.call('HSET', key, 'q', ARGV[2], 'w', ARGV[3], 'f', string.format('%d', f))
	end
else
	return redis.error_reply('ERR unknown operation')
end

local e = math.max(p, f) - now
if e <= 0 then
	redis.call('DEL', key)
else
	redis.call('PEXPIRE', key, math.ceil(e / 1000))
end
return changed
