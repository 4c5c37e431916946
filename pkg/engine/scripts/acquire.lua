-- acquire.lua: take the ownership leases of units for one or more consumer groups: one
-- unit a call on Redis Cluster (its keys share one slot), many on a single node, each
-- unit as if in a call of its own.
--
-- A lease is free when the key is missing or its owner's session key has expired (the
-- owner died or stalled past the TTL). Taking it increments the group's generation
-- counter, so every change of hands gets a strictly larger fencing token. The counter
-- is never below the Redis server time in microseconds: after Redis lost the counter
-- (a restart without persistence, a failover to a replica that had not received it) the
-- next generation is still above every one handed out before, as long as the server
-- clock did not go back by more than the time since that grant.
--
-- A unit that spans several partition streams (a sequential process manager's correlation
-- value) also takes the per-stream lease key of the same group on each of its streams, as
-- guards: a unit is free only when its lease and every guard are free, and they are taken
-- and given back together. So an instance that leases the stream itself (a process
-- manager declared without sequential_by during a rolling change of the flag) and one
-- that leases the correlation value never both drain a stream: lease identity depends on
-- the group and the stream, never on instance-local flags.
--
-- Each unit has these keys, the units' keys one after the other (k is the unit's first):
-- KEYS[k]    lease key (string "{owner}:{generation}")
-- KEYS[k+1]  generation counter of the group (string: the last generation granted)
-- KEYS[k+2]  the caller's session key (string; must exist); with a lease TTL (cluster
--            mode) the lease key again, unread
-- then g guard lease keys (strings, as the lease key); none for a single-stream unit,
-- then l lane streams of the unit: a new lease is granted only when one of them exists,
--            so a discovery pass that read the index just before a reap never takes a
--            lease on a partition that is gone (a publish re-creates the stream, re-adds
--            the key to the index and announces it, in one script)
-- ARGV[1]  owner (the caller's session owner id)
-- ARGV[2]  session key prefix (to check the current owner's liveness)
-- ARGV[3]  lease TTL in ms for Redis Cluster, where no script can read a session key in
--          another slot: the lease and guards then carry this PX expiry and a lease is
--          live while its key exists with an expiry; "0" on a single node (session keys
--          decide)
-- ARGV[4]  d, then ARGV[5..4+d]: Redis Cluster only: owners whose session key the caller
--          found gone. An idle partition's lease there is dormant (no expiry, see
--          renew.lua): it is live while its owner's session lives, which only the caller
--          can read. A session that is gone never comes back (a new session gets a new
--          owner name), so the caller's finding stays true however late this script
--          runs. A lease with an expiry is live until it expires, whatever the caller
--          found: its owner may be running an event, and it re-arms a dormant lease
--          before it starts one.
-- then, for each unit in KEYS order, its g and its l.
--
-- Consumer groups are created by drain.lua when the owner first reads a lane.
-- Returns a reply for each unit, in order:
--   {1, generation}      acquired
--   {2, generation}      already held by the caller: re-adopted, at a new generation
--   {0, "owner:gen"}     held by a live owner (the lease or a guard)
--   {-3}                 the caller's own session is gone (it must start a new one)
--   {-4}                 none of the unit's lanes exists (reaped, or never published)
local px = tonumber(ARGV[3])
local ndead = tonumber(ARGV[4])
local dead = {}
for i = 5, 4 + ndead do dead[ARGV[i]] = true end

-- alive reports whether the owner of the lease at key is live: its session key exists,
-- or with a lease TTL, the lease has an expiry or is dormant with an owner the caller
-- did not find gone.
local function alive(owner, key)
  if px > 0 then
    return redis.call('PTTL', key) ~= -1 or not dead[owner]
  end
  return redis.call('EXISTS', ARGV[2] .. owner) == 1
end

-- set writes a lease or guard value, with the lease TTL when there is one.
local function set(key, v)
  if px > 0 then
    redis.call('SET', key, v, 'PX', px)
  else
    redis.call('SET', key, v)
  end
end

-- held_by_other returns the value of a lease key held by another live owner, or nil.
local function held_by_other(key)
  local cur = redis.call('GET', key)
  if not cur then return nil end
  local owner = string.match(cur, '^(.*):%d+$')
  if owner == ARGV[1] then return nil end
  if owner and alive(owner, key) then return cur end
  return nil
end

local sessions = {} -- session key -> whether it exists (read once a call)
local floor         -- the Redis time in microseconds (read once a call, at the first grant)
local granted = {}  -- generation counter key -> the last generation this call granted

-- next_generation returns the next generation of the counter at key: the time floor,
-- written at once (the counter is nearly always behind it: it grows by one a grant, the
-- clock by a million a second), or one above the counter when that is ahead. The counter
-- is never below the time, so after Redis lost it (a restart without persistence, a
-- failover to a replica that had not received it) the next generation is still above
-- every one handed out before, as long as the server clock did not go back by more than
-- the time since that grant.
local function next_generation(key)
  local gen = granted[key]
  if gen then
    gen = gen + 1
    redis.call('SET', key, string.format('%d', gen))
  else
    if not floor then
      local t = redis.call('TIME')
      floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    gen = floor
    local before = tonumber(redis.call('SET', key, string.format('%d', floor), 'GET') or '0')
    if before and before >= floor then
      gen = before + 1
      redis.call('SET', key, string.format('%d', gen))
    end
  end
  granted[key] = gen
  return gen
end

-- acquire takes the unit whose keys start at KEYS[k], with g guards and l lanes.
local function acquire(k, g, l)
  local session = KEYS[k + 2]
  if px == 0 then
    if sessions[session] == nil then
      sessions[session] = redis.call('EXISTS', session) == 1
    end
    if not sessions[session] then return {-3} end
  end
  local last_guard = k + 2 + g
  for i = k + 3, last_guard do
    local other = held_by_other(KEYS[i])
    if other then return {0, other} end
  end
  local cur = redis.call('GET', KEYS[k])
  local readopt = false
  if cur then
    local owner = string.match(cur, '^(.*):%d+$')
    if owner == ARGV[1] then
      -- The caller's session holds it without a worker (one ended without giving it
      -- back). Taken up again, it still gets a new generation: what that worker handled
      -- and could not acknowledge runs again, and a sink fencing on the generation must
      -- see a change of hands, never one owner running an event twice.
      readopt = true
    elseif owner and alive(owner, KEYS[k]) then
      return {0, cur}
    end
  end
  if not readopt and l > 0 then
    local any = false
    for i = last_guard + 1, last_guard + l do
      if redis.call('EXISTS', KEYS[i]) == 1 then any = true break end
    end
    if not any then return {-4} end
  end
  local gen = next_generation(KEYS[k + 1])
  local token = ARGV[1] .. ':' .. string.format('%d', gen)
  set(KEYS[k], token)
  for i = k + 3, last_guard do set(KEYS[i], token) end
  if readopt then return {2, gen} end
  return {1, gen}
end

local out = {}
local k = 1
for a = 5 + ndead, #ARGV, 2 do
  local g, l = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  out[#out + 1] = acquire(k, g, l)
  k = k + 3 + g + l
end
return out
