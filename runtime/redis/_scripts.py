"""Lua scripts: each is one atomic step on keys of one shard (one Cluster slot).

Every write a shard owner makes goes through a script that first checks the
shard's lease still holds the owner's ``<token>:<worker>``: a worker that lost its
lease (paused, partitioned, slow) is fenced off and changes nothing.
"""

from __future__ import annotations

from typing import Final

__all__ = ("ACK", "ACQUIRE", "COMMIT", "RELEASE", "RENEW")

#: KEYS: lease, fence. ARGV: worker id, lease ms. Returns the new token, or nil
#: if the shard is owned.
ACQUIRE: Final = """
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
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

#: KEYS: lease, stream, log, snapshot, applied.
#: ARGV: lease value, group, entry id ('' = none), command id ('' = none),
#: score, applied ids to keep, has snapshot ('0'/'1'), snapshot,
#: replace the log ('0'/'1'), log items...
#: Returns 1 when stored (and acked), 2 when the command id was already applied
#: (only the XACK is done), -1 when fenced off.
COMMIT: Final = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if ARGV[4] ~= '' and redis.call('ZSCORE', KEYS[5], ARGV[4]) then
  if ARGV[3] ~= '' then redis.call('XACK', KEYS[2], ARGV[2], ARGV[3]) end
  return 2
end
if ARGV[9] == '1' then redis.call('DEL', KEYS[3]) end
local n = #ARGV
local i = 10
while i <= n do
  local j = math.min(i + 499, n)
  redis.call('RPUSH', KEYS[3], unpack(ARGV, i, j))
  i = j + 1
end
if ARGV[7] == '1' then redis.call('SET', KEYS[4], ARGV[8]) end
if ARGV[4] ~= '' then
  redis.call('ZADD', KEYS[5], ARGV[5], ARGV[4])
  redis.call('ZREMRANGEBYRANK', KEYS[5], 0, -(tonumber(ARGV[6]) + 1))
end
if ARGV[3] ~= '' then redis.call('XACK', KEYS[2], ARGV[2], ARGV[3]) end
return 1
"""
