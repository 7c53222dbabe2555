"""The Lua equivalents: what a gateway runs today without the module. Each takes KEYS[1] and
answers the module's five integers (allowed, limit, remaining, retry_after_ms, reset_after_ms),
reads the server clock with TIME (allowed before writes: Redis 7 replicates scripts by their
effects) and sets a TTL so idle keys disappear, like the module. Then the Functions library."""

import os
import re

from . import ROOT

# GCRA on a string holding the theoretical arrival time in microseconds.
# ARGV: L, W (ms), B, cost.
LUA_GCRA = r"""
local limit, window, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = window * 1000 / limit
local capacity = burst * interval
local stored = redis.call('GET', KEYS[1])
local tat = stored and tonumber(stored) or now
local debt = math.max(tat - now, 0)
local asked = math.max(cost, 1) * interval
if debt + asked > capacity then
  return {0, burst, math.floor((capacity - debt) / interval),
          math.ceil((debt + asked - capacity) / 1000), math.ceil(debt / 1000)}
end
if cost > 0 then
  debt = debt + asked
  redis.call('SET', KEYS[1], string.format('%.0f', now + debt), 'PX', math.max(math.ceil(debt / 1000), 1))
end
return {1, burst, math.floor((capacity - debt) / interval), -1, math.ceil(debt / 1000)}
"""

# Token bucket on a hash {tokens, ts}, refilled continuously. ARGV: L, W (ms), B, cost.
LUA_TOKEN_BUCKET = r"""
local limit, window, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local rate = limit / (window * 1000)
local h = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(h[1]) or burst
local ts = tonumber(h[2]) or now
if now > ts then
  tokens = math.min(burst, tokens + (now - ts) * rate)
  ts = now
end
local asked = math.max(cost, 1)
if tokens < asked then
  return {0, burst, math.floor(tokens), math.ceil((asked - tokens) / rate / 1000),
          math.ceil((burst - tokens) / rate / 1000)}
end
if cost > 0 then
  tokens = tokens - asked
  redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', string.format('%.0f', ts))
  redis.call('PEXPIRE', KEYS[1], math.max(math.ceil((burst - tokens) / rate / 1000), 1))
end
return {1, burst, math.floor(tokens), -1, math.ceil((burst - tokens) / rate / 1000)}
"""

# Sliding log on a sorted set: one member per admitted request, scored by its time in
# microseconds; members are "<time>:<count>", unique without a client-supplied id.
# ARGV: L, W (ms), cost.
LUA_SLIDING_LOG = r"""
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local span = window * 1000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now - span))
local count = redis.call('ZCARD', KEYS[1])
local asked = math.max(cost, 1)
if count + asked > limit then
  local first = redis.call('ZRANGE', KEYS[1], count + asked - limit - 1, count + asked - limit - 1, 'WITHSCORES')
  local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  return {0, limit, math.max(limit - count, 0), math.ceil((tonumber(first[2]) + span - now) / 1000),
          math.ceil((tonumber(newest[2]) + span - now) / 1000)}
end
if cost > 0 then
  local at = string.format('%.0f', now)
  for i = 1, cost do
    redis.call('ZADD', KEYS[1], at, at .. ':' .. (count + i))
  end
  redis.call('PEXPIRE', KEYS[1], window)
  count = count + cost
end
return {1, limit, limit - count, -1, window}
"""

# The GCRA script a Go gateway runs with go-redis/redis_rate (its `allowN`), restated here in our
# own words, step for step: the arrival time as float seconds since 2017-01-01 in a string, the
# decision in doubles, `SET … EX` of the whole seconds until it is full. It answers
# (allowed, remaining, retry_after, reset_after) with no argument checks and no exact rounding:
# the floor the library is measured against (docs/functions.md, cost).
# ARGV: burst, rate, period (s), cost.
LUA_REDIS_RATE = r"""
redis.replicate_commands()
local burst, rate, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local interval = period / rate
local t = redis.call('TIME')
local now = (t[1] - 1483228800) + t[2] / 1000000
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then
  tat = now
end
local next_tat = tat + interval * cost
local slack = now - (next_tat - interval * burst)
if slack < 0 then
  return {0, 0, tostring(-slack), tostring(tat - now)}
end
local reset = next_tat - now
if reset > 0 then
  redis.call('SET', KEYS[1], next_tat, 'EX', math.ceil(reset))
end
return {cost, slack / interval, '-1', tostring(reset)}
"""

