-- The state an outbound partition's callers share: one HASH per partition.
--   p  the end of the partition's pause
--   q  the limit the upstream stated, w its window
--   f  the end of the time q and w are kept
-- p, w and f are microseconds (p and f of the server's TIME); a field that
-- is absent is 0. Every write sets the key's TTL to the later of p and f,
-- and deletes the key when both have passed. Any other field, or a value
-- that is not a non-negative integer, is another's state: the script then
-- answers an error naming neither and changes nothing.
--
-- KEYS[1]  the partition's key
-- ARGV[1]  "L" load: answers {pause left, q, w, policy left}, in µs
--          "P" pause: ARGV[2] the pause in µs, > 0
--          "K" learn: ARGV[2] q, ARGV[3] w in µs, ARGV[4] the keeping in µs;
--                     q 0 forgets the policy
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local ty = redis.call('TYPE', key)['ok']
if ty ~= 'none' and ty ~= 'hash' then
	return redis.error_reply('CORRUPT the key holds a ' .. ty .. ', not an outbound partition\'s HASH')
end
if ty == 'hash' then
	local all = redis.call('HGETALL', key)
	for i = 1, #all, 2 do
		local f, v = all[i], all[i + 1]
		if not (f == 'p' or f == 'q' or f == 'w' or f == 'f') or not string.match(v, '^%d+$') then
			return redis.error_reply('CORRUPT the key holds fields that are not an outbound partition\'s')
		end
	end
end
local v = redis.call('HMGET', key, 'p', 'q', 'w', 'f')
local p, q, w, f = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0, tonumber(v[4]) or 0

local op = ARGV[1]
if op == 'L' then
	if f <= now then
		q, w, f = 0, 0, now
	end
	return {math.max(p - now, 0), q, w, f - now}
end

if op == 'P' then
	local e = now + tonumber(ARGV[2])
	if e > p then
		p = e
		redis.call('HSET', key, 'p', string.format('%d', p))
	end
elseif op == 'K' then
	q = tonumber(ARGV[2])
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
return 1
