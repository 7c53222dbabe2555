#!lua name=ratelimit
--[[
redis-ratelimit's command contract as a Redis Functions library, for servers that cannot load
modules (managed Redis and Valkey 7+). Load it with

  redis-cli -x FUNCTION LOAD REPLACE < functions/ratelimit.lua

and call `FCALL rl_gcra 1 key L W [BURST B] [COST n]` where the module has `RL.GCRA key L W ...`:
the same arguments after the key, the same five-integer reply, the same errors (within the
bounds below). Functions: rl_gcra rl_tokenbucket rl_slidinglog rl_slidingcounter rl_fixedwindow
rl_shape rl_lease rl_refund rl_charge rl_all rl_peek (read-only: `no-writes`, FCALL_RO and replicas),
rl_settle (RL.SETTLE), rl_share and rl_demand (RL.SHARE, RL.DEMAND: the regions controller),
rl_version (read-only: the library's version, LIBRARY_VERSION below);
rl_inspect rl_throttle only say that they need the module.
docs/functions.md is the long form: bounds, stored formats, what differs, versions.

Exactness. Lua numbers are doubles, exact for integers below 2^53. Time is whole milliseconds
(`TIME`, read once per call, rounded down), and the continuous algorithms count in units where
one millisecond is worth L units and one token W units: the module's arithmetic divided by 10^6,
which at whole-millisecond instants gives the module's replies exactly. A policy change can leave
a balance with a fraction of such a unit (the module rounds it to the nanosecond unit): GCRA and
the token bucket keep it, in nanosecond units below 10^6. Absolute instants are never
multiplied: a GCRA arrival time is stored as whole milliseconds plus a remainder below L.
The bounds keep every product below 2^53 (the largest is W², in a policy change):
  L, BURST, COST, WANT, n   1 .. 10^7 (QUEUE, DELAY 0 .. 10^7 − 1)
  W                         1 .. 9·10^7 ms (25 h) for GCRA, token bucket, lease, shape, sliding
                            counter;
                            1 .. 10^12 ms for the fixed window and the sliding log (no products)
  sliding log L             1 .. 10^4 (an entry per distinct request instant, like the module's
                            default ratelimit.max-log-entries)
  BURST × W / L             at most 10^12 ms, as the module
Integer division goes through `idiv`, exact for operands below 2^53.

Stored state (one key per limiter, plain Redis types, the key's TTL never shorter than the
reply's reset_after_ms nor than 1 s, as the module):
  GCRA            string "g L W B tat_ms tat_rem tat_ns"  (tat = (tat_ms·L + tat_rem)·10^6 + tat_ns),
                  or "g L W B tat_ms" when both remainders are 0
  token bucket    string "t L W B tokens tokens_ns last_ms" (tokens·10^6 + tokens_ns, at most B·W·10^6;
                  negative: a debt, after a clock stepped back), or "t L W B tokens last_ms" when
                  tokens_ns is 0
  leaky bucket    string "h L W B tat_ms tat_rem tat_ns d"  (RL.SHAPE: B = QUEUE + 1, d undelayed)
  sliding counter string "c L W start_ms prev curr"
  fixed window    string "f L W start_ms count"
  sliding log     list   "s L W total newest_ms entries", then "at_ms count" per instant, oldest first;
                  remembering other configurations, the header goes on "edge edge_count" and
                  "L W edge edge_count" per other (log_configurations, log_window)
A GCRA, token-bucket, fixed-window, sliding-counter or leaky-bucket key that remembers other
configurations stores them after the current one, each in the same form: "… ; g L W B …".
Every write is an ordinary command (SET … PXAT, RPUSH, LSET, LTRIM, PEXPIREAT; the hot path's
SET … PX 1000 for the shortest TTL, which Redis 7 propagates as SET … PXAT), which Redis 7+
replicates as effects: a replica or the AOF never runs the decision again. Any client can write
these keys: a value is checked against its own header and the bounds before any loop or product
uses it (VALID, held_log, stored_log), else answered WRONGTYPE, so a call's work is bounded by its
policy's L, never by what a value claims.
]]

--[[
Map: the sections in file order (each opens with a line of dashes and its title; search for an
entry's name), and what each holds.
  (top)        bounds (MAX_*), the clock (now_ms: tests/functions/ swaps that one line),
               integer helpers: idiv, cdiv, num
  Errors       the module's texts: fail, arity, echo, invalid, parse_int
  The algorithms  pure functions of (state, policy, now, cost): decision, ms_up,
               rescale_units, window_start; then one table per algorithm with its check,
               rescale, refund, bill, encode and decode:
                 gcra (tag g)   bucket (t, also lease)   shape (h)   fixed (f)
                 counter (c)    log (s: its stored and in-memory forms, check_all, copied)
  Keys         LIST, the one list of algorithms (the module's registry order; the Rust test
               tests/registry_lists.rs holds it to the registry), ALGORITHMS by tag; what a key
               holds and storing it: held, held_as, limiter_value, held_log, store, log_write,
               settle, and the rollout helpers (kin, fresh, droppable, live)
  Arguments    `L W [BURST B] [COST n]` and the configurations a key remembers:
               configurations, log_configurations, charged, overflowed, parse_limiter, reply
  The functions  request (one limiter), its fast path (fast), limiter: each rl_<word>
  Charges      counted and each algorithm's charge; then the other entries: charge (rl_charge),
               refund (rl_refund), peek (rl_peek), shaped (rl_shape), all (rl_all), lease
               (rl_lease), guarded (the error boundary) and the registrations at the end
]]
-- The library's version, MAJOR.MINOR, as `FCALL rl_version 0` answers it. A MINOR adds functions
-- or options and keeps every reply and stored format; a MAJOR changes one. A client that needs
-- MAJOR.MINOR works with any loaded MAJOR.MINOR' where MINOR' >= MINOR (client/src/library.rs).
local LIBRARY_VERSION = '1.3'

local MAX_AMOUNT = 10000000
local MAX_RATE_WINDOW = 90000000
local MAX_WINDOW = 1000000000000
local MAX_REFILL_MS = 1000000000000
local MAX_LOG = 10000
-- The most a sliding log's window counts (the module's bound), reached only through rl_charge.
local MAX_LOG_TOTAL = 1000000
-- The largest debt a GCRA or token-bucket key stores (units: L per ms, W per token), and the
-- largest count a window holds: beyond any capacity (B·W <= 9·10^14, L <= 10^7), so a state
-- saturated there still denies, and every product taken from it stays below 2^53. CLOCK_SLACK:
-- how much more a stored state may owe at a read, for a clock that stepped back since.
local MAX_UNITS = 4000000000000000
local CLOCK_SLACK = 1000000000000000
-- The largest magnitude of a stored number: 16 digits, exact in a double.
local MAX_STORED = 9000000000000000
local MAX_COUNT = 4 * MAX_AMOUNT
local MAX_LIMITERS = 32
-- (The hot path writes it as the text '1000' too: `SET … PX 1000`, fast.)
local MIN_TTL_MS = 1000
-- The most configurations a key remembers, the current one included (src/algo/step.rs
-- MAX_CONFIGURATIONS): a request that would bring one more is decided so that it can only deny
-- more (`overflowed`).
local MAX_CONFIGURATIONS = 8

-- The clock: whole milliseconds of the server's TIME. tests/functions/ replaces the next line
-- in the copy it loads (and only there) with a clock it sets; nothing else reads the time.
-- `seconds`, when given, keeps the second TIME last answered, as its text and in ms, so that the
-- calls of one second convert it once (FCALL's hot path: fast). It is an argument, not an
-- upvalue: a script of the scripts backend creates this function on every call, and a closure
-- with upvalues costs more there than the conversion. Its second answer, true, says that the
-- instant is the server's own clock, which a relative expiry (`SET … PX`) counts from too (the
-- hot path's: fast); a clock put in its place answers the instant alone, and every expiry is then
-- written absolute from that instant.
local function now_ms(seconds) local t = redis.call('TIME') local s, ms = t[1], t[2] / 1000 if not seconds then return s * 1000 + ms - ms % 1, true elseif s ~= seconds[1] then seconds[1], seconds[2] = s, s * 1000 end return seconds[2] + ms - ms % 1, true end

-- floor(a / b) for integers below 2^53 in magnitude, b > 0: the quotient of doubles is
-- corrected by its remainder, so it is exact.
local function idiv(a, b)
  -- x - x % 1 is floor(x), exactly, without looking up math.floor on every call.
  local x = a / b
  local q = x - x % 1
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return q
end

local function cdiv(a, b)
  return -idiv(-a, b)
end

local function num(n)
  return string.format('%d', n)
end

------------------------------------------------------------------------------------------------
-- Errors: the module's texts (src/error.rs).

local function fail(text)
  error({ err = text }, 0)
end

local function arity(name)
  fail("ERR wrong number of arguments for '" .. name .. "' function")
end

-- An argument as an error may echo it: printable ASCII but the quote, at most 32 bytes.
local function echo(arg)
  local out = string.gsub(string.sub(arg, 1, 32), "[^ -&(-~]", "?")
  if #arg > 32 then
    out = out .. '...'
  end
  return out
end

local function invalid(name, value, min, max)
  fail(string.format("ERR invalid %s '%s': expected an integer from %d to %d", name, echo(value), min, max))
end

-- A decimal integer in min..max: digits only, no sign, spaces or exponent.
local function parse_int(name, s, min, max)
  local n
  if #s > 0 and #s <= 8 and not string.find(s, '%D') then
    -- Up to 8 digits (the common case): exact as it stands.
    n = tonumber(s)
  else
    if #s == 0 or #s > 20 or string.find(s, '%D') then
      invalid(name, s, min, max)
    end
    local digits = string.gsub(s, '^0+', '')
    n = 0
    if #digits > 16 then
      invalid(name, s, min, max)
    elseif #digits > 0 then
      n = tonumber(digits)
    end
  end
  if n < min or n > max then
    invalid(name, s, min, max)
  end
  return n
end

------------------------------------------------------------------------------------------------
-- The algorithms: pure functions of (state, policy, now, cost); states are tables, policies
-- { l, w, b } (b = l for the window algorithms). A decision is
-- { allowed, limit, remaining, retry (ms, nil when admitted), reset (ms) }.

local function decision(allowed, limit, remaining, retry, reset)
  return { allowed = allowed, limit = limit, remaining = remaining, retry = retry, reset = reset }
end

-- The module counts a balance in units of a nanosecond (L per ns, W·10^6 per token); here a
-- balance is a pair (u, f): u units of a millisecond (L per ms, W per token) and f < 10^6 units
-- of a nanosecond on top, the module's u·10^6 + f. Only a change of policy makes f non-zero
-- (src/algo/mod.rs `rescale_units` rounds there to the nanosecond unit); every other step adds
-- whole millisecond units, and the replies below are the module's roundings of u·10^6 + f.
local NS = 1000000

-- ceil((u·10^6 + f) / (L·10^6)): a balance of (u, f) as milliseconds of refill, rounded up.
local function ms_up(u, f, l)
  if f > 0 then
    return cdiv(u + 1, l)
  end
  return cdiv(u, l)
end

-- @scripts: general
-- (The scripts backend, where FUNCTION is refused, serves each function as a script generated
-- from this file, which runs the lines above and a hot path (between the two marks below) on
-- every call, and the rest only when the hot path hands a call on: see docs/functions.md,
-- backends. What a hot path uses is defined above this mark.)

-- An amount (u, f) counted in `from`'s units, in `to`'s: rounded up when `up` (a debt never
-- shrinks), down otherwise (a balance never grows), to the nanosecond unit as the module does.
-- Every product stays below 2^53: r·W and b·10^6 + f·W with r, b < W <= 9·10^7.
local function rescale_units(u, f, from, to, up)
  local whole = idiv(u, from.w)
  local q = (u - whole * from.w) * to.w
  local a = idiv(q, from.w)
  local rest = (q - a * from.w) * NS + f * to.w
  local y = up and cdiv(rest, from.w) or idiv(rest, from.w)
  local yu = idiv(y, NS)
  return whole * to.w + a + yu, y - yu * NS
end

local function window_start(p, now)
  return now - now % p.w
end

-- GCRA (src/algo/gcra.rs). State { tm, tr, tf }: the theoretical arrival time, (tm·L + tr)·10^6
-- + tf units of a nanosecond.
local gcra = { tag = 'g', word = 'GCRA', fname = 'rl_gcra', name = 'GCRA', burst = true, max_w = MAX_RATE_WINDOW, fields = 6, short = 2, remembers = true }

-- The debt at now, (u, f): how far the arrival time is ahead of now.
local function gcra_debt(s, p, now)
  if not s or s.tm < now then
    return 0, 0
  end
  return (s.tm - now) * p.l + s.tr, s.tf
end

local function gcra_at(p, now, u, f)
  local whole = idiv(u, p.l)
  return { tm = now + whole, tr = u - whole * p.l, tf = f }
end

function gcra.check(s, p, now, cost)
  local cap = p.b * p.w
  local d, f = gcra_debt(s, p, now)
  local needed = d + math.max(cost, 1) * p.w
  local admitted = needed < cap or (needed == cap and f == 0)
  local after = (admitted and cost > 0) and needed or d
  -- Whole tokens in cap − (after, f): one fewer when f eats into the last.
  local room = cap - after
  local remaining = 0
  if room > 0 then
    remaining = idiv(f > 0 and room - 1 or room, p.w)
  end
  local dec = decision(admitted and 1 or 0, p.b, remaining,
    (not admitted) and ms_up(needed - cap, f, p.l) or nil, ms_up(after, f, p.l))
  return dec, (admitted and cost > 0) and gcra_at(p, now, after, f) or nil
end

-- A debt (u, f) carried from `from` to `to`, rounded up, saturated at MAX_UNITS (reached only
-- after clock steps far back): still denying, and checked before any product is taken.
local function carried_debt(u, f, from, to)
  if idiv(u, from.w) >= idiv(MAX_UNITS, to.w) then
    return MAX_UNITS, 0
  end
  local c, cf = rescale_units(u, f, from, to, true)
  if c >= MAX_UNITS then
    return MAX_UNITS, 0
  end
  return c, cf
end

function gcra.rescale(s, from, to, now)
  local d, f = gcra_debt(s, from, now)
  return gcra_at(to, now, carried_debt(d, f, from, to))
end

function gcra.refund(s, p, now, n)
  local d, f = gcra_debt(s, p, now)
  if d == 0 and f == 0 then
    return s
  end
  d = d - n * p.w
  if d < 0 then
    return gcra_at(p, now, 0, 0)
  end
  return gcra_at(p, now, d, f)
end

-- The short form "g L W B tat_ms" when the remainders are 0 (most policies, always between
-- policy changes where W is a multiple of L's unit): one number less to write and read.
-- Spends n tokens at now whatever the debt (another configuration of the key admitted them):
-- the debt grows past the capacity, saturated at MAX_UNITS.
function gcra.bill(s, p, now, n)
  local d, f = gcra_debt(s, p, now)
  d = d + n * p.w
  if d >= MAX_UNITS then
    d, f = MAX_UNITS, 0
  end
  return gcra_at(p, now, d, f)
end

function gcra.encode(s, p)
  if s.tr == 0 and s.tf == 0 then
    return string.format('g %d %d %d %d', p.l, p.w, p.b, s.tm)
  end
  return string.format('g %d %d %d %d %d %d', p.l, p.w, p.b, s.tm, s.tr, s.tf)
end

function gcra.decode(a, b, c)
  return { tm = a, tr = b, tf = c }
end

-- Token bucket (src/algo/token_bucket.rs). State { t, tf, last }: the balance (t, tf) at
-- `last` (ms). The balance at any instant is the stored one plus the refill since `last`, at
-- most the capacity; before `last` (a clock stepped back) it is lower by the refill of the time
-- in between, and may be below empty (t < 0): the bucket is a function of absolute time, as
-- GCRA's arrival time is. The module stores a debt as a refill that starts later, to the
-- nanosecond; here it is the negative balance itself, the same at every instant.
local bucket = { tag = 't', word = 'TOKENBUCKET', fname = 'rl_tokenbucket', name = 'token bucket', burst = true, max_w = MAX_RATE_WINDOW, fields = 6, short = 1, remembers = true }

-- (u, f) capped at the capacity `cap` (whole units).
local function capped(u, f, cap)
  if u > cap or (u == cap and f > 0) then
    return cap, 0
  end
  return u, f
end

-- The balance (u, f) at `now`: u may be negative (u·10^6 + f units, 0 <= f < 10^6).
local function balance(s, p, now)
  local cap = p.b * p.w
  if not s then
    return cap, 0
  end
  local elapsed = now - s.last
  if elapsed < 0 then
    return s.t + elapsed * p.l, s.tf
  end
  -- elapsed·L is taken only when it does not fill the bucket, so it stays below 2^53.
  if elapsed >= cdiv(cap - s.t, p.l) then
    return cap, 0
  end
  return capped(s.t + elapsed * p.l, s.tf, cap)
end

function bucket.check(s, p, now, cost)
  local cap = p.b * p.w
  local u, f = balance(s, p, now)
  local asked = math.max(cost, 1) * p.w
  local admitted = u >= asked
  local after = (admitted and cost > 0) and u - asked or u
  -- A fraction f on top of a balance neither adds a whole token nor shortens a wait by a
  -- whole millisecond: the module's roundings of u·10^6 + f are those of u.
  local dec = decision(admitted and 1 or 0, p.b, after >= 0 and idiv(after, p.w) or 0,
    (not admitted) and cdiv(asked - u, p.l) or nil, cdiv(cap - after, p.l))
  return dec, (admitted and cost > 0) and { t = after, tf = f, last = now } or nil
end

-- (a, af) − (b, bf) for balances u·10^6 + f, 0 <= f < 10^6.
local function minus(a, af, b, bf)
  local d, df = a - b, af - bf
  if df < 0 then
    return d - 1, df + NS
  end
  return d, df
end

-- A policy change (src/algo/token_bucket.rs `rescale`): the balance now under the old policy as
-- tokens of the new one, rounded down (a debt rounded up), but never more than the new capacity
-- less what the old one owed, rounded up: what was spent stays spent either way.
function bucket.rescale(s, from, to, now)
  local u, f = balance(s, from, now)
  local cap_to = to.b * to.w
  local owed, owed_f = minus(from.b * from.w, 0, u, f)
  local after, after_f = minus(cap_to, 0, carried_debt(owed, owed_f, from, to))
  local t, tf
  if u >= 0 then
    t, tf = rescale_units(u, f, from, to, false)
  else
    local mu, mf = minus(0, 0, u, f)
    local o, of = carried_debt(mu, mf, from, to)
    t, tf = minus(0, 0, o, of)
  end
  if after < t or (after == t and after_f < tf) then
    t, tf = after, after_f
  end
  t, tf = capped(t, tf, cap_to)
  if t < -MAX_UNITS then
    t, tf = -MAX_UNITS, 0
  end
  return { t = t, tf = tf, last = now }
end

-- Spends n tokens at now whatever the balance (another configuration admitted them): below
-- empty it is a debt, saturated at MAX_UNITS.
function bucket.bill(s, p, now, n)
  local u, f = balance(s, p, now)
  u = u - n * p.w
  if u < -MAX_UNITS then
    u, f = -MAX_UNITS, 0
  end
  return { t = u, tf = f, last = now }
end

function bucket.refund(s, p, now, n)
  local cap = p.b * p.w
  local u, f = balance(s, p, now)
  if u >= cap then
    return s
  end
  local t, tf = capped(u + n * p.w, f, cap)
  if t < -MAX_UNITS then
    -- A debt left by a clock that stepped back far: saturated, as a carried one.
    t, tf = -MAX_UNITS, 0
  end
  return { t = t, tf = tf, last = now }
end

-- The bucket as the module stores it (src/algo/token_bucket.rs `holding`), so that two states
-- compare as the module's do: a balance at or above empty as it is, (t, tf) at `last`; a debt
-- as a refill that starts later, to the nanosecond: the first instant (ms, ns) its balance is
-- at or above empty, and the units it holds then (below L, at most the capacity). Here a debt
-- is the negative balance at the instant it was written, so two states of one debt written at
-- different instants differ field by field, where the module's are equal.
-- Returns tokens as (whole ms units, ns units) and the instant as (ms, ns).
local function bucket_stored(s, p)
  if s.t >= 0 then
    return s.t, s.tf, s.last, 0
  end
  -- What is owed, -(t·10^6 + tf) = (q·L + r)·10^6 - tf ns units, takes q·10^6 + w ns to repay.
  local owed = -s.t
  local q = idiv(owed, p.l)
  local rest = (owed - q * p.l) * NS - s.tf
  if rest <= 0 then
    q, rest = q - 1, rest + p.l * NS
  end
  local w = cdiv(rest, p.l)
  local units = math.min(w * p.l - rest, p.b * p.w * NS)
  local wm = idiv(w, NS)
  local um = idiv(units, NS)
  return um, units - um * NS, s.last + q + wm, w - wm * NS
end

-- Whether two states under `p` are the same bucket as the module stores it.
function bucket.same(a, b, p)
  local a1, a2, a3, a4 = bucket_stored(a, p)
  local b1, b2, b3, b4 = bucket_stored(b, p)
  return a1 == b1 and a2 == b2 and a3 == b3 and a4 == b4
end

-- A lease (src/algo/lease.rs): the bucket's own decision with cost min(want, whole tokens).
function bucket.lease(s, p, now, want)
  local u = balance(s, p, now)
  local granted = math.min(u > 0 and idiv(u, p.w) or 0, want)
  local d, next = bucket.check(s, p, now, math.max(granted, 1))
  d.allowed = granted
  return d, next
end

-- The short form "t L W B tokens last_ms" when tokens_ns is 0 (all but after a policy change).
function bucket.encode(s, p)
  if s.tf == 0 then
    return string.format('t %d %d %d %d %d', p.l, p.w, p.b, s.t, s.last)
  end
  return string.format('t %d %d %d %d %d %d', p.l, p.w, p.b, s.t, s.tf, s.last)
end

function bucket.decode(a, b, c)
  return { t = a, tf = b, last = c }
end

-- The leaky bucket as a queue, RL.SHAPE (src/algo/shape.rs): GCRA with capacity q + 1, and d,
-- how many beyond the rate go undelayed. State { tm, tr, tf, d }.
local shape = { tag = 'h', word = 'SHAPE', fname = 'rl_shape', shaper = true, name = 'leaky bucket', burst = true, max_w = MAX_RATE_WINDOW, fields = 7, remembers = true }

-- The five-field decision, as RL.PEEK and RL.REFUND answer for a shaper; d is kept.
function shape.check(s, p, now, cost)
  local dec, next = gcra.check(s, p, now, cost)
  if next then
    next.d = s and s.d or 0
  end
  return dec, next
end

-- How long an admitted request waits: until its last unit's excess is down to d.
local function shape_delay(s, p, now, dec, next)
  if dec.allowed ~= 1 then
    return 0
  end
  local u, f
  if next then
    u, f = gcra_debt(next, p, now)
  else
    u, f = gcra_debt(s, p, now)
    u = u + p.w
  end
  u = u - (s.d + 1) * p.w
  if u < 0 then
    return 0
  end
  return ms_up(u, f, p.l)
end

function shape.rescale(s, from, to, now)
  local g = gcra.rescale(s, from, to, now)
  g.d = math.min(s.d, to.b - 1)
  return g
end

function shape.refund(s, p, now, n)
  local g = gcra.refund(s, p, now, n)
  if g ~= s then
    g.d = s.d
  end
  return g
end

-- Queues n whatever the queue holds (another configuration admitted them), as GCRA's debt; d stays.
function shape.bill(s, p, now, n)
  local g = gcra.bill(s, p, now, n)
  g.d = s.d
  return g
end

function shape.encode(s, p)
  return string.format('h %d %d %d %d %d %d %d', p.l, p.w, p.b, s.tm, s.tr, s.tf, s.d)
end

function shape.decode(a, b, c, d)
  return { tm = a, tr = b, tf = c, d = d }
end

-- Fixed window (src/algo/fixed_window.rs). State { start, count }.
local fixed = { tag = 'f', word = 'FIXEDWINDOW', fname = 'rl_fixedwindow', name = 'fixed window', burst = false, max_w = MAX_WINDOW, fields = 4, remembers = true }

local function fixed_current(s, p, now)
  local start = window_start(p, now)
  if s and s.start >= start then
    return s
  end
  return { start = start, count = 0 }
end

function fixed.check(s, p, now, cost)
  local win = fixed_current(s, p, now)
  local admitted = win.count + math.max(cost, 1) <= p.l
  local count = admitted and win.count + cost or win.count
  local until_end = math.max(win.start + p.w - now, 0)
  local d = decision(admitted and 1 or 0, p.l, math.max(p.l - count, 0),
    (not admitted) and until_end or nil, count == 0 and 0 or until_end)
  return d, (admitted and cost > 0) and { start = win.start, count = count } or nil
end

function fixed.rescale(s, from, to, now)
  local win = fixed_current(s, from, now)
  return { start = window_start(to, math.max(now, win.start)), count = win.count }
end

function fixed.refund(s, p, now, n)
  local win = fixed_current(s, p, now)
  return { start = win.start, count = math.max(win.count - n, 0) }
end

-- Counts n in the current window whatever it holds (another configuration admitted them), up
-- to MAX_COUNT, which fills a window under any policy.
function fixed.bill(s, p, now, n)
  local win = fixed_current(s, p, now)
  return { start = win.start, count = math.min(win.count + n, MAX_COUNT) }
end

function fixed.encode(s, p)
  return string.format('f %d %d %d %d', p.l, p.w, s.start, s.count)
end

function fixed.decode(a, b)
  return { start = a, count = b }
end

-- Sliding counter (src/algo/sliding_counter.rs). State { start, prev, curr }.
local counter = { tag = 'c', word = 'SLIDINGCOUNTER', fname = 'rl_slidingcounter', name = 'sliding counter', burst = false, max_w = MAX_RATE_WINDOW, fields = 5, remembers = true }

local function counter_current(s, p, now)
  local start = window_start(p, now)
  if s and s.start >= start then
    return s
  elseif s and s.start + p.w == start then
    return { start = start, prev = s.curr, curr = 0 }
  end
  return { start = start, prev = 0, curr = 0 }
end

local function weighted(c, w, elapsed)
  return c.prev * math.max(w - elapsed, 0) + c.curr * w
end

-- The first instant a request of `asked` is admitted, if nothing else is spent meanwhile.
local function admissible_at(c, p, asked)
  local w = p.w
  local function earliest(pp, cc)
    local room = p.l + 1 - (cc + asked)
    if room <= 0 then
      return nil
    end
    room = room * w
    local e = 0
    if pp > 0 then
      e = math.max(w + 1 - cdiv(room, pp), 0)
    end
    if e < w then
      return e
    end
    return nil
  end
  local e = earliest(c.prev, c.curr)
  if e then
    return c.start + e
  end
  e = earliest(c.curr, 0)
  if e then
    return c.start + w + e
  end
  return c.start + 2 * w
end

function counter.check(s, p, now, cost)
  local c = counter_current(s, p, now)
  local w = p.w
  local elapsed = math.max(now - c.start, 0)
  local asked = math.max(cost, 1)
  local admitted = weighted(c, w, elapsed) + (asked - 1) * w < p.l * w
  local after = c
  if admitted then
    after = { start = c.start, prev = c.prev, curr = c.curr + cost }
  end
  local room = math.max(p.l * w - weighted(after, w, elapsed), 0)
  local fresh_at = 0
  if after.curr > 0 then
    fresh_at = after.start + 2 * w
  elseif after.prev > 0 then
    fresh_at = after.start + w
  end
  local d = decision(admitted and 1 or 0, p.l, cdiv(room, w),
    (not admitted) and math.max(admissible_at(c, p, asked) - now, 0) or nil,
    math.max(fresh_at - now, 0))
  return d, (admitted and cost > 0) and after or nil
end

function counter.rescale(s, from, to, now)
  local old = counter_current(s, from, now)
  local start = window_start(to, math.max(now, old.start))
  local prev, curr = 0, old.curr
  if old.start > start then
    curr = math.min(curr + old.prev, MAX_COUNT)
  elseif old.start + to.w > start then
    prev = old.prev
  end
  return { start = start, prev = prev, curr = curr }
end

function counter.refund(s, p, now, n)
  local c = counter_current(s, p, now)
  return { start = c.start, prev = c.prev, curr = math.max(c.curr - n, 0) }
end

-- Counts n in the current window whatever it holds, up to MAX_COUNT (see fixed.charge).
function counter.bill(s, p, now, n)
  local c = counter_current(s, p, now)
  return { start = c.start, prev = c.prev, curr = math.min(c.curr + n, MAX_COUNT) }
end

function counter.encode(s, p)
  return string.format('c %d %d %d %d %d', p.l, p.w, s.start, s.prev, s.curr)
end

function counter.decode(a, b, c)
  return { start = a, prev = b, curr = c }
end

-- Sliding log (src/algo/sliding_log.rs), stored in a list. A state here is a reader over the
-- key: { key, total, newest, len, entry(i) } reading entries lazily (a decision reads the
-- entries that left the window, and on a denial those it must wait for); a policy change is a
-- view over it (`drop` stored entries gone from the front, `head` replacing the first), so it
-- reads and writes only what changes; a refund's state holds its entries in memory.
-- Every entry read is checked against the header (`bad` raises WRONGTYPE): loops run at most
-- `len` times, and the header's len is at most L and the list's own length.
local log = { tag = 's', word = 'SLIDINGLOG', fname = 'rl_slidinglog', name = 'sliding log', burst = false, max_w = MAX_WINDOW }

local CHUNK = 32
-- The entries read with the header: a decision usually needs the oldest one or two.
local FIRST = 4

-- "at_ms count": at below 10^15, count from 1 to total; nil for anything else.
local function entry_parse(e, total)
  local at, count = string.match(e, '^(%d+) (%d+)$')
  if not at or #at > 15 or #count > 15 then
    return nil
  end
  at, count = tonumber(at), tonumber(count)
  if count < 1 or count > total then
    return nil
  end
  return at, count
end

-- `first`: the list's first elements as read with the header (entry i is first[i + 1]). Entries
-- are fetched 32 at a time (forwards, or backwards from the newest) and parsed one by one as
-- the caller reads them, each checked against the header and the neighbours already parsed.
local function stored_log(key, total, newest, len, bad, first)
  local raw, cache = {}, {}
  for i = 2, #first do
    raw[i - 1] = first[i]
  end
  local s = { key = key, total = total, newest = newest, len = len, drop = 0, bad = bad }
  function s.entry(i)
    local e = cache[i]
    if e then
      return e[1], e[2]
    end
    if i < 1 or i > len then
      bad()
    end
    local text = raw[i]
    if not text then
      local lo, hi = i, math.min(i + CHUNK - 1, len)
      if raw[i + 1] or i == len then
        lo, hi = math.max(i - CHUNK + 1, 1), i
      end
      local got = redis.call('LRANGE', key, lo, hi)
      if #got ~= hi - lo + 1 then
        bad()
      end
      for j, t in ipairs(got) do
        raw[lo + j - 1] = raw[lo + j - 1] or t
      end
      text = raw[i]
    end
    local at, count = entry_parse(text, total)
    -- Oldest first, none after the header's newest, the last one at it.
    local before, after = cache[i - 1], cache[i + 1]
    if not at or at > newest or (i == len and at ~= newest) or (before and at < before[1])
        or (after and at > after[1]) then
      bad()
    end
    cache[i] = { at, count }
    return at, count
  end
  return s
end

local function memory_log(entries)
  local total, newest = 0, 0
  for _, e in ipairs(entries) do
    total = total + e[2]
    newest = e[1]
  end
  local s = { total = total, newest = newest, len = #entries, entries = entries }
  function s.bad()
    fail('ERR internal error: a sliding log in memory is inconsistent')
  end
  function s.entry(i)
    local e = entries[i] or { 0, 0 }
    return e[1], e[2]
  end
  return s
end

-- The decision and the change to apply when admitted: { dropped, at, count, merged }, merged:
-- the newest entry's count after the request joins it (nil: a new entry).
function log.check(s, p, now, cost)
  s = s or memory_log({})
  if s.others and #s.others > 0 then
    return log.check_all(s, p, now, cost)
  end
  local w, l = p.w, p.l
  local dropped, gone = 0, 0
  while dropped < s.len do
    local at, count = s.entry(dropped + 1)
    if at + w > now then
      break
    end
    gone = gone + count
    dropped = dropped + 1
  end
  if gone > s.total then
    s.bad()
  end
  local total = s.total - gone
  local newest = (dropped < s.len) and s.newest or nil
  local asked = math.max(cost, 1)
  local admitted = total + asked <= l
  if not admitted or cost == 0 then
    local retry = nil
    if not admitted then
      local excess, freed = total + asked - l, 0
      for i = dropped + 1, s.len do
        local at, count = s.entry(i)
        freed = freed + count
        if freed >= excess then
          retry = math.max(at + w - now, 0)
          break
        end
      end
      if not retry then
        -- The entries hold less than the header's total.
        s.bad()
      end
    end
    return decision(admitted and 1 or 0, l, math.max(l - total, 0), retry,
      newest and math.max(newest + w - now, 0) or 0), nil
  end
  local at = math.max(now, newest or 0)
  local merged
  if newest and newest == at then
    local _, count = s.entry(s.len)
    merged = count + cost
  end
  return decision(1, l, l - (total + cost), nil, math.max(at + w - now, 0)),
    { dropped = dropped, at = at, count = cost, merged = merged }
end

-- Copies of `others` whose edges start again from the front (after a refund or a charge, which
-- take entries from the back or rewrite the log).
local function unedged(others)
  if not others then
    return nil
  end
  local out = {}
  for i, o in ipairs(others) do
    out[i] = { l = o.l, w = o.w, b = o.b, e = 0, g = 0 }
  end
  return out
end

-- The span a log remembering other configurations keeps: the longest W and the largest L among
-- them and `p` (a policy for log.rescale).
local function log_span(s, p)
  local l, w = p.l, p.w
  for _, o in ipairs(s and s.others or {}) do
    l, w = math.max(l, o.l), math.max(w, o.w)
  end
  return { l = l, w = w, b = l }
end

-- What the configuration (l, w) counts in its window at now, and when a request of cost `asked`
-- fits it: { count, retry (nil: it fits), reset, e, g }. `e`, `g`: its edge, the entries known
-- to have left its window (from the front) and their count; the scan goes on from there, so
-- each entry is passed once per configuration however many calls read the log (the edge is
-- stored with it). A denial's wait reads from the nearer end: the `excess` oldest inside, or
-- the newest back to l - asked + 1. Never more than the log's length (at most its largest L).
local function log_window(s, l, w, now, asked, e, g)
  local reset = s.len > 0 and math.max(s.newest + w - now, 0) or 0
  if e > s.len or g > s.total then
    s.bad()
  end
  if e > 0 and (s.entry(e)) + w > now then
    -- The clock went back (or the edge is not this log's): read from the front again.
    e, g = 0, 0
  end
  local lo, gone = e + 1, g
  while lo <= s.len do
    local at, c = s.entry(lo)
    if at + w > now then
      break
    end
    gone, lo = gone + c, lo + 1
  end
  if gone > s.total then
    s.bad()
  end
  local count, retry = s.total - gone, nil
  if asked > l then
    retry = math.max(reset, 1)
  elseif count + asked > l then
    local excess = count + asked - l
    if excess <= l - asked + 1 then
      local freed, i = 0, lo
      while i <= s.len do
        local at, c = s.entry(i)
        freed = freed + c
        if freed >= excess then
          retry = math.max(at + w - now, 0)
          break
        end
        i = i + 1
      end
    else
      -- Admissible once the entry that brings the newest past l - asked leaves.
      local back, i = 0, s.len
      while i >= lo do
        local at, c = s.entry(i)
        back = back + c
        if back + asked > l then
          retry = math.max(at + w - now, 0)
          break
        end
        i = i - 1
      end
    end
    if not retry then
      s.bad()
    end
  end
  return { count = count, retry = retry, reset = reset, e = lo - 1, g = gone }
end

-- The decision on a log that remembers other configurations (docs/functions.md, the sliding
-- log's rule): every configuration counts the one shared log in its own window, and a request
-- is admitted only when each of them admits it. Its entries span the longest W (log_span).
function log.check_all(s, p, now, cost)
  local asked = math.max(cost, 1)
  local edge = s.edge or { 0, 0 }
  local own = log_window(s, p.l, p.w, now, asked, edge[1], edge[2])
  s.edge = { own.e, own.g }
  local retry, reset = own.retry, own.reset
  -- The reply's reset is the request's configuration's; the key lives while any counts (keep).
  for _, o in ipairs(s.others) do
    local c = log_window(s, o.l, o.w, now, asked, o.e, o.g)
    o.e, o.g = c.e, c.g
    if c.retry and (not retry or c.retry > retry) then
      retry = c.retry
    end
    reset = math.max(reset, c.reset)
  end
  local remaining = math.max(p.l - own.count, 0)
  local d
  if retry then
    d = decision(0, p.l, retry == own.retry and remaining or 0, math.max(retry, 1), own.reset)
  elseif cost == 0 then
    d = decision(1, p.l, remaining, nil, own.reset)
  end
  if d then
    d.keep = reset
    return d, nil
  end
  local at = math.max(now, s.len > 0 and s.newest or 0)
  local merged
  if s.len > 0 and s.newest == at then
    local _, count = s.entry(s.len)
    merged = count + cost
  end
  d = decision(1, p.l, p.l - (own.count + cost), nil, math.max(at + p.w - now, 0))
  d.keep = math.max(reset, at + p.w - now)
  return d, { dropped = 0, at = at, count = cost, merged = merged }
end

-- A view's first `len` entries copied into a log in memory of its own, remembering `others`
-- (a log not read from a key has nothing to view).
local function copied(view, len, others)
  local entries = {}
  for i = 1, len do
    local at, count = view.entry(i)
    entries[i] = { at, count }
  end
  local m = memory_log(entries)
  m.others = others
  return m
end

-- A policy change: the entries still inside the new window; above the new L entries, the
-- oldest are merged into one at the latest of their instants. Those that leave are a prefix,
-- so the result is a view over `s`: the prefix read once, nothing else read or copied.
function log.rescale(s, from, to, now)
  local gone, gone_count = 0, 0
  while gone < s.len do
    local at, count = s.entry(gone + 1)
    if at + to.w > now then
      break
    end
    gone, gone_count = gone + 1, gone_count + count
  end
  local len, head = s.len - gone, nil
  if len > to.l then
    -- Entries gone+1 .. gone+cut merge into one at the latest of their instants.
    local cut = len - to.l + 1
    local merged = 0
    local at
    for i = gone + 1, gone + cut do
      local a, count = s.entry(i)
      merged, at = merged + count, a
    end
    head = { at, merged }
    gone, len = gone + cut - 1, to.l
  end
  if gone_count > s.total then
    s.bad()
  end
  local v = {
    key = s.key, total = s.total - gone_count, newest = len > 0 and s.newest or 0, len = len,
    drop = (s.drop or 0) + gone, head = head, bad = s.bad, entries = s.entries, others = s.others,
  }
  function v.entry(i)
    if i == 1 and head then
      return head[1], head[2]
    end
    return s.entry(i + gone)
  end
  if not s.key then
    return copied(v, len, s.others)
  end
  return v
end

-- The entries of `s` inside a window of w at now, in memory.
local function all_entries(s, w, now)
  local out = {}
  for i = 1, s.len do
    local at, count = s.entry(i)
    if at + w > now then
      out[#out + 1] = { at, count }
    end
  end
  return out
end

-- Gives back n of the newest live entries' count: the entries that left the window go from the
-- front, the refunded ones from the back; a view over `s` again, reading only those (s itself
-- when nothing changes).
function log.refund(s, p, now, n)
  local v = log.rescale(s, p, log_span(s, p), now)
  local len, total, tail = v.len, v.total, nil
  while n > 0 and len > 0 do
    local at, count = v.entry(len)
    local taken = math.min(count, n)
    n, total = n - taken, total - taken
    if taken == count then
      len = len - 1
    else
      tail = { at, count - taken }
    end
  end
  local pop = v.len - len
  if (v.drop or 0) == (s.drop or 0) and pop == 0 and not tail and not v.head then
    return s
  end
  local r = {
    key = v.key, total = total, len = len, drop = v.drop, head = v.head, pop = pop, tail = tail,
    bad = v.bad, newest = len > 0 and (v.entry(len)) or 0, others = unedged(v.others),
  }
  function r.entry(i)
    if i == len and tail then
      return tail[1], tail[2]
    end
    return v.entry(i)
  end
  if not v.key then
    return copied(r, len, unedged(v.others))
  end
  return r
end

------------------------------------------------------------------------------------------------
-- Keys: what a key holds, and storing a state with its expiry.

-- The one list of algorithms, in the module's registry order (core/src/algo/mod.rs): each
-- table's `tag` names it in stored values, its `word` in commands (inside rl_all for a limiter),
-- `fname` its function (`rl_<word>` in lower case: the loading environment has no `string`); `shaper` marks the one that is not a limiter, `hot` the ones with a
-- fast path. Everything below that names algorithms is derived from it; tests/functions/
-- checks the functions it registers against the registry.
local LIST = { gcra, bucket, log, counter, fixed, shape }

local ALGORITHMS = {}
for i = 1, #LIST do
  local algo = LIST[i]
  ALGORITHMS[algo.tag] = algo
end

local TYPE_NAMES = {
  string = 'a string', list = 'a list', hash = 'a hash', set = 'a set', zset = 'a sorted set',
  stream = 'a stream',
}

local function wrong_type(holds, wanted, key)
  local w = wanted and (' ' .. wanted) or ''
  local k = key and (" '" .. echo(key) .. "'") or ''
  fail('WRONGTYPE the key' .. k .. ' holds ' .. holds .. ', not a' .. w .. ' limiter; use another key or DEL it')
end

local function policy_of(l, w, b)
  return { l = l, w = w, b = b }
end

local function same_policy(a, b)
  return a.l == b.l and a.w == b.w and a.b == b.b
end

-- The numbers of a stored value, "tag n n n …" (single spaces), each at most 9·10^15 in
-- magnitude (exact: below 2^53); nil for anything else. Only the field at `signed` (a token bucket's balance) may be negative.
-- Stored values are read, never trusted: a key another client wrote is not a limiter.
-- (`%d+` between single spaces cannot backtrack far: a digit run ends only at a space; a run of
-- 17 digits or more reads above 9·10^15, 400 digits as infinity: both refused.)
local PATTERNS = {}
local function numbers(text, tag, count, signed)
  if #text > 18 * count + 2 then
    return nil
  end
  local key = tag .. count .. (signed or '')
  local pattern = PATTERNS[key]
  if not pattern then
    pattern = '^' .. tag
    for i = 1, count do
      pattern = pattern .. (i == signed and ' (%-?%d+)' or ' (%d+)')
    end
    pattern = pattern .. '$'
    PATTERNS[key] = pattern
  end
  local f = { string.match(text, pattern) }
  if #f ~= count then
    return nil
  end
  for i = 1, count do
    local n = tonumber(f[i])
    if n > MAX_STORED or n < -MAX_STORED then
      return nil
    end
    f[i] = n
  end
  return f
end

-- A policy a stored value may hold: the bounds a request's arguments have.
local function valid_policy(algo, p)
  local max_l = algo == log and MAX_LOG or MAX_AMOUNT
  return p.l >= 1 and p.l <= max_l and p.w >= 1 and p.w <= algo.max_w and p.b >= 1
    and p.b <= MAX_AMOUNT and p.b * p.w <= MAX_REFILL_MS * p.l
end

-- How far ahead of now (ms) a stored arrival time may lie: the largest debt the library stores
-- and the clock's slack (a bucket's last refill: the slack). Within it, every product the
-- algorithms take stays below 2^53.
local function max_ahead(p)
  return idiv(MAX_UNITS + CLOCK_SLACK, p.l)
end

local function aligned(start, p)
  return start % p.w == 0
end

-- Whether a decoded state is one the library could have written under `p` by `now`: every
-- number an exact integer within what its policy allows (the header's bounds are checked by
-- valid_policy, a sliding log's entries as they are read).
local VALID = {
  [gcra] = function(s, p, now)
    return s.tr < p.l and s.tf < NS and s.tm - now <= max_ahead(p)
  end,
  [shape] = function(s, p, now)
    return s.tr < p.l and s.tf < NS and s.tm - now <= max_ahead(p) and s.d < p.b
  end,
  [bucket] = function(s, p, now)
    return s.t <= p.b * p.w and s.t >= -MAX_UNITS and s.tf < NS
      and (s.t < p.b * p.w or s.tf == 0) and s.last - now <= idiv(CLOCK_SLACK, p.l)
  end,
  [fixed] = function(s, p)
    return aligned(s.start, p) and s.count <= MAX_COUNT
  end,
  [counter] = function(s, p)
    return aligned(s.start, p) and s.prev <= MAX_COUNT and s.curr <= MAX_COUNT
  end,
}

-- A sliding log from the first elements of its list (`got`, LRANGE 0 FIRST), the header
-- "s L W total newest_ms entries": at most L entries, each counting at least 1, the total at
-- most the library's largest L, and the list exactly that long.
local function held_log(key, got, bad)
  local first = got[1]
  if type(first) ~= 'string' or #first > 18 * (3 + 2 * MAX_CONFIGURATIONS) + 2 then
    return nil
  end
  -- The header; a log remembering other configurations adds its edge "E G" (log_window) and
  -- " L W E G" for each of them (1 to 7).
  local _, spaces = string.gsub(first, ' ', ' ')
  local extra = spaces - 7
  if spaces ~= 5 and (extra < 4 or extra % 4 ~= 0 or extra > 4 * (MAX_CONFIGURATIONS - 1)) then
    return nil
  end
  local f = numbers(first, 's', spaces)
  if not f then
    return nil
  end
  local p = policy_of(f[1], f[2], f[1])
  local total, newest, len = f[3], f[4], f[5]
  local max_l, others = p.l, nil
  for i = 8, spaces, 4 do
    local o = policy_of(f[i], f[i + 1], f[i])
    o.e, o.g = f[i + 2], f[i + 3]
    if not valid_policy(log, o) or same_policy(o, p) or o.e > len or o.g > total then
      return nil
    end
    others = others or {}
    others[#others + 1] = o
    max_l = math.max(max_l, o.l)
  end
  if not valid_policy(log, p) or len > max_l or total > MAX_LOG_TOTAL or total < len or (len == 0) ~= (total == 0) then
    return nil
  end
  local length = #got
  if length > FIRST then
    length = redis.call('LLEN', key)
  end
  if length ~= len + 1 then
    return nil
  end
  if spaces > 5 and (f[6] > len or f[7] > total) then
    return nil
  end
  local s = stored_log(key, total, newest, len, bad, got)
  s.others = others
  s.edge = others and { f[6], f[7] } or nil
  return { algo = log, policy = p, state = s }
end

-- One stored configuration "tag L W [B] fields…", as { algo, policy, state }, or nil.
local function limiter_value(v, now)
  local algo = ALGORITHMS[string.sub(v, 1, 1)]
  if not algo or algo == log then
    return nil
  end
  local signed = algo == bucket and 4 or nil
  local f = numbers(v, algo.tag, algo.fields, signed)
  if not f and algo.short then
    -- The short form: the nanosecond remainders (and GCRA's ms remainder) are 0.
    f = numbers(v, algo.tag, algo.fields - algo.short, signed)
    if f then
      for _ = 1, algo.short do
        table.insert(f, algo == gcra and #f + 1 or 5, 0)
      end
    end
  end
  if f then
    local p = policy_of(f[1], f[2], algo.burst and f[3] or f[1])
    if valid_policy(algo, p) then
      local s = algo.decode(unpack(f, algo.burst and 4 or 3))
      if VALID[algo](s, p, now) then
        return { algo = algo, policy = p, state = s }
      end
    end
  end
  return nil
end

-- A region's share (RL.SHARE, src/command/share.rs, docs/regions.md), held with a key's one
-- configuration: "S share expire_at_ms asked admitted <configuration>". Until the expiry a request
-- is decided under the caller's policy scaled to the share (`scaled`), the state carried over;
-- asked and admitted count the demand since rl_demand last read it (the module keeps them in
-- memory; here they are stored, so a request on such a key writes them even when denied, and
-- they reach replicas). `held` notes each key's share for the call (`by_key`, emptied by
-- `guarded` at each call), so that every write of the key keeps it. The sliding log and the
-- shaper take no share here. One table keeps this block's names out of the chunk's locals.
local shares = { by_key = {}, max_keys = 10000, max_expire_at = 1000000000000000 }

-- `p` with L = `limit`: W unchanged, B scaled by limit / L rounded down, at least 1
-- (state::share::scaled); a policy beyond the library's bounds leaves p as called.
function shares.scaled(p, limit)
  if limit == p.l then
    return p
  end
  local b = idiv(p.b * limit, p.l)
  if b < 1 then
    b = 1
  end
  if limit > MAX_AMOUNT or b > MAX_AMOUNT or b * p.w > MAX_REFILL_MS * limit then
    return p
  end
  return policy_of(limit, p.w, b)
end

-- The policy a call under `p` is decided under at now: scaled while the share is in force.
function shares.policy(share, p, now)
  if now < share.expire then
    return shares.scaled(p, share.limit)
  end
  return p
end

function shares.text(share)
  return string.format('S %d %d %d %d ', share.limit, share.expire, share.asked, share.admitted)
end

-- A shared value as { algo, policy, state, share }, or nil.
function shares.parse(v, now)
  if #v > 200 then
    return nil
  end
  local s, e, a, m, rest = string.match(v, '^S (%d+) (%d+) (%d+) (%d+) (.+)$')
  if not rest or #s > 16 or #e > 16 or #a > 16 or #m > 16 then
    return nil
  end
  s, e, a, m = tonumber(s), tonumber(e), tonumber(a), tonumber(m)
  if s < 1 or s > MAX_AMOUNT or e > shares.max_expire_at or a > MAX_STORED or m > MAX_STORED then
    return nil
  end
  local h = limiter_value(rest, now)
  if not h or h.algo.shaper then
    return nil
  end
  h.share = { limit = s, expire = e, asked = a, admitted = m, rest = rest }
  return h
end

-- A request of `asked` on a key holding `share` that spent `admitted`: counted, and the key
-- lives until the share's expiry (d.keep).
function shares.count(share, d, asked, admitted, now)
  d.keep = math.max(share.expire - now, 0)
  if asked > 0 then
    share.asked = math.min(share.asked + asked, MAX_STORED)
    share.admitted = math.min(share.admitted + admitted, MAX_STORED)
  end
end

-- The counters written where the state did not change (the module's are in memory).
function shares.keep_counts(key, share)
  redis.call('SET', key, shares.text(share) .. share.rest, 'KEEPTTL')
end

-- For rl_charge and rl_refund, which decide nothing: the key carried to the policy it is
-- decided under now (src/command/share.rs `carry_for_settle`): `given`'s scaled to the share
-- while in force (its own after), or without one the held policy scaled. Returns whether it
-- moved, the policy and the state.
function shares.carry(h, given, now)
  local share, from = h.share, h.policy
  local to = from
  if given then
    to = shares.policy(share, given, now)
  elseif now < share.expire then
    to = shares.scaled(from, share.limit)
  end
  if same_policy(to, from) then
    return false, from, h.state
  end
  return true, to, h.algo.rescale(h.state, from, to, now)
end

-- A cost above the share's capacity waits for the share to move or expire: denied, with the
-- wait until its expiry (src/command/plan.rs `shared_plan`).
function shares.above(algo, s, p, now, share)
  local d = algo.check(s, p, now, 0)
  d.allowed, d.retry = 0, math.max(share.expire - now, 1)
  return d
end

-- What `key` holds at `now`: nil, or { algo, policy, state, others }; another value raises WRONGTYPE
-- naming `wanted` (the algorithm the caller needs; nil: any limiter) and, when `named`, the key.
local function held(key, wanted, named, now)
  shares.by_key[key] = nil
  local function bad(holds)
    return function()
      wrong_type(holds, wanted and wanted.name, named and key)
    end
  end
  if wanted == log then
    -- A sliding log's own call reads the header and the oldest entries first: one call when
    -- the key holds a log.
    local got = redis.pcall('LRANGE', key, 0, FIRST)
    if type(got) == 'table' and not got.err then
      if #got == 0 then
        return nil
      end
      local h = held_log(key, got, bad('a list'))
      if h then
        return h
      end
      wrong_type('a list', log.name, named and key)
    end
  end
  local v = redis.pcall('GET', key)
  if v == false then
    return nil
  end
  local holds = 'a string'
  if type(v) == 'string' then
    if string.byte(v) == 83 then
      -- "S …": a region's share with one configuration.
      local h = shares.parse(v, now)
      if h then
        h.others = {}
        shares.by_key[key] = h.share
        return h
      end
    elseif not string.find(v, ' ; ', 1, true) then
      local h = limiter_value(v, now)
      if h then
        h.others = {}
        return h
      end
    elseif #v <= 1024 then
      -- The current configuration, then the others it remembers.
      local h, others, seen = nil, {}, {}
      for part in string.gmatch(v .. ' ; ', '(.-) ; ') do
        local c = limiter_value(part, now)
        local id = c and (c.policy.l .. ' ' .. c.policy.w .. ' ' .. c.policy.b)
        if not c or seen[id] or (h and c.algo ~= h.algo) or not c.algo.remembers then
          h = nil
          break
        end
        seen[id] = true
        if h then
          others[#others + 1] = c
        else
          h = c
        end
      end
      if h and #others < MAX_CONFIGURATIONS then
        h.others = others
        return h
      end
    end
  else
    local t = redis.call('TYPE', key)['ok']
    holds = TYPE_NAMES[t] or "another module's value"
    if t == 'list' then
      local h = held_log(key, redis.call('LRANGE', key, 0, FIRST), bad(holds))
      if h then
        return h
      end
    end
  end
  wrong_type(holds, wanted and wanted.name, named and key)
end

-- Held by `algo`, or WRONGTYPE.
local function held_as(key, algo, named, now)
  local h = held(key, algo, named, now)
  if h and h.algo ~= algo then
    wrong_type('a ' .. h.algo.name .. ' limiter', algo.name, named and key)
  end
  return h
end

local function expire_at(now, d)
  return now + math.max(d.reset, d.keep or 0, MIN_TTL_MS)
end

local function header(p, s)
  local text = 's ' .. num(p.l) .. ' ' .. num(p.w) .. ' ' .. num(s.total) .. ' ' .. num(s.newest) .. ' ' .. num(s.len)
  if s.others and #s.others > 0 then
    local edge = s.edge or { 0, 0 }
    text = text .. ' ' .. num(edge[1]) .. ' ' .. num(edge[2])
    for _, o in ipairs(s.others) do
      text = text .. ' ' .. num(o.l) .. ' ' .. num(o.w) .. ' ' .. num(o.e or 0) .. ' ' .. num(o.g or 0)
    end
  end
  return text
end

local function entry_text(at, count)
  return num(at) .. ' ' .. num(count)
end

-- Stores a whole state (a first request, a refund, any state not read from the key).
-- `others`: the other configurations a key remembers (every algorithm but the sliding log), stored after the
-- current one (" ; "-separated); the key lives until every one of them is full again.
local function store(key, algo, p, s, now, d, others)
  local at = expire_at(now, d)
  if algo ~= log then
    local text = algo.encode(s, p)
    local share = shares.by_key[key]
    if share then
      -- A key holding a share keeps one configuration (src/command/plan.rs `shared_plan`).
      text = shares.text(share) .. text
    elseif others and #others > 0 then
      local keep = d.reset
      local parts = { text }
      for _, o in ipairs(others) do
        parts[#parts + 1] = algo.encode(o.state, o.policy)
        keep = math.max(keep, algo.check(o.state, o.policy, now, 0).reset)
      end
      text = table.concat(parts, ' ; ')
      at = now + math.max(keep, MIN_TTL_MS)
    end
    redis.call('SET', key, text, 'PXAT', num(at))
    return
  end
  redis.call('DEL', key)
  local words = { header(p, s) }
  for i = 1, s.len do
    words[#words + 1] = entry_text(s.entry(i))
    if #words == 1000 then
      redis.call('RPUSH', key, unpack(words))
      words = {}
    end
  end
  if #words > 0 then
    redis.call('RPUSH', key, unpack(words))
  end
  redis.call('PEXPIREAT', key, num(at))
end

-- A sliding log after an admitted request, in memory (a new key, or a log held in memory).
local function log_applied(s, change)
  local entries = {}
  for i = change.dropped + 1, s.len do
    local at, count = s.entry(i)
    entries[#entries + 1] = { at, count }
  end
  local last = entries[#entries]
  if last and last[1] == change.at then
    last[2] = last[2] + change.count
  else
    entries[#entries + 1] = { change.at, change.count }
  end
  return memory_log(entries)
end

-- Writes a sliding log read from `key` (or a view over it, after a policy change) in place,
-- with an admitted request's change if any: the entries gone go from the front, a merged head
-- replaces the first, the request joins the newest entry or follows it. Effects: a few small
-- commands whatever the log's length. Everything it writes was read before the first write.
local function log_write(key, p, s, change, now, d)
  change = change or { dropped = 0, count = 0 }
  local drop = (s.drop or 0) + change.dropped
  local len = s.len - change.dropped
  local head = change.dropped == 0 and s.head or nil
  local total = s.total
  if change.dropped > 0 then
    -- The entries the decision dropped were read (and cached) by it.
    for i = 1, change.dropped do
      local _, count = s.entry(i)
      total = total - count
    end
  end
  local h = {
    total = total + change.count,
    newest = change.at or (len > 0 and s.newest or 0),
    len = len,
    others = s.others,
    edge = s.edge,
  }
  if change.count > 0 and not change.merged then
    h.len = len + 1
  end
  if len == 0 then
    redis.call('DEL', key)
    if change.count > 0 then
      redis.call('RPUSH', key, header(p, h), entry_text(change.at, change.count))
    else
      redis.call('RPUSH', key, header(p, h))
    end
  else
    local pop = s.pop or 0
    if drop > 0 or pop > 0 then
      -- Keeps elements drop .. end, less the `pop` last: the first of them is overwritten by
      -- the header.
      redis.call('LTRIM', key, drop, -1 - pop)
    end
    redis.call('LSET', key, 0, header(p, h))
    if head then
      redis.call('LSET', key, 1, entry_text(head[1], head[2]))
    end
    if s.tail then
      redis.call('LSET', key, -1, entry_text(s.tail[1], s.tail[2]))
    end
    if change.merged then
      redis.call('LSET', key, -1, entry_text(change.at, change.merged))
    elseif change.count > 0 then
      redis.call('RPUSH', key, entry_text(change.at, change.count))
    end
  end
  redis.call('PEXPIREAT', key, num(expire_at(now, d)))
end

-- Whether two states of one algorithm are equal in every field.
local function same_state(a, b)
  for k, v in pairs(a) do
    if type(v) ~= 'function' and b[k] ~= v then
      return false
    end
  end
  for k, v in pairs(b) do
    if type(v) ~= 'function' and a[k] ~= v then
      return false
    end
  end
  return true
end

-- Whether two policies are kin (src/algo/step.rs `kin`): their states count the same admissions
-- over the same span. The window algorithms: the same W; the others: the same L and W.
local function kin(algo, a, b)
  return a.w == b.w and (not algo.burst or a.l == b.l)
end

-- Whether `s` under `p` is as good as fresh: a peek on it answers as a peek on no state.
local function fresh(algo, p, s, now)
  local a, b = algo.check(s, p, now, 0), algo.check(nil, p, now, 0)
  return a.allowed == b.allowed and a.remaining == b.remaining and a.retry == b.retry and a.reset == b.reset
end

-- Whether the remembered (p, s) can be dropped beside (cp, cs) (src/algo/step.rs `droppable`):
-- as good as fresh, or kin of cp and exactly cs carried over to p.
-- (A bucket compares as the module stores it: `bucket.same`.)
local function droppable(algo, p, s, cp, cs, now)
  if fresh(algo, p, s, now) then
    return true
  elseif not kin(algo, p, cp) then
    return false
  end
  local carried = algo.rescale(cs, cp, p, now)
  if algo.same then
    return algo.same(s, carried, p)
  end
  return same_state(s, carried)
end

-- `others` less those droppable beside (cp, cs).
local function live(algo, others, cp, cs, now)
  if #others == 0 then
    return others
  end
  local out = {}
  for _, o in ipairs(others) do
    if not droppable(algo, o.policy, o.state, cp, cs, now) then
      out[#out + 1] = o
    end
  end
  return out
end

-- Stores the state a request leaves: `next` (admitted), else the carried one (a policy change).
local function settle(key, algo, p, start, carried, next, now, d, others)
  if algo == log then
    if not (next or carried) then
      return
    elseif start and start.key then
      log_write(key, p, start, next, now, d)
    else
      store(key, log, p, next and log_applied(start or memory_log({}), next) or start, now, d)
    end
  elseif next or carried then
    -- Those that can be dropped beside the state stored go (src/algo/step.rs `Kept::new`).
    local s = next or carried
    store(key, algo, p, s, now, d, others and live(algo, others, p, s, now))
  end
end

------------------------------------------------------------------------------------------------
-- Arguments: `L W [BURST B] [COST n]`, as src/command/args.rs reads them.

-- A sliding log's start (docs/functions.md, the sliding log's rule): the configurations it
-- remembers besides `p` (the previous current first), less those that count nothing in their
-- window now and those another one implies (a W as long or longer and an L as small or smaller:
-- it denies whatever they deny); beyond 7 others, the last two merge into one that denies more
-- than either (the smaller L over the longer W). The state: the stored log over the longest W
-- and largest L among them (a view over the key); with no other, the one-configuration rule.
local function log_configurations(h, p, now)
  local s = h.state
  local edge = s.edge or { 0, 0 }
  local list = { policy_of(h.policy.l, h.policy.w, h.policy.b) }
  list[1].e, list[1].g = edge[1], edge[2]
  for _, o in ipairs(s.others or {}) do
    list[#list + 1] = o
  end
  -- The request's configuration's edge, if the key holds it.
  local own = { 0, 0 }
  for _, o in ipairs(list) do
    if same_policy(o, p) then
      own = { o.e or 0, o.g or 0 }
    end
  end
  local cands = {}
  for _, o in ipairs(list) do
    if not same_policy(o, p) and s.len > 0 and s.newest + o.w > now then
      cands[#cands + 1] = o
    end
  end
  local function implied(i, o)
    if p.w >= o.w and p.l <= o.l then
      return true
    end
    for j, q in ipairs(cands) do
      if j ~= i and q.w >= o.w and q.l <= o.l and (q.w > o.w or q.l < o.l or j < i) then
        return true
      end
    end
    return false
  end
  local others = {}
  for i, o in ipairs(cands) do
    if not implied(i, o) then
      others[#others + 1] = o
    end
  end
  while #others > MAX_CONFIGURATIONS - 1 do
    local a, b = others[#others - 1], others[#others]
    others[#others] = nil
    others[#others] = policy_of(math.min(a.l, b.l), math.max(a.w, b.w), math.min(a.l, b.l))
  end
  local changed = not same_policy(h.policy, p) or #others ~= #(s.others or {})
  for i, o in ipairs(others) do
    local was = (s.others or {})[i]
    changed = changed or not was or not same_policy(was, o)
  end
  if #others == 0 then
    if not changed then
      return s, {}, false
    end
    local v = log.rescale(s, h.policy, p, now)
    v.others = nil
    return v, {}, true
  end
  local v = log.rescale(s, h.policy, log_span({ others = others }, p), now)
  -- The edges, moved by the entries the view drops from the front (out of every window), or
  -- read anew from the front when its oldest entries merged.
  local d, dc = (v.drop or 0) - (s.drop or 0), s.total - v.total
  local function moved(e, g)
    e, g = e or 0, g or 0
    if v.head or e < d or g < dc then
      return 0, 0
    end
    return e - d, g - dc
  end
  v.edge = { moved(own[1], own[2]) }
  for _, o in ipairs(others) do
    o.e, o.g = moved(o.e, o.g)
  end
  v.others = others
  return v, {}, changed
end

-- Where a request under `p` starts (src/algo/step.rs `start`): the key's state under p
-- (current, remembered, or carried over from its kin, else from the current one), the other
-- configurations as they will be kept (the previous current first, those droppable beside the
-- state it starts from gone), whether the current configuration changes, and on overflow (one
-- configuration more than MAX_CONFIGURATIONS) the current configuration, which stays current.
-- A sliding log: log_configurations (a stricter rule, docs/functions.md).
local function configurations(algo, h, p, now)
  if not h then
    return nil, {}, false
  elseif algo == log then
    return log_configurations(h, p, now)
  end
  local others = h.others or {}
  if same_policy(h.policy, p) then
    if #others > 0 then
      others = live(algo, others, h.policy, h.state, now)
    end
    return h.state, others, false
  end
  if not algo.remembers then
    return algo.rescale(h.state, h.policy, p, now), {}, true
  end
  local found
  for i, o in ipairs(others) do
    if same_policy(o.policy, p) then
      found = i
    end
  end
  local state
  if found then
    state = others[found].state
  else
    -- Its kin's state if the key holds one that is not full again, else the current one's.
    local from = h
    if not (kin(algo, h.policy, p) and not fresh(algo, h.policy, h.state, now)) then
      for _, o in ipairs(others) do
        if kin(algo, o.policy, p) and not fresh(algo, o.policy, o.state, now) then
          from = o
          break
        end
      end
    end
    state = algo.rescale(from.state, from.policy, p, now)
  end
  local kept = {}
  if not droppable(algo, h.policy, h.state, p, state, now) then
    kept[1] = { policy = h.policy, state = h.state }
  end
  for i, o in ipairs(others) do
    if i ~= found and not droppable(algo, o.policy, o.state, p, state, now) then
      kept[#kept + 1] = o
    end
  end
  if not found and #kept + 1 > MAX_CONFIGURATIONS then
    return state, live(algo, others, h.policy, h.state, now), false, { policy = h.policy, state = h.state }
  end
  return state, kept, true
end

-- The other configurations, each charged n at now by its own rule.
local function charged(algo, others, now, n)
  if n == 0 or #others == 0 then
    return others
  end
  local out = {}
  for i, o in ipairs(others) do
    out[i] = { policy = o.policy, state = algo.bill(o.state, o.policy, now, n) }
  end
  return out
end

-- How long the remembered (p, s) makes a request spending n wait, if it refuses it
-- (src/algo/step.rs `refusal`): its own check with that cost; a cost above its capacity waits
-- until it is full again.
local function refusal(algo, p, s, now, n)
  if n > p.b then
    return algo.check(s, p, now, 0).reset
  end
  local d = algo.check(s, p, now, n)
  if d.allowed == 0 then
    return d.retry or d.reset
  end
  return nil
end

-- An overflowed request whose own decision `d` spends n (0: denied) (src/algo/step.rs
-- `overflowed`): admitted only if every remembered configuration admits n too, and then charged
-- to all of them, the current one `cur` staying current. Returns the decision (denied with the
-- longest wait if one refuses) and what to store: { policy, state, others, reset }, the key
-- living at least as long as the reply's reset says.
local function overflowed(algo, d, cur, others, now, n)
  local wait
  if n > 0 then
    wait = refusal(algo, cur.policy, cur.state, now, n)
    for _, o in ipairs(others) do
      local w = refusal(algo, o.policy, o.state, now, n)
      if w and (not wait or w > wait) then
        wait = w
      end
    end
  end
  local state = cur.state
  if wait then
    d = decision(0, d.limit, 0, math.max(wait, 1), d.reset)
  elseif n > 0 then
    state = algo.bill(state, cur.policy, now, n)
    others = charged(algo, others, now, n)
  end
  local reset = math.max(algo.check(state, cur.policy, now, 0).reset, d.reset)
  return d, { policy = cur.policy, state = state, others = live(algo, others, cur.policy, state, now), reset = reset }
end

-- Stores what an overflowed request keeps.
local function store_kept(key, algo, k, now)
  store(key, algo, k.policy, k.state, now, { reset = k.reset }, k.others)
end

-- Reads L, W and the options of one limiter from args[i], args[i+1], …; `stop` tells where its
-- options end. `want`: the amount is WANT (required, from 1), else COST (default 1, 0 peeks).
-- Returns the policy, the amount and the index after the limiter.
local function parse_limiter(fname, algo, args, i, want, stop)
  if args[i + 1] == nil then
    arity(fname)
  end
  local l = parse_int('L', args[i], 1, MAX_AMOUNT)
  local w = parse_int('W', args[i + 1], 1, algo.max_w)
  i = i + 2
  local amount_name = want and 'WANT' or 'COST'
  local burst, amount
  while args[i] ~= nil and not (stop and stop(args[i])) do
    local name = string.upper(args[i])
    local label
    if algo.burst and name == 'BURST' then
      label = 'BURST'
      if burst then
        fail('ERR option BURST given more than once')
      end
    elseif name == amount_name then
      label = amount_name
      if amount then
        fail('ERR option ' .. amount_name .. ' given more than once')
      end
    else
      local known = algo.burst and ('BURST or ' .. amount_name) or amount_name
      fail("ERR unknown option '" .. echo(args[i]) .. "'; expected " .. known)
    end
    if args[i + 1] == nil then
      fail('ERR option ' .. label .. ' needs a value')
    end
    if label == 'BURST' then
      burst = parse_int('BURST', args[i + 1], 1, MAX_AMOUNT)
    else
      amount = parse_int(label, args[i + 1], want and 1 or 0, MAX_AMOUNT)
    end
    i = i + 2
  end
  local b = burst or l
  if b * w > MAX_REFILL_MS * l then
    fail(string.format('ERR a capacity of %d refilled at %d per %d ms takes longer than %d ms to refill',
      b, l, w, MAX_REFILL_MS))
  end
  if amount == nil then
    if want then
      fail('ERR WANT n is required')
    end
    amount = 1
  end
  if not want and amount > b then
    fail(string.format('ERR COST %d can never be admitted: it exceeds the capacity %d', amount, b))
  end
  return policy_of(l, w, b), amount, i
end

local function accepts(algo, p)
  if algo == log and p.l > MAX_LOG then
    fail(string.format('ERR L %d is above the library\'s sliding log maximum (%d): a sliding log stores an entry per request; use rl_slidingcounter for large limits', p.l, MAX_LOG))
  end
end

local function reply(d)
  return { d.allowed, d.limit, d.remaining, d.retry or -1, d.reset }
end

------------------------------------------------------------------------------------------------
-- The functions.

-- One request to one limiter (src/algo/step.rs `step`, main's rule): it decides on the state of
-- its configuration (current, remembered, or carried over), which is stored as the current one
-- whether or not the request is admitted (a peek stores nothing); what it spends is charged to
-- every other configuration. A sliding log: log_configurations.
-- `now`: the instant, when the caller already read it.
local function request(fname, algo, keys, args, want, now)
  if #keys ~= 1 or #args < (want and 4 or 2) then
    arity(fname)
  end
  local p, amount = parse_limiter(fname, algo, args, 1, want)
  accepts(algo, p)
  now = now or now_ms()
  local key = keys[1]
  local h = held_as(key, algo, false, now)
  local share = h and h.share
  if share then
    p = shares.policy(share, p, now)
  end
  local start, others, switched, over = configurations(algo, h, p, now)
  local carried = switched and start or nil
  local d, next
  if want then
    d, next = bucket.lease(start, p, now, amount)
  elseif share and amount > p.b then
    d = shares.above(algo, start, p, now, share)
  else
    d, next = algo.check(start, p, now, amount)
  end
  if over then
    if amount > 0 then
      local k
      d, k = overflowed(algo, d, over, others, now, next and (want and d.allowed or amount) or 0)
      store_kept(key, algo, k, now)
    end
    return reply(d)
  end
  if next then
    -- What the request spent (a lease: what it granted), charged to every other configuration.
    others = charged(algo, others, now, want and d.allowed or amount)
  end
  if share then
    shares.count(share, d, amount, next and (want and d.allowed or amount) or 0, now)
  end
  settle(key, algo, p, start, amount > 0 and carried or nil, next, now, d, others)
  if share and amount > 0 and not next and not carried then
    shares.keep_counts(key, share)
  end
  return reply(d)
end

-- @scripts: hot
-- Library functions as upvalues: a global and a field lookup less each, on every call. Taken
-- at the first call: while a library loads, only `redis` is reachable.
local find, match, format, call, pcall_redis
-- How far ahead an arrival time (a last refill) may lie under any L: (MAX_UNITS + CLOCK_SLACK)
-- / MAX_AMOUNT ms (CLOCK_SLACK / MAX_AMOUNT ms).
local ANY_AHEAD, ANY_BACK = 500000000, 100000000
-- What FCALL's hot path remembers between calls (nothing it needs: each is a shortcut to what it
-- would compute): at most MAX_POLICIES policies and MAX_SEEN stored values (of at most
-- MAX_SEEN_BYTES, the most the general path reads: numbers()) with their numbers per function,
-- then it starts afresh, so that arguments and stored values cannot grow them without bound.
local MAX_POLICIES, MAX_SEEN, MAX_SEEN_BYTES = 256, 1024, 110
-- The last PXAT written, as the number and its digits: a key's expiry changes once a
-- millisecond, not once a call.
local last_px, last_pxs = -1, ''

-- A stored value's header `tag L W B ` as the hot path reads it (digits, no leading zero).
local PLAIN_HEADER = '^. [1-9]%d* [1-9]%d* [1-9]%d* $'

-- The hot path of rl_gcra and rl_tokenbucket, for `L W [BURST B] [COST n]` written plainly
-- (digits, no leading zero, the options in capitals, each once) on a key that holds nothing or
-- that same policy: the general path's arithmetic (gcra.check, bucket.check, the stored
-- formats, VALID) inlined, without the tables and parsing the general path builds, which cost
-- more than the decision itself (docs/functions.md, cost). Any other call goes to `general`,
-- which decides from the same instant when the hot path already read it.
-- The scripts backend runs the lines between `@scripts: body` and `@scripts: end body` as its
-- script's own code, not as a closure: creating one with these upvalues, or any function the
-- body would call, costs more than the decision (so the body calls none but now_ms, the one
-- clock). It binds fast's parameters and the closure's itself (tag from HOT, the general
-- entry, KEYS, ARGV), runs fast's own lines before `@scripts: memory` and declares the memory's
-- names without values (the line after it): a script keeps nothing between calls, so there
-- `policies`, `seen` and `seconds` are nil, nothing is looked up or kept, and the call reads its
-- arguments and the stored value afresh, which costs less than building the memory every call.
local function fast(tag, general)
  local is_gcra = tag == 'g'
  -- @scripts: memory
  local policies, count, seen, seen_count, seconds = {}, 0, {}, 0, { false, 0 }
  -- The policies read before, by the L, W and B strings (B: L's when the call names no BURST,
  -- the same policy): { l, w, b, the stored value's prefix (false until first needed), the last
  -- state written under it (text, x, y, z) }. The values read: { text = { x, y, z, policy } }.
  -- The clock's second (now_ms).
  return function(keys, args)
    -- @scripts: body
    if not find then
      -- (`string` and `redis` looked up once each: a script takes these on every call.)
      local S, R = string, redis
      find, match, format, call = S.find, S.match, S.format, R.call
      pcall_redis = R.pcall
    end
    local ls, ws = args[1], args[2]
    if ws == nil or #keys ~= 1 then
      return general(keys, args)
    end
    local bs, cs = ls, nil
    local o = args[3]
    if o ~= nil then
      local v, bursted = args[4], false
      if v == nil then
        return general(keys, args)
      elseif o == 'BURST' then
        bs, bursted = v, true
      elseif o == 'COST' then
        cs = v
      else
        return general(keys, args)
      end
      o = args[5]
      if o ~= nil then
        v = args[6]
        if v == nil or args[7] ~= nil then
          return general(keys, args)
        elseif o == 'COST' and cs == nil then
          cs = v
        elseif o == 'BURST' and not bursted then
          bs = v
        else
          return general(keys, args)
        end
      end
    end
    -- Digits become numbers by arithmetic (`s + 0`), only once checked to be digits: it reads
    -- them once, where tonumber() reads them twice and is a call.
    local cost = 1
    if cs ~= nil and cs ~= '1' then
      if cs == '0' then
        cost = 0
      elseif #cs <= 8 and find(cs, '^[1-9]%d*$') then
        -- 1 to 8 digits, the first not 0: a COST the general path reads as the same number.
        cost = cs + 0
      else
        return general(keys, args)
      end
    end
    local known = policies and policies[ls]
    known = known and known[ws]
    known = known and known[bs]
    -- A policy remembered was checked before it was kept; else L, W and B are checked to be
    -- digits without a leading zero below (against the stored value's header, or PLAIN_HEADER),
    -- then read and bounded. `prefix`, the stored value's `tag L W B `, is built when needed: a
    -- denial on a stored value writes nothing, so needs none.
    local l, w, b, prefix
    if known then
      l, w, b, prefix = known[1], known[2], known[3], known[4]
    end
    local now, server_clock = now_ms(seconds)
    local key = keys[1]
    local v = pcall_redis('GET', key)
    -- `own`: the value is the state this path last wrote under the policy, whose fields are in
    -- bounds by construction (a value read is checked below).
    local x, y, z, parsed, own
    if v ~= false then
      if known and v == known[5] then
        x, y, z, own = known[6], known[7], known[8], true
      else
        local got = seen and seen[v]
        if got and got[4] == known then
          x, y, z = got[1], got[2], got[3]
        else
          -- Longer than the general path reads, or not a string (an error's table: GET answers
          -- nothing else; `v.err` of a string is the string library's field, nil): its answer.
          if v.err or #v > MAX_SEEN_BYTES then
            return general(keys, args, now)
          end
          -- Its form (a pattern that fails costs more than telling the form first), then the
          -- pattern of that form, capturing its header's three digit runs and its state:
          -- another policy's unless the runs are L, W and B as given, which are then digits as
          -- the hot path reads them. GCRA: (tat_ms) or (tat_ms tat_rem tat_ns), told by the
          -- length after the header `g L W B ` (#ls + #ws + #bs + 5 bytes): the short form's is
          -- at most 16 (tat_ms <= MAX_STORED), the long form's at least 17 when tat_ms has 13
          -- digits (the years 2001 to 2286); a long form with a shorter tat_ms fails the short
          -- pattern and goes the general way. Token bucket, whose tokens have any number of
          -- digits: (tokens last_ms) or (tokens tokens_ns last_ms), tokens signed, told by its
          -- gaps (plain finds). (The patterns are written out: one built would be built on
          -- every call of a script.)
          local hl, hw, hb
          if is_gcra then
            if #v > #ls + #ws + #bs + 21 then
              hl, hw, hb, x, y, z = match(v, '^g ([1-9]%d*) ([1-9]%d*) ([1-9]%d*) (%d+) (%d+) (%d+)$')
            else
              hl, hw, hb, x = match(v, '^g ([1-9]%d*) ([1-9]%d*) ([1-9]%d*) (%d+)$')
              y, z = 0, 0
            end
          else
            local gap = find(v, ' ', #ls + #ws + #bs + 6, true)
            if gap and find(v, ' ', gap + 1, true) then
              hl, hw, hb, x, y, z = match(v, '^t ([1-9]%d*) ([1-9]%d*) ([1-9]%d*) (%-?%d+) (%d+) (%d+)$')
            else
              hl, hw, hb, x, z = match(v, '^t ([1-9]%d*) ([1-9]%d*) ([1-9]%d*) (%-?%d+) (%d+)$')
              y = 0
            end
          end
          if hl ~= ls or hw ~= ws or hb ~= bs then
            return general(keys, args, now)
          end
          -- (A GCRA state's tat_ns is '0' but after a policy change: no conversion then.)
          x, y, z = x + 0, y + 0, z == '0' and 0 or z + 0
          if x > MAX_STORED or x < -MAX_STORED or y > MAX_STORED or z > MAX_STORED then
            return general(keys, args, now)
          end
          parsed = true
          -- (Kept under a policy remembered: a policy's first call keeps none.)
          if known and seen then
            if seen_count >= MAX_SEEN then
              seen, seen_count = {}, 0
            end
            seen[v] = { x, y, z, known }
            seen_count = seen_count + 1
          end
        end
      end
    end
    if not known then
      if not parsed then
        prefix = tag .. ' ' .. ls .. ' ' .. ws .. ' ' .. bs .. ' '
        if not find(prefix, PLAIN_HEADER) then
          return general(keys, args, now)
        end
      end
      l, w, b = ls + 0, ws + 0, bs + 0
      if l > MAX_AMOUNT or w > MAX_RATE_WINDOW or b > MAX_AMOUNT or b * w > MAX_REFILL_MS * l then
        return general(keys, args, now)
      end
      if policies then
        known = { l, w, b, prefix or false, false, 0, 0, 0 }
        if count >= MAX_POLICIES then
          policies, count = {}, 0
        end
        local by_w = policies[ls]
        if not by_w then
          by_w = {}
          policies[ls] = by_w
        end
        local by_b = by_w[ws]
        if not by_b then
          by_b = {}
          by_w[ws] = by_b
        end
        by_b[bs] = known
        count = count + 1
      end
    end
    if cost > b then
      return general(keys, args, now)
    end
    local cap, asked = b * w, (cost > 0 and cost or 1) * w
    local admitted, retry, reset, remaining, tm, tr, f
    if is_gcra then
      -- x, y, z: tat_ms, tat_rem, tat_ns. The debt (d, f) at now.
      local d
      d, f = 0, 0
      if x then
        -- x − now > idiv(MAX_UNITS + CLOCK_SLACK, l) is (x − now)·l > MAX_UNITS + CLOCK_SLACK: a
        -- product above 2^53, inexact, is above it all the same.
        if (not own and (y >= l or z >= NS)) or (x - now > ANY_AHEAD and (x - now) * l > MAX_UNITS + CLOCK_SLACK) then
          return general(keys, args, now)
        end
        if x >= now then
          d, f = (x - now) * l + y, z
        end
      end
      local needed, after = d + asked, nil
      retry = -1
      if d == 0 and f == 0 then
        -- No debt (a new key, or one paid off): admitted, as cost <= b, and b − cost are left.
        admitted, remaining = true, b - cost
        after = cost > 0 and needed or 0
      else
        admitted = needed < cap or (needed == cap and f == 0)
        after = (admitted and cost > 0) and needed or d
        -- Whole tokens in cap − (after, f), one fewer when f eats into the last: idiv, written
        -- out (a call less on every request).
        local room = cap - after
        remaining = 0
        if room > 0 then
          if f > 0 then
            room = room - 1
          end
          local q = room / w
          q = q - q % 1
          local r = room - q * w
          if r < 0 then
            q = q - 1
          elseif r >= w then
            q = q + 1
          end
          remaining = q
        end
      end
      if not admitted then
        -- ms_up(needed − cap, f, l), written out: ceil((needed − cap + (f > 0 and 1 or 0)) / l).
        local u = f > 0 and needed - cap + 1 or needed - cap
        local q = u / l
        q = q - q % 1
        local r = u - q * l
        if r < 0 then
          q, r = q - 1, r + l
        elseif r >= l then
          q, r = q + 1, r - l
        end
        retry = r > 0 and q + 1 or q
      end
      -- ms_up(after, f, l), from the one division the stored state needs too.
      local q = after / l
      q = q - q % 1
      local r = after - q * l
      if r < 0 then
        q, r = q - 1, r + l
      elseif r >= l then
        q, r = q + 1, r - l
      end
      reset = (r > 0 or f > 0) and q + 1 or q
      if admitted and cost > 0 then
        tm, tr = now + q, r
      end
    else
      -- x, y, z: tokens, tokens_ns, last_ms. The balance (u, f) at now, as `balance`.
      local u
      u, f = cap, 0
      if x then
        -- z − now > idiv(CLOCK_SLACK, l) is (z − now)·l > CLOCK_SLACK, as above.
        if (not own and (x > cap or x < -MAX_UNITS or y >= NS or (x == cap and y > 0))) or (z - now > ANY_BACK and (z - now) * l > CLOCK_SLACK) then
          return general(keys, args, now)
        end
        -- elapsed < cdiv(cap - x, l), as balance() asks, is elapsed·l < cap - x: a product
        -- above 2^53, inexact, is above cap - x all the same; below it the bucket is not full.
        local elapsed = now - z
        if elapsed < 0 or elapsed * l < cap - x then
          u, f = x + elapsed * l, y
        end
      end
      local after
      retry = -1
      if u == cap then
        -- Full (a new key, or one refilled): admitted, as cost <= b, and b − cost are left.
        admitted, remaining = true, b - cost
        after = cap - (cost > 0 and asked or 0)
      else
        admitted = u >= asked
        after = (admitted and cost > 0) and u - asked or u
        -- idiv(after, w), written out: a call less on every request.
        remaining = 0
        if after >= 0 then
          local q = after / w
          q = q - q % 1
          local r = after - q * w
          if r < 0 then
            q = q - 1
          elseif r >= w then
            q = q + 1
          end
          remaining = q
        end
      end
      if not admitted then
        -- cdiv(asked − u, l), written out.
        local short = asked - u
        local q = short / l
        q = q - q % 1
        local r = short - q * l
        if r < 0 then
          q, r = q - 1, r + l
        elseif r >= l then
          q, r = q + 1, r - l
        end
        retry = r > 0 and q + 1 or q
      end
      -- cdiv(cap - after, l), written out.
      local empty = cap - after
      local q = empty / l
      q = q - q % 1
      local r = empty - q * l
      if r < 0 then
        q, r = q - 1, r + l
      elseif r >= l then
        q, r = q + 1, r - l
      end
      reset = r > 0 and q + 1 or q
      if admitted and cost > 0 then
        -- The stored fields (tokens, tokens_ns, last_ms), in x, y, z's order.
        tm, tr = after, f
        f = now
      end
    end
    if tm then
      -- The state's text: the last one written when it is the same (a burst of new keys in one
      -- millisecond writes one), else formatted; the short form when its remainder is 0.
      local state = known and tm == known[6] and tr == known[7] and f == known[8] and known[5]
      if not state then
        local fields
        if is_gcra then
          -- tat_ns is 0 but after a policy change: one number fewer to format.
          if f == 0 then
            fields = format(tr == 0 and '%d' or '%d %d 0', tm, tr)
          else
            fields = format('%d %d %d', tm, tr, f)
          end
        else
          fields = format(tr == 0 and '%d %d' or '%d %d %d', tm, tr == 0 and f or tr, f)
        end
        -- The prefix joined, not formatted (format's `%s` copies it through sprintf); kept under
        -- a policy remembered, else joined with the fields in one concatenation (one string
        -- built, not two: a script's every admit).
        if prefix then
          state = prefix .. fields
        elseif known then
          prefix = tag .. ' ' .. ls .. ' ' .. ws .. ' ' .. bs .. ' '
          known[4] = prefix
          state = prefix .. fields
        else
          state = tag .. ' ' .. ls .. ' ' .. ws .. ' ' .. bs .. ' ' .. fields
        end
        if known then
          known[5], known[6], known[7], known[8] = state, tm, tr, f
        end
      end
      -- The key outlives max(reset, MIN_TTL_MS) from now. When that is MIN_TTL_MS and now is the
      -- server's clock, a relative `PX` of constant text says it without formatting a number:
      -- Redis counts it from its clock at the SET (not before the TIME read), and Redis 7
      -- replicates and logs it as `SET … PXAT` with the absolute time. Else `PXAT`.
      if reset <= MIN_TTL_MS and server_clock then
        call('SET', key, state, 'PX', '1000')
      else
        local px = now + (reset > MIN_TTL_MS and reset or MIN_TTL_MS)
        if px ~= last_px then
          last_px, last_pxs = px, format('%d', px)
        end
        call('SET', key, state, 'PXAT', last_pxs)
      end
    end
    return { admitted and 1 or 0, b, remaining, retry, reset }
    -- @scripts: end body
  end
end
-- @scripts: end hot

local function limiter(fname, algo)
  return function(keys, args, now)
    return request(fname, algo, keys, args, false, now)
  end
end

-- Whether two states of one algorithm differ in a field.
local function differs(a, b)
  for k, v in pairs(a) do
    if b[k] ~= v then
      return true
    end
  end
  return false
end

------------------------------------------------------------------------------------------------
-- Charges (src/algo/settle.rs, src/command/charge.rs): n spent whatever the state holds, so the
-- key goes into debt that the next requests pay. Each returns the state and the tokens it
-- counted: n, or less where the debt reaches the library's bound, which keeps every number
-- below 2^53 (the module's bounds are wider, docs/functions.md): the bucket algorithms owe at
-- most MAX_AMOUNT tokens beyond empty, a fixed or sliding counter's window counts at most
-- L + MAX_AMOUNT, a sliding log's window at most MAX_LOG_TOTAL (the module's bound).


-- What `s` counts against `p` at `now`, in whole units (W per token), and the nanosecond units
-- on top (signed, below 10^6 in magnitude: a balance a policy change left with a fraction):
-- what a charge adds to and a refund takes from (the module's `Algorithm::counted`).
local function counted(algo, s, p, now)
  if algo == gcra or algo == shape then
    return gcra_debt(s, p, now)
  elseif algo == bucket then
    local u, f = balance(s, p, now)
    return p.b * p.w - u, -f
  elseif algo == fixed then
    return fixed_current(s, p, now).count * p.w
  elseif algo == counter then
    return counter_current(s, p, now).curr * p.w
  end
  -- The live entries are those after the ones that left the window: the total less those,
  -- reading only them.
  s = s or memory_log({})
  local gone, i = 0, 1
  while i <= s.len do
    local at, count = s.entry(i)
    if at + p.w > now then
      break
    end
    gone, i = gone + count, i + 1
  end
  return (s.total - gone) * p.w
end

-- n, or as much of it as fits below `bound` from `at` (units of W per token).
local function fits(n, at, bound, w)
  if at >= bound then
    return 0
  end
  return math.min(n, idiv(bound - at, w))
end

function gcra.charge(s, p, now, n)
  local d, f = gcra_debt(s, p, now)
  local take = fits(n, d, (p.b + MAX_AMOUNT) * p.w, p.w)
  return gcra_at(p, now, d + take * p.w, f), take
end

function shape.charge(s, p, now, n)
  local g, take = gcra.charge(s, p, now, n)
  g.d = s and s.d or 0
  return g, take
end

function bucket.charge(s, p, now, n)
  local u, f = balance(s, p, now)
  local take = fits(n, -u, MAX_AMOUNT * p.w, p.w)
  return { t = u - take * p.w, tf = f, last = now }, take
end

function fixed.charge(s, p, now, n)
  local win = fixed_current(s, p, now)
  local take = fits(n, win.count, p.l + MAX_AMOUNT, 1)
  return { start = win.start, count = win.count + take }, take
end

function counter.charge(s, p, now, n)
  local c = counter_current(s, p, now)
  local take = fits(n, c.curr, p.l + MAX_AMOUNT, 1)
  return { start = c.start, prev = c.prev, curr = c.curr + take }, take
end

-- The charge joins the newest entry, or follows it at now; beyond L entries the oldest merge
-- into one at the latest of their instants, as after a policy change.
function log.charge(s, p, now, n)
  s = s or memory_log({})
  local span = log_span(s, p)
  local entries = all_entries(s, span.w, now)
  local total = 0
  for _, e in ipairs(entries) do
    total = total + e[2]
  end
  local take = fits(n, total, MAX_LOG_TOTAL, 1)
  if take > 0 then
    local at = math.max(now, s.newest or 0)
    local last = entries[#entries]
    if last and last[1] == at then
      last[2] = last[2] + take
    else
      entries[#entries + 1] = { at, take }
    end
  end
  local m = memory_log(entries)
  m.others = unedged(s.others)
  return log.rescale(m, span, span, now), take
end

-- The limiters of the list by their word (RL.ALL's, RL.SETTLE's, RL.CHARGE's POLICY, RL.SHARE's),
-- and their words in the list's order.
local ALL, ALL_WORDS = {}, {}
for i = 1, #LIST do
  local algo = LIST[i]
  if not algo.shaper then
    ALL[algo.word] = algo
    ALL_WORDS[#ALL_WORDS + 1] = algo.word
  end
end

-- FCALL rl_charge 1 key n [POLICY algorithm L W [BURST B]]: charges n under the stored policy
-- (a response that cost more than its estimate); a missing key is created under POLICY, else
-- the reply is nil. Field 1: the tokens charged.
local function charge(keys, args, now)
  if #keys ~= 1 or #args < 1 then
    arity('rl_charge')
  end
  local n = parse_int('n', args[1], 1, MAX_AMOUNT)
  local given, gp
  if args[2] ~= nil then
    if string.upper(args[2]) ~= 'POLICY' then
      fail("ERR unknown option '" .. echo(args[2]) .. "'; expected POLICY")
    elseif args[3] == nil then
      fail('ERR option POLICY needs a value')
    end
    given = ALL[string.upper(args[3])]
    if not given then
      fail("ERR unknown algorithm '" .. echo(args[3]) .. "'; expected one of " .. table.concat(ALL_WORDS, ', '))
    end
    local policy, _, i = parse_limiter('rl_charge', given, args, 4, false, function(w)
      return not (given.burst and string.upper(w) == 'BURST')
    end)
    gp = policy
    if args[i] ~= nil then
      local expected = given.burst and 'expected BURST (the cost is n)' or 'the policy ends at W (the cost is n)'
      fail("ERR unknown option '" .. echo(args[i]) .. "'; " .. expected)
    end
    accepts(given, gp)
  end
  now = now or now_ms()
  local h = held(keys[1], given, false, now)
  if h and given and h.algo ~= given then
    wrong_type('a ' .. h.algo.name .. ' limiter', given.name, false)
  end
  if not h and not given then
    return false
  end
  local algo, p, state = given, gp, nil
  local moved, share = false, h and h.share
  if h then
    algo, p, state = h.algo, h.policy, h.state
    if share then
      moved, p, state = shares.carry(h, gp, now)
    end
  end
  local next, take = algo.charge(state, p, now, n)
  local after = algo.check(next, p, now, 0)
  if share then
    shares.count(share, after, n, take, now)
  end
  if take > 0 or moved then
    -- The configurations the key remembers count what it charged too.
    store(keys[1], algo, p, next, now, after, charged(algo, h and h.others or {}, now, take))
  elseif share then
    shares.keep_counts(keys[1], share)
  end
  after.allowed = take
  return reply(after)
end

-- FCALL rl_refund 1 key n: gives back n unspent tokens under the stored policy. `given`:
-- rl_settle's policy for the limiter, to which a key holding a share is carried.
local function refund(keys, args, now, given)
  if #keys ~= 1 or #args ~= 1 then
    arity('rl_refund')
  end
  local n = parse_int('n', args[1], 1, MAX_AMOUNT)
  now = now or now_ms()
  local h = held(keys[1], nil, false, now)
  if not h then
    return false
  end
  local moved, share = false, h.share
  if share then
    moved, h.policy, h.state = shares.carry(h, given, now)
  end
  local algo, p = h.algo, h.policy
  local before = algo.check(h.state, p, now, 0).remaining
  local next = algo.refund(h.state, p, now, n)
  local after = algo.check(next, p, now, 0)
  -- A debt (after rl_charge) shrinks while `remaining` stays 0: what it shrank counts.
  -- Whole tokens of (c·10^6 + cf) − (a·10^6 + af) nanosecond units, rounded down as the
  -- module does.
  local c, cf = counted(algo, h.state, p, now)
  local a, af = counted(algo, next, p, now)
  local d, e = c - a, (cf or 0) - (af or 0)
  local shrank = 0
  if d > 0 or (d == 0 and e > 0) then
    shrank = idiv(e < 0 and d - 1 or d, p.w)
  end
  local back = math.min(math.max(after.remaining - before, shrank), n)
  if share then
    -- What it gives back comes off both counters (src/command/share.rs `count_settled`): the
    -- rise of `remaining` for rl_refund, the whole tokens the count went down by for rl_settle.
    local counted_back = given and math.min(shrank, n) or back
    shares.count(share, after, 0, 0, now)
    share.asked = math.max(share.asked - counted_back, 0)
    share.admitted = math.max(share.admitted - counted_back, 0)
  end
  if next ~= h.state then
    if algo == log then
      -- A log that lost something: a view over the stored list, written in place.
      if next.key then
        log_write(keys[1], p, next, nil, now, after)
      else
        store(keys[1], algo, p, next, now, after)
      end
    end
  end
  if algo ~= log then
    -- Every configuration the key remembers was charged what is given back: each takes it back
    -- by its own rule (src/command/refund.rs).
    local changed = differs(next, h.state)
    local others = {}
    for i, o in ipairs(h.others or {}) do
      local back = algo.refund(o.state, o.policy, now, n)
      changed = changed or differs(back, o.state)
      others[i] = { policy = o.policy, state = back }
    end
    if changed or moved then
      store(keys[1], algo, p, next, now, after, others)
    elseif share and back > 0 then
      shares.keep_counts(keys[1], share)
    end
  end
  after.allowed = back
  -- Second: what RL.SETTLE counts as given back (the whole tokens the count went down by).
  return reply(after), math.min(shrank, n)
end

-- FCALL rl_peek 1 key: what a cost-1 request would get now under the stored policy.
-- `given`: rl_settle's policy for a limiter it settles by 0, which carries a key holding a share
-- to it (stored when it moved), as a settle does.
local function peek(keys, args, now, given)
  if #keys ~= 1 or #args ~= 0 then
    arity('rl_peek')
  end
  now = now or now_ms()
  local h = held(keys[1], nil, false, now)
  if not h then
    return false
  end
  if given and h.share then
    local moved, p, state = shares.carry(h, given, now)
    local after = h.algo.check(state, p, now, 0)
    if moved then
      shares.count(h.share, after, 0, 0, now)
      store(keys[1], h.algo, p, state, now, after)
    end
    return reply(after)
  end
  return reply((h.algo.check(h.state, h.policy, now, 0)))
end

-- FCALL rl_shape 1 key L W [QUEUE q] [DELAY d | NODELAY] [COST n] (src/command/shape.rs): the
-- five fields, then delay_ms.
local function shaped(keys, args)
  if #keys ~= 1 or #args < 2 then
    arity('rl_shape')
  end
  local l = parse_int('L', args[1], 1, MAX_AMOUNT)
  local w = parse_int('W', args[2], 1, MAX_RATE_WINDOW)
  local opts, nodelay, i = {}, false, 3
  while args[i] ~= nil do
    local name = string.upper(args[i])
    if name == 'NODELAY' then
      if nodelay then
        fail('ERR option NODELAY given more than once')
      end
      nodelay, i = true, i + 1
    else
      local max = MAX_AMOUNT - 1
      if name == 'COST' then
        max = MAX_AMOUNT
      elseif name ~= 'QUEUE' and name ~= 'DELAY' then
        fail("ERR unknown option '" .. echo(args[i]) .. "'; expected QUEUE, DELAY, NODELAY or COST")
      end
      if opts[name] then
        fail('ERR option ' .. name .. ' given more than once')
      elseif args[i + 1] == nil then
        fail('ERR option ' .. name .. ' needs a value')
      end
      opts[name] = parse_int(name, args[i + 1], 0, max)
      i = i + 2
    end
  end
  local queue = opts.QUEUE or 0
  local undelayed = opts.DELAY or 0
  if opts.DELAY and nodelay then
    fail('ERR DELAY d and NODELAY are exclusive (NODELAY is DELAY equal to QUEUE)')
  elseif nodelay then
    undelayed = queue
  end
  if undelayed > queue then
    fail(string.format('ERR DELAY %d is above QUEUE %d: at most the whole queue goes undelayed', undelayed, queue))
  end
  local b = queue + 1
  if b * w > MAX_REFILL_MS * l then
    fail(string.format('ERR a capacity of %d refilled at %d per %d ms takes longer than %d ms to refill',
      b, l, w, MAX_REFILL_MS))
  end
  local cost = opts.COST or 1
  if cost > b then
    fail(string.format('ERR COST %d can never be admitted: it exceeds the capacity %d', cost, b))
  end
  local p = policy_of(l, w, b)
  local now = now_ms()
  local key = keys[1]
  local h = held_as(key, shape, false, now)
  local start, others, carried, over = configurations(shape, h, p, now)
  -- The request decides with its own d; a new d, like a new policy, is stored even when the
  -- request is denied (a peek stores nothing).
  local configured = { tm = 0, tr = 0, tf = 0, d = undelayed }
  if start then
    configured = { tm = start.tm, tr = start.tr, tf = start.tf, d = undelayed }
  end
  local d, next = gcra.check(configured, p, now, cost)
  local delay = shape_delay(configured, p, now, d, next)
  if over then
    if cost > 0 then
      local k
      d, k = overflowed(shape, d, over, others, now, next and cost or 0)
      store_kept(key, shape, k, now)
    end
  else
    if next then
      next.d = undelayed
      others = charged(shape, others, now, cost)
    elseif cost > 0 and start and (carried or start.d ~= undelayed) then
      next = configured
    end
    if next then
      store(key, shape, p, next, now, d, live(shape, others, p, next, now))
    end
  end
  local out = reply(d)
  out[6] = delay
  return out
end

-- As the module's error names them: "GCRA, TOKENBUCKET, … or FIXEDWINDOW".
-- (Built by hand: the loading environment has no `table` library.)
local ALL_EXPECTED = ALL_WORDS[1]
for i = 2, #ALL_WORDS do
  ALL_EXPECTED = ALL_EXPECTED .. (i == #ALL_WORDS and ' or ' or ', ') .. ALL_WORDS[i]
end

local function is_algorithm(word)
  return ALL[string.upper(word)] ~= nil
end

-- FCALL rl_all numkeys key [key ...] limiter [limiter ...] (docs/rl-all.md): all or nothing.
local function all(keys, args)
  local n = #keys
  if #args < 1 then
    arity('rl_all')
  end
  if n < 1 or n > MAX_LIMITERS then
    invalid('numkeys', num(n), 1, MAX_LIMITERS)
  end
  local seen = {}
  for _, k in ipairs(keys) do
    if seen[k] then
      fail("ERR key '" .. echo(k) .. "' is named twice; each key has one limiter")
    end
    seen[k] = true
  end
  local parts, i = {}, 1
  for _, key in ipairs(keys) do
    local word = args[i]
    if word == nil then
      fail(string.format("ERR no limiter for key '%s': expected %d limiters, one per key", echo(key), n))
    end
    local algo = ALL[string.upper(word)]
    if not algo then
      fail("ERR unknown algorithm '" .. echo(word) .. "'; expected " .. ALL_EXPECTED)
    end
    local p, cost
    p, cost, i = parse_limiter('rl_all', algo, args, i + 1, false, is_algorithm)
    parts[#parts + 1] = { key = key, algo = algo, policy = p, cost = cost }
  end
  if args[i] ~= nil then
    fail('ERR more limiters than keys: numkeys is ' .. n)
  end
  local now = now_ms()
  local peek_all = true
  for _, part in ipairs(parts) do
    peek_all = peek_all and part.cost == 0
  end
  -- Plan every limiter (src/command/all.rs), then write: an error leaves every key as it was.
  for _, part in ipairs(parts) do
    local algo, p = part.algo, part.policy
    accepts(algo, p)
    local h = held_as(part.key, algo, true, now)
    part.share = h and h.share
    if part.share then
      p = shares.policy(part.share, p, now)
      part.policy = p
    end
    local start, others, switched, over = configurations(algo, h, p, now)
    part.carried = switched and start or nil
    part.others = others
    part.start = start
    if part.share and part.cost > p.b then
      part.decision, part.charged = shares.above(algo, start, p, now, part.share), nil
    else
      part.decision, part.charged = algo.check(start, p, now, part.cost)
    end
    part.uncharged = part.charged and algo.check(start, p, now, 0) or part.decision
    if over and part.cost > 0 then
      -- One configuration too many (src/algo/step.rs `plan`): both outcomes keep the current one.
      local d, k = overflowed(algo, part.decision, over, others, now, part.charged and part.cost or 0)
      part.decision = d
      if d.allowed == 0 then
        part.uncharged, part.if_charged, part.if_not = d, nil, k
      else
        part.if_charged = k
        part.if_not = select(2, overflowed(algo, part.uncharged, over, others, now, 0))
      end
    end
    part.over = over
  end
  local admitted = true
  for _, part in ipairs(parts) do
    if (peek_all or part.cost > 0) and part.decision.allowed ~= 1 then
      admitted = false
    end
  end
  local each = {}
  for _, part in ipairs(parts) do
    local algo, p = part.algo, part.policy
    local carried = part.cost > 0 and part.carried or nil
    local d = admitted and part.decision or part.uncharged
    local others = part.others
    if part.over then
      local k = (admitted and part.if_charged) or part.if_not
      if part.cost > 0 and k then
        store_kept(part.key, algo, k, now)
      end
    else
      if admitted and part.charged then
        others = charged(algo, others, now, part.cost)
      end
      local share, spent = part.share, admitted and part.charged
      if share then
        shares.count(share, d, part.cost, spent and part.cost or 0, now)
      end
      settle(part.key, algo, p, part.start, carried, spent or nil, now, d, others)
      if share and part.cost > 0 and not spent and not carried then
        shares.keep_counts(part.key, share)
      end
    end
    each[#each + 1] = d
  end
  local tightest
  local combined = decision(admitted and 1 or 0, 0, 0, nil, 0)
  for i, d in ipairs(each) do
    if not tightest or d.remaining < tightest.remaining then
      tightest = d
    end
    combined.reset = math.max(combined.reset, d.reset)
    -- A limiter at COST 0 holds nothing back: its retry counts only in a peek over all.
    if not admitted then
      local held_back = (parts[i].cost > 0 or peek_all) and d.retry or 0
      combined.retry = math.max(combined.retry or 0, held_back)
    end
  end
  combined.limit, combined.remaining = tightest.limit, tightest.remaining
  local out = { reply(combined) }
  for _, d in ipairs(each) do
    out[#out + 1] = reply(d)
  end
  return out
end

-- FCALL rl_settle numkeys key [key ...] limiter [limiter ...], a limiter `ALGORITHM L W
-- [BURST B] BY d` (src/command/settle.rs, RL.SETTLE): one served request settled over all its
-- limiters at once, each by its own signed difference: charged as rl_charge charges (into debt
-- if need be; a missing key created under the limiter's policy) when d > 0, given back as
-- rl_refund does when d < 0, looked at when 0. Never denied. Every key is checked before any
-- changes. The reply: the combined answer (field 1: 1 when every charge counted in full), then
-- each limiter's (field 1: the tokens it moved, then its peek after the settle).
local function settle_all(keys, args)
  local n = #keys
  if #args < 1 then
    arity('rl_settle')
  end
  if n < 1 or n > MAX_LIMITERS then
    invalid('numkeys', num(n), 1, MAX_LIMITERS)
  end
  local seen = {}
  for _, k in ipairs(keys) do
    if seen[k] then
      fail("ERR key '" .. echo(k) .. "' is named twice; each key has one limiter")
    end
    seen[k] = true
  end
  local parts, i = {}, 1
  local function by_word(w)
    return string.upper(w) == 'BY'
  end
  for _, key in ipairs(keys) do
    local word = args[i]
    if word == nil then
      fail(string.format("ERR no limiter for key '%s': expected %d limiters, one per key", echo(key), n))
    end
    local algo = ALL[string.upper(word)]
    if not algo then
      fail("ERR unknown algorithm '" .. echo(word) .. "'; expected " .. ALL_EXPECTED)
    end
    local p, _, j = parse_limiter('rl_settle', algo, args, i + 1, false, by_word)
    if args[j] == nil or args[j + 1] == nil then
      fail('ERR option BY needs a value')
    end
    local d = args[j + 1]
    local sign = 1
    if string.sub(d, 1, 1) == '-' then
      sign, d = -1, string.sub(d, 2)
    end
    parts[#parts + 1] = { key = key, algo = algo, policy = p, by = sign * parse_int('BY', d, 0, MAX_AMOUNT) }
    i = j + 2
  end
  if args[i] ~= nil then
    fail('ERR more limiters than keys: numkeys is ' .. n)
  end
  local now = now_ms()
  -- Every key checked first: an error leaves every key as it was.
  for _, part in ipairs(parts) do
    accepts(part.algo, part.policy)
    held_as(part.key, part.algo, true, now)
  end
  local each, in_full = {}, true
  for _, part in ipairs(parts) do
    local algo, p, by = part.algo, part.policy, part.by
    local r
    if by > 0 then
      local words = { num(by), 'POLICY', algo.word, num(p.l), num(p.w) }
      if algo.burst then
        words[6], words[7] = 'BURST', num(p.b)
      end
      r = charge({ part.key }, words, now)
      in_full = in_full and r[1] == by
    elseif by < 0 then
      local moved
      r, moved = refund({ part.key }, { num(-by) }, now, p)
      if r then
        r[1] = moved
      end
    else
      r = peek({ part.key }, {}, now, p)
      if r then
        r[1] = 0
      end
    end
    if not r then
      -- A missing key has nothing to give back: its limiter's answer with nothing stored.
      r = reply((algo.check(nil, p, now, 0)))
      r[1] = 0
    end
    each[#each + 1] = r
  end
  local tightest, retry, reset = each[1], -1, 0
  for _, r in ipairs(each) do
    if r[3] < tightest[3] then
      tightest = r
    end
    if r[4] > retry then
      retry = r[4]
    end
    if r[5] > reset then
      reset = r[5]
    end
  end
  local out = { { in_full and 1 or 0, tightest[2], tightest[3], retry, reset } }
  for _, r in ipairs(each) do
    out[#out + 1] = r
  end
  return out
end

-- FCALL rl_share numkeys key [key ...] algorithm L W B share expire_at_ms [share expire_at_ms ...]
-- (RL.SHARE, src/command/share.rs, with the keys first as FCALL wants them and one share and
-- expiry per key, in key order): the regions controller stores each key's share under the
-- region's safe policy `algorithm L W B`. A missing key is created full under the share; an
-- existing one must hold a limiter of that algorithm, its state carried over (the other
-- configurations it remembers dropped); a share of 0 removes the key's share. Every number is
-- read before any key changes; a share whose expiry has passed is refused. The reply, one row
-- per key: [share, expire_at_ms, L, B] as the key holds them now (all 0: a missing key left
-- alone). Not the sliding log, whose list takes no share here.
function shares.call(keys, args)
  local n = #keys
  if n < 1 or #args < 4 or #args ~= 4 + 2 * n then
    arity('rl_share')
  end
  if n > shares.max_keys then
    fail('ERR at most ' .. shares.max_keys .. ' keys per call')
  end
  local word = args[1]
  local algo = ALL[string.upper(word)]
  if not algo then
    fail("ERR unknown algorithm '" .. echo(word) .. "'; expected one of " .. table.concat(ALL_WORDS, ', '))
  elseif algo == log then
    fail("ERR the library's sliding log takes no share (RL.SHARE needs the module for it); use another algorithm for keys the regions controller splits")
  end
  local l = parse_int('L', args[2], 1, MAX_AMOUNT)
  local w = parse_int('W', args[3], 1, algo.max_w)
  local b = parse_int('B', args[4], 1, MAX_AMOUNT)
  if not algo.burst and b ~= l then
    fail('ERR B must equal L for ' .. echo(word))
  end
  if b * w > MAX_REFILL_MS * l then
    fail(string.format('ERR a capacity of %d refilled at %d per %d ms takes longer than %d ms to refill',
      b, l, w, MAX_REFILL_MS))
  end
  local safe = policy_of(l, w, b)
  local now = now_ms()
  local wanted = {}
  for i = 1, n do
    local share = parse_int('share', args[3 + 2 * i], 0, MAX_AMOUNT)
    local expire = parse_int('expire_at_ms', args[4 + 2 * i], 0, shares.max_expire_at)
    if share > 0 and expire == 0 then
      fail('ERR a share needs an expiry (unix time in ms)')
    elseif share > 0 and expire <= now then
      fail(string.format('ERR share expiry %d has passed', expire))
    end
    wanted[i] = share > 0 and { limit = share, expire = expire, asked = 0, admitted = 0 } or false
  end
  local out = {}
  for i, key in ipairs(keys) do
    out[i] = shares.set(key, algo, safe, wanted[i], now)
  end
  return out
end

-- Stores `share` (false: none) in `key` under the safe policy (src/command/share.rs `set`).
function shares.set(key, algo, safe, share, now)
  local h = held_as(key, algo, false, now)
  if not h and not share then
    return { 0, 0, 0, 0 }
  end
  local to = share and shares.policy(share, safe, now) or safe
  local state
  if h then
    state = algo.rescale(h.state, h.policy, to, now)
    if share and h.share then
      share.asked, share.admitted = h.share.asked, h.share.admitted
    end
  else
    -- Full: what a first request under the share would start from.
    local _, first = algo.check(nil, to, now, 1)
    state = algo.refund(first, to, now, 1)
  end
  -- The key lives as long as it had to, and at least until the share's expiry.
  local keep = algo.check(state, to, now, 0).reset
  local at = redis.call('PEXPIRETIME', key)
  if at > now then
    keep = math.max(keep, at - now)
  end
  if share then
    keep = math.max(keep, share.expire - now)
  end
  shares.by_key[key] = share or nil
  store(key, algo, to, state, now, { reset = keep })
  if share then
    return { share.limit, share.expire, to.l, to.b }
  end
  return { 0, 0, to.l, to.b }
end

-- FCALL rl_demand numkeys key [key ...] (RL.DEMAND, src/command/demand.rs): per key [asked,
-- admitted, share, expire_at_ms, L]: what the key was asked and admitted since the last
-- rl_demand (which sets both to 0), the share it holds (0: none) and the L it is decided under
-- now; all 0 for a missing key.
function shares.demand(keys, args)
  local n = #keys
  if n < 1 or #args ~= 0 then
    arity('rl_demand')
  end
  if n > shares.max_keys then
    fail('ERR at most ' .. shares.max_keys .. ' keys per call')
  end
  local now = now_ms()
  local out = {}
  for i, key in ipairs(keys) do
    local h = held(key, nil, false, now)
    if not h then
      out[i] = { 0, 0, 0, 0, 0 }
    elseif not h.share then
      out[i] = { 0, 0, 0, 0, h.policy.l }
    else
      local s = h.share
      out[i] = { s.asked, s.admitted, s.limit, s.expire, h.policy.l }
      if s.asked > 0 or s.admitted > 0 then
        s.asked, s.admitted = 0, 0
        shares.keep_counts(key, s)
      end
    end
  end
  return out
end

-- Runs a function, turning the errors it raises with `fail` (and those of redis.call) into
-- plain error replies, without the script trace Redis appends to a raised error.
local function guarded(body)
  return function(keys, args, now)
    if next(shares.by_key) then
      shares.by_key = {}
    end
    local ok, result = pcall(body, keys, args, now)
    if ok then
      return result
    elseif type(result) == 'table' and result.err then
      return result
    elseif type(result) == 'string' and (result:find('^ERR ') or result:find('^WRONGTYPE ')) then
      -- Redis hands a raised { err = … } back to pcall as its text.
      return { err = result }
    end
    error(result, 0)
  end
end

local function lease(keys, args)
  return request('rl_lease', bucket, keys, args, true)
end

-- The functions with a hot path, and the tag of the state it reads. (The scripts backend's
-- generator reads this line: each entry's tag, on one line.)
local HOT = { rl_gcra = 'g', rl_tokenbucket = 't' }

-- One function per algorithm of the list; for those with a hot path, that path first, outside
-- the guard: it raises nothing of its own.
for i = 1, #LIST do
  local algo = LIST[i]
  local body = algo.shaper and guarded(shaped) or guarded(limiter(algo.fname, algo))
  if HOT[algo.fname] then
    body = fast(HOT[algo.fname], body)
  end
  redis.register_function(algo.fname, body)
end
redis.register_function('rl_lease', guarded(lease))
redis.register_function('rl_refund', guarded(refund))
redis.register_function('rl_charge', guarded(charge))
redis.register_function('rl_all', guarded(all))
redis.register_function('rl_settle', guarded(settle_all))
redis.register_function('rl_share', guarded(shares.call))
redis.register_function('rl_demand', guarded(shares.demand))
redis.register_function({ function_name = 'rl_peek', callback = guarded(peek), flags = { 'no-writes' } })

------------------------------------------------------------------------------------------------
-- rl_concurrency: `FCALL rl_concurrency 1 key N TTL ACQUIRE id | RENEW id | RELEASE id | PEEK`,
-- RL.CONCURRENCY's arguments and five-integer answers (src/algo/concurrency.rs): at most N
-- holders live at once, each until TTL ms after its last ACQUIRE or RENEW. Stored as a sorted
-- set: the id (1 to 1024 bytes, as given) scored with its expiry in ms; a change first drops the
-- expired holders, so the set never holds more than the largest N it was called with, at most
-- CONCURRENCY_MAX_HOLDERS (a larger set is not one of these and is refused as a sorted set).
-- Differences from the module (docs/functions.md): ids are stored whole, not as digests; the
-- set goes with its last holder (the module keeps an empty limiter for 1 s); rl_peek and
-- rl_all do not take these keys. One table keeps this block's names out of the chunk's locals.

local concurrency = { max_holders = 1000, max_id = 1024 }

-- The latest expiry after `now` (`now` when none is live: no call), and the k-th earliest live
-- expiry.
function concurrency.latest(key, now, live)
  if live == 0 then
    return now
  end
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local at = tonumber(last[2] or 0)
  return at > now and at or now
end

function concurrency.kth(key, now, k)
  local got = redis.call('ZRANGEBYSCORE', key, '(' .. num(now), '+inf', 'WITHSCORES', 'LIMIT', k - 1, 1)
  return tonumber(got[2])
end

-- The answer with `live` holders live: `allowed`, and when not admitted the time until an
-- ACQUIRE by a new id would be (0: now). `latest`: the latest expiry when the caller knows it.
function concurrency.answer(key, n, now, live, allowed, admitted, latest)
  local retry = nil
  if not admitted then
    retry = live < n and 0 or concurrency.kth(key, now, live - n + 1) - now
  end
  local remaining = n - live
  latest = latest or concurrency.latest(key, now, live)
  return { allowed, n, remaining > 0 and remaining or 0, retry or -1, latest - now }
end

function concurrency.call(keys, args)
  if #keys ~= 1 or #args < 3 then
    arity('rl_concurrency')
  end
  local key = keys[1]
  local n = parse_int('N', args[1], 1, concurrency.max_holders)
  local ttl = parse_int('TTL', args[2], 1, MAX_WINDOW)
  local op = string.upper(args[3])
  local id = args[4]
  if op == 'PEEK' then
    if #args > 3 then
      fail('ERR too many arguments')
    end
  elseif op == 'ACQUIRE' or op == 'RENEW' or op == 'RELEASE' then
    if not id then
      fail('ERR ' .. op .. " needs the holder's id")
    end
    if #id == 0 or #id > concurrency.max_id then
      fail(string.format('ERR invalid id of %d bytes: expected 1 to %d bytes', #id, concurrency.max_id))
    end
    if #args > 4 then
      fail('ERR too many arguments')
    end
  else
    fail("ERR unknown operation '" .. echo(args[3]) .. "'; expected ACQUIRE, RENEW, RELEASE or PEEK")
  end
  -- One call tells a sorted set (or nothing) from any other type.
  local count = redis.pcall('ZCARD', key)
  if type(count) ~= 'number' or count > concurrency.max_holders then
    local kind = redis.call('TYPE', key).ok
    wrong_type(TYPE_NAMES[kind] or ('a ' .. kind), 'concurrency')
  end
  local now = now_ms()
  local live = count > 0 and redis.call('ZCOUNT', key, '(' .. num(now), '+inf') or 0
  local changed, latest = false, nil
  if count == live and ((op == 'ACQUIRE' and live < n) or op == 'RELEASE') then
    -- Nothing expired is stored, so a stored id is a live holder: ZADD (1 added, 0 renewed)
    -- and ZREM (1 removed) tell whether it held a slot, without a ZSCORE first.
    if op == 'ACQUIRE' then
      live = live + redis.call('ZADD', key, num(now + ttl), id)
      changed = true
      latest = live == 1 and now + ttl or nil
    elseif live > 0 and redis.call('ZREM', key, id) == 1 then
      live = live - 1
      changed = true
    end
  else
    local score = (id and count > 0) and tonumber(redis.call('ZSCORE', key, id) or 0) or 0
    local holds = score > now
    local take = (op == 'ACQUIRE' and (holds or live < n)) or (op == 'RENEW' and holds)
    if take or (op == 'RELEASE' and holds) then
      if count > live then
        redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now))
      end
      if take then
        redis.call('ZADD', key, num(now + ttl), id)
        live = holds and live or live + 1
        latest = live == 1 and now + ttl or nil
      else
        redis.call('ZREM', key, id)
        live = live - 1
      end
      changed = true
    end
  end
  if changed then
    local answer = concurrency.answer(key, n, now, live, 1, true, latest)
    -- A RELEASE leaves the key's expiry, as the module's does: it already outlives every holder.
    if live > 0 and op ~= 'RELEASE' then
      redis.call('PEXPIREAT', key, num(now + math.max(answer[5], MIN_TTL_MS)))
    end
    return answer
  end
  local free = op == 'PEEK' and live < n
  return concurrency.answer(key, n, now, live, free and 1 or 0, free)
end

-- ACQUIRE's hot path, outside the guard (it raises nothing of its own): the recipe's own steps,
-- TIME, drop the expired (ZREMRANGEBYSCORE, nothing on a new key), ZADD, and the answer's one
-- read, the latest expiry (none when the holder is the only one), then the key's expiry. ZCARD
-- first, as the general path: a key of another type, or a sorted set larger than any of these,
-- is not touched here. Anything else (another operation or spelling, an argument the general
-- path would refuse or read otherwise, a leading zero) goes to the general path, which answers
-- the same. ZADD's own answer (1 added, 0 renewed) says whether the id held a slot when there is
-- room; a full set asks ZSCORE.
concurrency.seconds = { false, 0 }

function concurrency.fast(general)
  -- (Looked up at the first call: while a library loads, only `redis` is reachable.)
  local find, byte, format, call, pcall_redis
  local max_holders, max_id, seconds = concurrency.max_holders, concurrency.max_id, concurrency.seconds
  -- The N and TTL strings read before, as numbers (at most MAX_POLICIES, then forgotten): a
  -- string is read once, when it is digits without a leading zero, at most 13 (TTL <= 10^12).
  local read, count_read = {}, 0
  -- The texts of the last instant and expiry formatted (the calls of one ms share them).
  local last_now, now_text, last_exp, exp_text, after_exp = -1, nil, -1, nil, nil
  local function number(s)
    if #s == 0 or #s > 13 or byte(s) == 48 or find(s, '%D') then
      return nil
    end
    if count_read >= MAX_POLICIES then
      read, count_read = {}, 0
    end
    count_read = count_read + 1
    local v = s + 0
    read[s] = v
    return v
  end
  return function(keys, args)
    if not find then
      find, byte, format, call, pcall_redis = string.find, string.byte, string.format, redis.call, redis.pcall
    end
    local ns, ts, id = args[1], args[2], args[4]
    local key = keys[1]
    if args[3] ~= 'ACQUIRE' or id == nil or args[5] ~= nil or key == nil or keys[2] ~= nil
        or #id == 0 or #id > max_id then
      return general(keys, args)
    end
    local n, ttl = read[ns] or number(ns), read[ts] or number(ts)
    if not n or not ttl or n > max_holders or ttl > MAX_WINDOW then
      return general(keys, args)
    end
    local count = pcall_redis('ZCARD', key)
    if type(count) ~= 'number' or count > max_holders then
      return general(keys, args)
    end
    local now = now_ms(seconds)
    local live = count
    if count > 0 then
      if now ~= last_now then
        last_now, now_text = now, format('%d', now)
      end
      live = count - call('ZREMRANGEBYSCORE', key, '-inf', now_text)
    end
    local exp = now + ttl
    if exp ~= last_exp then
      last_exp, exp_text, after_exp = exp, format('%d', exp), nil
    end
    local exps = exp_text
    if live >= n then
      -- Full: only a holder renews; else the answer says when the earliest slot a new id can
      -- take frees (every member is live now: the (live - n + 1)-th by rank).
      if not call('ZSCORE', key, id) then
        local kth = call('ZRANGE', key, live - n, live - n, 'WITHSCORES')
        local last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
        return { 0, n, 0, kth[2] - now, last[2] - now }
      end
      call('ZADD', key, exps, id)
    else
      live = live + call('ZADD', key, exps, id)
    end
    -- The latest expiry: this holder's unless another's is later (a longer TTL), which ZCOUNT
    -- tells at less cost than reading the last score.
    local latest, at = exp, exps
    if live > 1 then
      if not after_exp then
        after_exp = '(' .. exps
      end
      if call('ZCOUNT', key, after_exp, '+inf') > 0 then
        latest = call('ZRANGE', key, -1, -1, 'WITHSCORES')[2] + 0
        at = format('%d', latest)
      end
    end
    if latest - now < MIN_TTL_MS then
      at = format('%d', now + MIN_TTL_MS)
    end
    call('PEXPIREAT', key, at)
    local remaining = n - live
    return { 1, n, remaining > 0 and remaining or 0, -1, latest - now }
  end
end

redis.register_function('rl_concurrency', concurrency.fast(guarded(concurrency.call)))
-- What only the module does (docs/functions.md, what differs): the call says so, where Redis would
-- answer "Function not found".
-- (Both spellings by hand: while a library loads, only `redis` is reachable.)
local MODULE_ONLY = { { 'INSPECT', 'rl_inspect' }, { 'THROTTLE', 'rl_throttle' } }
for i = 1, #MODULE_ONLY do
  local word, fname = MODULE_ONLY[i][1], MODULE_ONLY[i][2]
  redis.register_function({ function_name = fname, flags = { 'no-writes' }, callback = function()
    return { err = 'ERR RL.' .. word .. ' needs the redis-ratelimit module: the Functions library has no equivalent (docs/functions.md, what differs)' }
  end })
end
redis.register_function({ function_name = 'rl_version', callback = function() return LIBRARY_VERSION end, flags = { 'no-writes' } })
