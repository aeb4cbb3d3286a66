"""Lua scripts: each is one atomic step on keys of one shard (one Cluster slot).

Every write a shard owner makes goes through a script that first checks the
shard's lease still holds the owner's ``<token>:<worker>``: a worker that lost its
lease (paused, partitioned, slow) is fenced off and changes nothing.
"""

from __future__ import annotations

from typing import Final

__all__ = (
    "ACK",
    "ACK_MANY",
    "ACQUIRE",
    "COMMIT",
    "DEAD_LETTER",
    "RELEASE",
    "RENEW",
    "XADD_MANY",
)

#: KEYS: lease, fence. ARGV: worker id, lease ms, and optionally the value of a
#: lease this worker's previous run left (taken back with a new token). Returns the
#: new token, or nil if the shard is owned (by another value than the one given).
ACQUIRE: Final = """
local current = redis.call('GET', KEYS[1])
if ARGV[3] then
  if current ~= ARGV[3] then return false end
elseif current then
  return false
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token .. ':' .. ARGV[1], 'PX', ARGV[2])
return token
"""

#: KEYS: lease. ARGV: lease value, lease ms. Returns 1 if renewed, 0 if lost.
RENEW: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

#: KEYS: lease. ARGV: lease value. Returns 1 if released, 0 if not ours.
RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