LUA = {"gcra": LUA_GCRA, "token_bucket": LUA_TOKEN_BUCKET, "sliding_log": LUA_SLIDING_LOG,
       "redis_rate": LUA_REDIS_RATE}

# The Functions library (functions/ratelimit.lua, docs/functions.md): the module's contract
# where modules cannot load. Its rows say what that costs beside the module and the Lua scripts.
LIBRARY = os.path.join(ROOT, "functions", "ratelimit.lua")


def load_library(c):
    with open(LIBRARY) as f:
        c("FUNCTION", "LOAD", "REPLACE", f.read())


def load_scripts(c):
    """Loads the Lua scripts and the library; {script name: SHA} for `with_shas`."""
    shas = {name: c("SCRIPT", "LOAD", body) for name, body in LUA.items()}
    load_library(c)
    return shas


def with_shas(text, shas):
    """`text` with each {sha:NAME} replaced by the SHA of the script NAME."""
    for name, sha in shas.items():
        text = text.replace("{sha:%s}" % name, sha)
    return text


# The scripts backend (docs/functions.md, backends): where FUNCTION is refused, each function of
# the library is served as its own script, generated from the library's one source. The file
# (the `#!lua` line dropped: EVAL reads it as its own shebang) is the body of one function, the
# general entry, its `redis.register_function` collecting the library's functions in a table and
# `fast` taken as no hot path (the script has run it): only the top-level statements the function
# reaches (general_needed); that function names nothing outside itself, so creating it costs one
# closure. For a function with a hot path (its tag on the line
# `local HOT = { name = 'tag', ... }`), that path comes first as the script's own code, in a block
# of its own: the definitions before `-- @scripts: general` that the hot section (between
# `-- @scripts: hot` and `-- @scripts: end hot`) names (reached), the hot section up to `fast`,
# fast's parameters bound to the tag and nil, fast's own lines before `-- @scripts: memory`, the
# memory's names declared without values (the line after that mark: a script keeps nothing
# between calls), its closure's parameters bound to KEYS and ARGV, and the lines between
# `-- @scripts: body` and `-- @scripts: end body` in `repeat ... until true`, each whole line
# `return general(keys, args)` made a `break` (`now` kept first); after the block the general
# entry is defined and called. A function without a hot path calls the general entry.
# The client generates its scripts the same way (client/src/scripts.rs).


# The general entry's share of the library (client/src/scripts/general.rs says why and how): the
# top-level statements the entry reaches, in order. A statement starts at a line whose first
# character begins a name (not end/else/elseif/until) outside a block comment; it defines what a
# `local` declares, the table a `function t.f` fills, or the top-level names its lines assign or
# fill. Roots: the entry's registrations (or, where none names it, those that name none) and what
# defines nothing; then every statement defining a name their code uses, until none is added
# (`t.f`: t and its function f; `t` alone: all of t's functions; words in strings and fields
# name nothing).
def _word_list(code):
    return [w for w in re.split(r"[^A-Za-z0-9_]", code) if w and (w[0].isalpha() or w[0] == "_")]


def _references(code):
    """The names `code` refers to, each with the field it reads when it is t.f or t:f (None
    otherwise): not the fields themselves (a word after `..` is a concatenation's operand)."""
    out = []
    for m in re.finditer(r"[A-Za-z0-9_]+", code):
        w, before, after = m.group(0), code[:m.start()], code[m.end():]
        field = before.endswith(":") or (before.endswith(".") and not before.endswith(".."))
        if field or not (w[0].isalpha() or w[0] == "_"):
            continue
        read = None
        if after.startswith(":") or (after.startswith(".") and not after.startswith("..")):
            first = _word_list(after[1:])[:1]
            if first and after[1:].startswith(first[0]):
                read = first[0]
        out.append((w, read))
    return out


