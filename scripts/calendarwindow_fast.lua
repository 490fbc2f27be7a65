-- The fast path of the calendar window ('k'): its compact form, decided
-- before the frame and the kinds are defined (see the prelude's
-- fast_done). It decides each request of a cost from 1 to the limit whose
-- key is absent or holds a count of the window open now or of an earlier
-- one, as calendarwindow.lua's calendar and the frame's compact would,
-- reads and writes included, and leaves the first it does not take (a
-- refusal, a peek, a cost above the limit, a count of a later window, a
-- param it cannot read), with every one after it, to compact, having
-- written nothing for it.
do
  local nreq, kind = fast_nreq, ARGV[3]
  if nreq > 0 and ARGV[2] == '1' and kind == 'k' then
    local limit = tonumber(ARGV[4])
    local p, ws, we, nx = string.match(ARGV[5], '^(%d+):(%d+):(%d+):(%d+)$')
    p, ws, we, nx = tonumber(p), tonumber(ws), tonumber(we), tonumber(nx)
    if p and p < ws and ws < we and we < nx and p <= now and now < nx then
      -- The window open now among the three (one assignment at a time:
      -- gopher-lua, miniredis's Lua, assigns "a, b = c, a" in order).
      if now < ws then
        we = ws
        ws = p
      elseif now >= we then
        ws = we
        we = nx
      end
      local same = nil
      if nreq > 1 and #ARGV == 6 then
        same = tonumber(ARGV[6])
      end
      local call, pcall, format, match = redis.call, redis.pcall, string.format, string.match
      local left = we - now
      local px = format('%d', math.max(1, math.ceil(left / 1000)))
      local vals, k = {}, 0
      local r = 1
      while r <= nreq do
        local key, n = KEYS[r], same or tonumber(ARGV[5 + r])
        if not (n >= 1 and n <= limit) then
          break
        end
        local stored = pcall('GET', key)
        local count = 0
        if stored then
          if type(stored) ~= 'string' then
            break
          end
          local a, b = match(stored, '^(%d+):(%d+)$')
          local start
          start, count = whole(a), whole(b)
          if not (start and count and count >= 1) or start > ws or call('PTTL', key) < 0 then
            break
          end
          if start < ws then
            count = 0 -- counted in an earlier window, which has ended
          end
        end
        if count + n > limit then
          local rem = limit - count
          if rem < 0 then
            rem = 0
          end
          vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4] = 0, rem, left, left
        else
          call('SET', key, format('%d:%d', ws, count + n), 'PX', px)
          vals[k + 1], vals[k + 2], vals[k + 3], vals[k + 4] = 1, limit - count - n, 0, left
        end
        k = k + 4
        r = r + 1
      end
      fast_vals, fast_next = vals, r
      fast_done = r > nreq
    end
  end
end