#: KEYS: lease, stream. ARGV: lease value, group, entry ids...
#: Returns the number acked, or -1 when fenced off.
ACK: Final = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if #ARGV < 3 then return 0 end
return redis.call('XACK', KEYS[2], ARGV[2], unpack(ARGV, 3))
"""

#: ACK for several shards in one call (not on a Redis Cluster: their keys are in
#: different slots). KEYS: per shard, its lease and its stream. ARGV: group, then
#: per shard, in the order of KEYS: its lease value, its number of entries, the
#: entry ids. Returns per shard the number acked, or -1 when fenced off.
ACK_MANY: Final = """
local group, a, out = ARGV[1], 2, {}
for k = 1, #KEYS, 2 do
  local n = tonumber(ARGV[a + 1])
  if redis.call('GET', KEYS[k]) ~= ARGV[a] then
    out[#out + 1] = -1
  else
    local acked, i = 0, a + 2
    while i <= a + 1 + n do
      local j = math.min(i + 499, a + 1 + n)
      acked = acked + redis.call('XACK', KEYS[k + 1], group, unpack(ARGV, i, j))
      i = j + 1
    end
    out[#out + 1] = acked
  end
  a = a + 2 + n
end
return out
"""

#: Stores the changes of a batch of handled commands, of any actors of one shard,
#: keeps the replies to the asks among them, and XACKs their entries: one call per
#: batch (group commit), so a command's effect, its reply and its ack are stored
#: together or not at all. The commands come grouped by actor, so that each actor's
#: log grows by one RPUSH and its applied ids by one ZADD, whatever the number of
#: its commands in the batch. A run of one actor's commands handled as one batch
#: comes as one *change set*: its commands in order, the changes (snapshot, log)
#: all with the last, and each command saying how many of the set follow it. The
#: tells a command sent that were not written yet go into the shard's unsent hash
#: with it (see ``_unsent``).
#: What describes the commands (numbers, ids, flags) comes as one msgpack argument
#: the script unpacks (``cmsgpack``), and only the data (log items, snapshots,
#: replies, tells) as arguments of their own: a client packs one argument far
#: faster than the ten or so of each command.
#: KEYS: lease, stream, unsent, then per actor: log, snapshot, applied; then the
#: reply key of each command that carries a reply, in order; then the reply
#: streams the call writes to.
#: ARGV: lease value, group, score, applied ids to keep, number of actors, the
#: msgpack of a pair of arrays, then the data, in the order the arrays name it.
#: The first array holds, per actor: its number of commands, then per command nine
#: items: how many commands of its change set follow it, entry id ('' = none),
#: command id ('' = none), has a snapshot (a boolean), replaces the log (a
#: boolean), has a reply to keep (a boolean), the reply's time to live (ms), number
#: of log items, number of unsent tells; its data: the snapshot, the reply, the log
#: items, each tell's id and record. The second array holds the replies the call
#: writes to their askers' reply streams (empty: none): the streams' length to trim
#: to (approximately) and time to live (ms), then per reply: the number of its
#: command (1 = the first above) and the index of its stream in KEYS; their data,
#: after every command's: the streams' entry field, then each reply. A reply is
#: written only if its command's changes are stored or were already (status 1 or 2).
#: An empty snapshot deletes the stored one (the actor's state was erased).
#: Returns -1 when fenced off (nothing is changed), else one status per command, in
#: order, the same for every command of a change set: 1 stored, 2 every command id
#: of the set was already applied (only their XACKs are done; the replies and the
#: tells kept from the first time stay), 3 some were and some were not: nothing of
#: the set is stored or acked (its commands are delivered again, and each is then
#: applied or skipped on its own).
COMMIT: Final = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local group, score, keep = ARGV[2], ARGV[3], tonumber(ARGV[4])
local described = cmsgpack.unpack(ARGV[6])
local C, W = described[1], described[2]
local function chunked(command, key, head, list)
  local i = 1
  while i <= #list do
    local j = math.min(i + 499, #list)
    if head then
      redis.call(command, key, head, unpack(list, i, j))
    else
      redis.call(command, key, unpack(list, i, j))
    end
    i = j + 1
  end
end
local out, acks, unsent = {}, {}, {}
local a, v, k, r, n = 1, 7, 4, 4 + 3 * tonumber(ARGV[5]), #C
while a <= n do
  local count = C[a]
  a = a + 1
  local log, snapshot, applied = KEYS[k], KEYS[k + 1], KEYS[k + 2]
  k = k + 3
  local done = {}
  local items, snap, added = {}, false, {}
  local left, status = 0, 1
  for _ = 1, count do
    local following, entry, id, replace = C[a], C[a + 1], C[a + 2], C[a + 4]
    local ttl, m, q = C[a + 6], C[a + 7], C[a + 8]
    local snapped, reply, reply_key = false, false, false
    if C[a + 3] then
      snapped = ARGV[v]
      v = v + 1
    end
    if C[a + 5] then
      reply, reply_key = ARGV[v], KEYS[r]
      v, r = v + 1, r + 1
    end
    if left == 0 then
      -- The first command of a change set: how many of the set's ids were applied.
      local seen = 0
      for b = a + 2, a + 2 + 9 * following, 9 do
        local other = C[b]
        if other ~= '' and (done[other] or redis.call('ZSCORE', applied, other)) then
          seen = seen + 1
        end
      end
      if seen == 0 then status = 1 elseif seen == following + 1 then status = 2 else status = 3 end
      left = following + 1
    end
    left = left - 1
    out[#out + 1] = status
    if status == 1 then
      if replace then
        redis.call('DEL', log)
        items = {}
      end
      for i = v, v + m - 1 do items[#items + 1] = ARGV[i] end
      if snapped then snap = snapped end
      if id ~= '' then
        added[#added + 1] = score
        added[#added + 1] = id
        done[id] = true
      end
      if reply_key then redis.call('SET', reply_key, reply, 'PX', ttl) end
      for i = v + m, v + m + 2 * q - 1 do unsent[#unsent + 1] = ARGV[i] end
    end
    if entry ~= '' and status ~= 3 then acks[#acks + 1] = entry end
    a, v = a + 9, v + m + 2 * q
  end
  chunked('RPUSH', log, false, items)
  if snap == '' then
    redis.call('DEL', snapshot)
  elseif snap then
    redis.call('SET', snapshot, snap)
  end
  if #added > 0 then
    chunked('ZADD', applied, false, added)
    redis.call('ZREMRANGEBYRANK', applied, 0, -(keep + 1))
  end
end
chunked('HSET', KEYS[3], false, unsent)
chunked('XACK', KEYS[2], group, acks)
if #W > 0 then
  local maxlen, ttl, field = W[1], W[2], ARGV[v]
  local written = {}
  for i = 3, #W, 2 do
    v = v + 1
    if out[W[i]] ~= 3 then
      local stream = KEYS[W[i + 1]]
      redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', field, ARGV[v])
      written[stream] = true
    end
  end
  for stream in pairs(written) do redis.call('PEXPIRE', stream, ttl) end
end
return out
"""

#: Appends entries to one stream in one call (the outbox's batch for that stream):
#: one reply instead of one per entry.
#: KEYS: stream. ARGV: field, max length ('' = none; trimmed approximately), time to
#: live in ms ('' = none), then the data of each entry, in order.
#: Returns the number of entries added.
XADD_MANY: Final = """
local stream, field, maxlen, ttl = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local n = #ARGV
if maxlen == '' then
  for i = 4, n do redis.call('XADD', stream, '*', field, ARGV[i]) end
else
  for i = 4, n do redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', field, ARGV[i]) end
end
if ttl ~= '' then redis.call('PEXPIRE', stream, ttl) end
return n - 3
"""

#: Writes a shard entry to the dead-letter stream unless it is there already: the
#: entry is acked in a second call (another slot), and a worker that died between the
#: two leaves it pending, to be dead-lettered again by the next owner.
#: KEYS: dead-letter stream, its index. ARGV: '<stream> <entry>', the most entries
#: kept (approximately), the time (the index forgets the oldest first), then the
#: fields and values of the dead letter.
#: Returns 1 if written, 0 if it was there already.
DEAD_LETTER: Final = """
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end
local keep = tonumber(ARGV[2])
redis.call('XADD', KEYS[1], 'MAXLEN', '~', keep, '*', unpack(ARGV, 4))
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(keep + 1))
return 1
"""