def _unquoted(code):
    """`code` with its quoted strings emptied ('...' becomes ''): a word in one names nothing."""
    out, quote, escaped = [], None, False
    for c in code:
        if quote is not None:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == quote:
                quote = None
                out.append(c)
        else:
            if c in "'\"":
                quote = c
            out.append(c)
    return "".join(out)


def _code_of(line):
    quote, i = None, 0
    while i < len(line):
        b = line[i]
        if quote is not None:
            if b == "\\":
                i += 1
            elif b == quote:
                quote = None
        elif b in "'\"":
            quote = b
        elif line.startswith("--", i):
            return line[:i]
        i += 1
    return line


def _declares(code):
    """A `local` statement's names: on its first line each `local` declares (`local a = 0 local
    function f() ... end`, a test's clock line)."""
    if not code.startswith("local "):
        return []
    out = []
    for part in code.split("\n", 1)[0].split("local ")[1:]:
        if part:
            head = part[len("function "):] if part.startswith("function ") else part
            out += _word_list(re.split(r"[=(]", head, maxsplit=1)[0])
    return out


def _defines(code, declared):
    if code.startswith("local "):
        return _declares(code)
    if code.startswith("function "):
        head = code[len("function "):].split("(", 1)[0]
        table, sep, f = head.replace(":", ".").partition(".")
        return ["%s.%s" % (table, f), "%s.*" % table] if sep else [head]
    out = []
    for line in code.split("\n"):
        line = line.lstrip()
        first = _word_list(line)[:1]
        if not first or not line.startswith(first[0]):
            continue
        name = first[0]
        rest = line[len(name):].lstrip()
        assigns = rest[:1] in ("[", ".") or (rest.startswith("=") and not rest.startswith("=="))
        if assigns and name in declared and name not in out:
            out.append(name)
    return out


def _index(library):
    """The statements of `library` (lists of lines), their code, and {key: [statement]}."""
    statements, codes, block = [[]], [""], False
    for line in library:
        first = re.split(r"[^A-Za-z0-9_]", line, maxsplit=1)[0]
        if (not block and line[:1] and (line[0].isalpha() or line[0] == "_")
                and first not in ("end", "else", "elseif", "until")):
            statements.append([])
            codes.append("")
        statements[-1].append(line)
        if not block:
            codes[-1] += _code_of(line) + "\n"
        comment = line[len(_code_of(line)):]
        if block:
            block = "]]" not in line
        elif comment.startswith("--[["):
            block = "]]" not in comment[4:]
    declared = {n for c in codes for n in _declares(c)}
    by_key = {}
    for i, c in enumerate(codes):
        for key in _defines(c, declared):
            by_key.setdefault(key, []).append(i)
    return statements, codes, by_key


def _walk(index, queue, code):
    """The lines of the statements `queue`, of those `code` names, and of every statement
    defining what those name, until none is added."""
    statements, codes, by_key = index
    wanted, seen = [False] * len(statements), set()

    def take(used):
        for name, read in _references(used):
            # `t.f` needs t and its function f; `t` alone (passed on, indexed) all of t's.
            for key in (name, "%s.%s" % (name, read or "*")):
                if key not in seen:
                    seen.add(key)
                    queue.extend(by_key.get(key, []))

    take(code)
    while queue:
        i = queue.pop()
        if wanted[i]:
            continue
        wanted[i] = True
        # (A `local`'s own names are not uses of them.)
        used = _unquoted(codes[i])
        if used.startswith("local function "):
            used = used.split("(", 1)[1] if "(" in used else ""
        elif used.startswith("local "):
            used = used.split("=", 1)[1] if "=" in used else ""
        take(used)
    return [line for s, w in zip(statements, wanted) if w for line in s]


def general_needed(library, entry):
    """`library`'s lines (a list) that `entry`'s general entry needs, in order."""
    index = _index(library)
    _, codes, by_key = index
    defining = {i for at in by_key.values() for i in at}
    quoted = "'%s'" % entry
    by_name_registered = any("redis.register_function" in c and quoted in c for c in codes)
    queue = []
    for i, c in enumerate(codes):
        if "redis.register_function" in c:
            literal = "redis.register_function('" in c or "function_name = '" in c
            if (quoted in c) if by_name_registered else not literal:
                queue.append(i)
        elif i not in defining and c.strip():
            queue.append(i)
    return _walk(index, queue, "")


