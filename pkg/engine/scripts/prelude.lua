-- prelude.lua: helpers shared by the scripts whose first line is "--#prelude"; the Go
-- loader (scripts.go) puts this file before them, so that each helper has one definition.

-- parse splits a stream id "ms-seq"; a bare "ms" (or anything else) is read leniently so
-- that servers that report ids differently never break a comparison.
local function parse(id)
  local ms, seq = string.match(id or '', '^(%d+)-(%d+)$')
  if not ms then
    ms, seq = string.match(id or '', '^(%d+)$') or '0', '0'
  end
  return tonumber(ms), tonumber(seq)
end

-- less orders two stream ids as Redis does.
local function less(a, b)
  local am, as = parse(a)
  local bm, bs = parse(b)
  return am < bm or (am == bm and as < bs)
end

-- after returns the range start right after the stream id: "ms-(seq+1)", which every
-- server understands, or the exclusive form "(id" for a sequence number too large for
-- Lua's numbers.
local function after(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if not ms then return '-' end
  if #seq < 15 then return ms .. '-' .. string.format('%d', tonumber(seq) + 1) end
  return '(' .. id
end

-- read_registries reads, from ARGV[a] on, n lists of consumer groups, each "m, then m
-- names": the caller's read of each lane's group registry on Redis Cluster, where no
-- script can read a registry in another slot.
local function read_registries(a, n)
  local registries = {}
  for i = 1, n do
    local m = tonumber(ARGV[a])
    local names = {}
    for j = 1, m do names[j] = ARGV[a + j] end
    registries[i] = names
    a = a + m + 1
  end
  return registries
end

