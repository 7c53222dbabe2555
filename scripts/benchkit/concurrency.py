"""Part 5 of `make bench`: RL.CONCURRENCY's ACQUIRE + RELEASE pair beside one RL.GCRA admit,
beside the sorted-set Lua recipe (an EVALSHA of ZREMRANGEBYSCORE + ZCARD + ZADD to acquire, a
ZREM to release) and beside the Functions library's `rl_concurrency` pair (RELEASE through
the library, and through a bare ZREM as the gateway client sends it), then the memory a holder costs (MEMORY USAGE at 1 and at 1,000 holders, and
the recipe's sorted set the same way).

A pair is two commands (a redis-benchmark run repeats one), so this part drives the server from
here: batches of pairs pipelined on one connection, every pair its own holder id, N large enough
that every ACQUIRE is admitted. Per row: the server's own time per pair from INFO commandstats
(the sum over the pair's commands, each reset first), the pairs per second that time allows, and
the wall-clock pairs per second of this client (bound by Python, a floor). With `--callgrind`
(`scripts/bench concurrency --callgrind`) the server runs under valgrind and the rows give the
instructions per pair inside processCommand instead of times.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

from .callgrind import inclusive
from .lua import load_library
from .server import Server, commandstats

# The recipe as the common one runs it: drop the expired (score = expiry in ms), count, and add
# the holder with its expiry when there is room; the caller releases with ZREM.
# KEYS[1]; ARGV: N, TTL (ms), id.
LUA_ACQUIRE = r"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

N = 1000
TTL_MS = 60_000
BATCH = 16


def rows(sha):
    """(label, the commands of unit i): one admit, or one pair."""
    return [
        ("RL.GCRA admit (one call)",
         lambda i: [("RL.GCRA", "g:%d" % (i % 1000), "1000000", "1000")]),
        ("RL.CONCURRENCY ACQUIRE + RELEASE",
         lambda i: [("RL.CONCURRENCY", "c:%d" % (i % 1000), N, TTL_MS, "ACQUIRE", "id%d" % i),
                    ("RL.CONCURRENCY", "c:%d" % (i % 1000), N, TTL_MS, "RELEASE", "id%d" % i)]),
        ("Lua sorted set EVALSHA + ZREM",
         lambda i: [("EVALSHA", sha, 1, "z:%d" % (i % 1000), N, TTL_MS, "id%d" % i),
                    ("ZREM", "z:%d" % (i % 1000), "id%d" % i)]),
        ("FCALL rl_concurrency ACQUIRE + RELEASE",
         lambda i: [("FCALL", "rl_concurrency", 1, "f:%d" % (i % 1000), N, TTL_MS, "ACQUIRE",
                     "id%d" % i),
                    ("FCALL", "rl_concurrency", 1, "f:%d" % (i % 1000), N, TTL_MS, "RELEASE",
                     "id%d" % i)]),
        # The gateway client's pair on the Functions backend: the library's holders are a sorted
        # set scored by expiry, so it releases with a bare ZREM, as the recipe's caller does.
        ("FCALL rl_concurrency ACQUIRE + ZREM",
         lambda i: [("FCALL", "rl_concurrency", 1, "f:%d" % (i % 1000), N, TTL_MS, "ACQUIRE",
                     "id%d" % i),
                    ("ZREM", "f:%d" % (i % 1000), "id%d" % i)]),
    ]


def drive(c, unit, n):
    """n units in pipelined batches; returns the wall-clock seconds."""
    started = time.monotonic()
    for at in range(0, n, BATCH):
        commands = [w for i in range(at, min(at + BATCH, n)) for w in unit(i)]
        for reply in c.pipeline(commands):
            if isinstance(reply, Exception) or reply == 0:
                sys.exit("bench: %r answered %r" % (commands[0], reply))
    return time.monotonic() - started


def memory_per_holder(c, sha):
    """Bytes per holder: (MEMORY USAGE at N holders − at 1) / (N − 1), module and recipe."""
    out = {}
    for label, acquire in (
            ("RL.CONCURRENCY", lambda i: ("RL.CONCURRENCY", "m", N, TTL_MS, "ACQUIRE",
                                          "request-%06d" % i)),
            ("Lua sorted set", lambda i: ("EVALSHA", sha, 1, "m", N, TTL_MS,
                                          "request-%06d" % i))):
        c("FLUSHALL")
        c(*acquire(0))
        one = c("MEMORY", "USAGE", "m")
        c.pipeline([acquire(i) for i in range(1, N)])
        full = c("MEMORY", "USAGE", "m")
        out[label] = (full - one) / (N - 1)
    return out


def concurrency_bench(argv, quick):
    use_callgrind = argv == ["--callgrind"]
    if argv and not use_callgrind:
        sys.exit("usage: scripts/bench concurrency [--callgrind]")
    n = 2_000 if use_callgrind else (10_000 if quick else 50_000)
    # BENCH_TOP=k: the k costliest functions of each row (inclusive), with --callgrind.
    top = int(os.environ.get("BENCH_TOP", "0"))
    out_dir = None
    if use_callgrind:
        if not shutil.which("valgrind"):
            sys.exit("bench: --callgrind needs valgrind")
        out_dir = tempfile.mkdtemp(prefix="rl-callgrind-")
        server = Server(wrapper=["valgrind", "--tool=callgrind",
                                 "--callgrind-out-file=" + os.path.join(out_dir, "cg.out")],
                        ready_timeout=120)
    else:
        server = Server()
    c = server.client
    try:
        sha = c("SCRIPT", "LOAD", LUA_ACQUIRE)
        load_library(c)
        print("RL.CONCURRENCY: pairs of ACQUIRE + RELEASE (N = %d, every pair its own id, 1,000"
              " keys), %d per row, batches of %d pipelined" % (N, n, BATCH))
        if use_callgrind:
            print("%-36s %14s %14s" % ("row", "instr/unit", "vs GCRA"))
        else:
            print("%-36s %12s %14s %14s %9s" % ("row", "server us/unit", "units/s (server)",
                                               "units/s (wall)", "vs GCRA"))
        gcra = None
        for label, unit in rows(sha):
            c("FLUSHALL")
            drive(c, unit, min(n, 2000))
            if use_callgrind:
                pid = str(server.proc.pid)
                subprocess.run(["callgrind_control", "--zero", pid], capture_output=True,
                               timeout=60, check=True)
                drive(c, unit, n)
                subprocess.run(["callgrind_control", "--dump=row", pid], capture_output=True,
                               timeout=60, check=True)
                dumps = sorted((f for f in os.listdir(out_dir) if f.startswith("cg.out.")),
                               key=lambda f: os.path.getmtime(os.path.join(out_dir, f)))
                # Counted over n units: per unit, whatever its number of commands.
                counts = inclusive(os.path.join(out_dir, dumps[-1]), n)
                per = counts.get("???:processCommand", 0)
                gcra = gcra or per
                print("%-36s %14.0f %13.2fx" % (label, per, per / gcra), flush=True)
                for fn, count in sorted(counts.items(), key=lambda kv: -kv[1])[:top]:
                    if fn != "total":
                        print("    %8.0f  %s" % (count, fn[:110]))
                continue
            c("CONFIG", "RESETSTAT")
            wall = drive(c, unit, n)
            stats = commandstats(c)
            usec = sum(stats.get(w[0].lower(), (0, 0))[1] for w in {u[0]: u for u in unit(0)}.values())
            per = usec / n
            gcra = gcra or per
            print("%-36s %12.2f %14.0f %14.0f %8.2fx" % (label, per, 1e6 / per, n / wall,
                                                        per / gcra), flush=True)
        if not use_callgrind:
            for label, b in memory_per_holder(c, sha).items():
                print("memory per holder, %-16s %6.1f bytes (MEMORY USAGE, %d holders)"
                      % (label, b, N))
    finally:
        server.stop()
        if out_dir:
            shutil.rmtree(out_dir, ignore_errors=True)