def reached(library, code):
    """`library`'s lines that the lines `code` reach (what they name, and theirs), in order."""
    return _walk(_index(library), [],
                 "\n".join(_unquoted(_code_of(line)) for line in code))


def parameters(line):
    """The parameters of the function a line opens: `... function name(a, b)` -> "a, b"."""
    return line[line.index("(") + 1:line.index(")")]


def hot_tag(lines, entry):
    """The tag of `entry`'s hot path on the line `local HOT = { name = 'tag', ... }`, or None."""
    line = next(l for l in lines if l.startswith("local HOT = {"))
    found = re.search(r"\b%s = '([^']*)'" % entry, line)
    return found and found.group(1)


def library_script(source, entry):
    """The script that serves the library function `entry` through EVALSHA."""
    lines = source.splitlines()
    if not lines[0].startswith("#!lua"):
        raise ValueError("the library starts with its #!lua line")
    general = lines.index("-- @scripts: general")
    hot, end = lines.index("-- @scripts: hot"), lines.index("-- @scripts: end hot")
    marks = [line.strip() for line in lines]
    tag = hot_tag(lines, entry)
    fast = next(i for i in range(hot, end) if lines[i].startswith("local function fast("))
    memory = marks.index("-- @scripts: memory")
    body, body_end = marks.index("-- @scripts: body"), marks.index("-- @scripts: end body")
    # The definitions the hot section names, and theirs.
    definitions = reached(lines[1:general], lines[hot:end + 1])
    # The script has run the hot path when the general entry does: registration takes the body,
    # and fast's own definition (to the end of the hot section) is left out.
    library = "\n".join(general_needed(
        lines[1:fast] + ["local fast = function(_, body) return body end"] + lines[end + 1:],
        entry))
    general_entry = "\n".join([
        "local function general_entry(keys, args, now)",
        "local registered_entries = {}",
        "local function register_entry(name, callback)",
        "  if type(name) == 'table' then name, callback = name.function_name, name.callback end",
        "  registered_entries[name] = callback",
        "end",
        library.replace("redis.register_function", "register_entry"),
        "return registered_entries['%s'](keys, args, now)" % entry,
        "end",
    ])
    if tag is None:
        return general_entry + "\nreturn general_entry(KEYS, ARGV)\n"
    # The hot path in a block of its own, its body in `repeat ... until true`: a line
    # `return general(keys, args)` becomes `break` (with `now` kept first when it passes it),
    # and the general entry, a closure created only then, is called after the block.
    general_name = parameters(lines[fast]).split(",", 1)[1].strip()
    fallback = "return %s(%s)" % (general_name, parameters(lines[body - 1]))
    fallback_now = "return %s(%s, now)" % (general_name, parameters(lines[body - 1]))
    body_lines = []
    for line in lines[body + 1:body_end]:
        indent = line[:len(line) - len(line.lstrip())]
        if line.strip() == fallback:
            line = indent + "do break end"
        elif line.strip() == fallback_now:
            line = indent + "do general_now = now break end"
        body_lines.append(line)
    body_code = "\n".join(_code_of(l) for l in body_lines)
    if re.search(r"\b%s\b" % general_name, body_code):
        raise ValueError("the hot path calls its general entry other than by a whole line")
    # A `break` inside a loop would leave the loop, not the block.
    if re.search(r"\b(for|while|repeat)\b", body_code):
        raise ValueError("the hot path's body has a loop: its fallbacks cannot be breaks")
    return "\n".join(["local general_now", "do"] + definitions + lines[hot:fast] + [
        "local %s = '%s', nil" % (parameters(lines[fast]), tag),
    ] + lines[fast + 1:memory] + [
        "local " + lines[memory + 1].strip()[len("local "):].split(" = ")[0],
        "local %s = KEYS, ARGV" % parameters(lines[body - 1]),
        "repeat",
    ] + body_lines + ["until true", "end", general_entry,
                      "return general_entry(KEYS, ARGV, general_now)", ""])
