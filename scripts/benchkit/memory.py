"""Part 2: memory. The bytes a limiter key costs (the module's, the library's, the Lua scripts'
state), and a sliding log's bytes per entry."""

import subprocess
import time

from .lua import load_library
from .server import HOST, RedisError, info_fields, resp

MEM_KEYS = 1_000_000
NAME_LEN = 37


def name(prefix, i):
    """A key name of exactly NAME_LEN bytes."""
    return ("%s:%0*d" % (prefix, NAME_LEN - len(prefix) - 1, i)).encode()


def pipe(server, payload_chunks, expect):
    """Sends commands through `redis-cli --pipe`; fails on any error reply."""
    proc = subprocess.Popen(["redis-cli", "-h", HOST, "-p", str(server.port), "--pipe"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        for chunk in payload_chunks:
            proc.stdin.write(chunk)
        proc.stdin.close()
        out = proc.stdout.read().decode(errors="replace")
        proc.wait(timeout=600)
    except BaseException:
        proc.kill()
        proc.wait(timeout=10)
        raise
    if "errors: 0" not in out or ("replies: %d" % expect) not in out:
        raise RuntimeError("redis-cli --pipe: %s" % out.strip()[-500:])


def settled_used_memory(c):
    """used_memory once incremental rehashing has finished (two equal readings in a row)."""
    last = None
    for _ in range(50):
        now = int(info_fields(c, "memory")["used_memory"])
        if now == last:
            return now
        last = now
        time.sleep(0.2)
    return last


def measure(server, make_chunks, expect):
    c = server.client
    c("FLUSHALL")
    before = settled_used_memory(c)
    pipe(server, make_chunks(), expect)
    after = settled_used_memory(c)
    return after - before


def memory(server, quick):
    c = server.client
    keys = MEM_KEYS // 10 if quick else MEM_KEYS
    now_us = int(time.time() * 1e6)
    batch = 10_000

    def per_key(build):
        def chunks():
            for start in range(0, keys, batch):
                yield b"".join(build(i) for i in range(start, min(start + batch, keys)))
        return chunks

    load_library(c)
    rows = []
    # One request each with a one-hour refill (L=1 W=3600000), so no key expires while measured.
    kinds = [
        ("RL.GCRA", "m:gcra", 1,
         lambda k: resp("RL.GCRA", k, 1, 3600000)),
        ("RL.TOKENBUCKET", "m:tb", 1,
         lambda k: resp("RL.TOKENBUCKET", k, 1, 3600000)),
        ("rl_gcra (library: string + PXAT)", "m:fgcra", 1,
         lambda k: resp("FCALL", "rl_gcra", 1, k, 1, 3600000)),
        ("rl_tokenbucket (library: string + PXAT)", "m:ftb", 1,
         lambda k: resp("FCALL", "rl_tokenbucket", 1, k, 1, 3600000)),
        ("Lua GCRA state (string + PX)", "m:lgcra", 1,
         lambda k: resp("SET", k, now_us + 3_600_000_000, "PX", 3600000)),
        ("Lua token bucket state (hash + PEXPIRE)", "m:ltb", 2,
         lambda k: resp("HSET", k, "tokens", 0, "ts", now_us) + resp("PEXPIRE", k, 3600000)),
    ]
    for label, prefix, per_cmd, build in kinds:
        delta = measure(server, per_key(lambda i, b=build, p=prefix: b(name(p, i))), keys * per_cmd)
        try:
            usage = c("MEMORY", "USAGE", name(prefix, 0))
        except RedisError:
            usage = None
        rows.append({"what": label, "keys": keys, "bytes_per_key": delta / keys,
                     "memory_usage": usage})
        print("bench: memory %-40s %.1f bytes/key (MEMORY USAGE of one key: %s)"
              % (label, delta / keys, usage), flush=True)

    log_rows = []
    # 100,000 entries per measurement (20,000 quick), in logs of 1, 100 and 1000 entries.
    # The 1-entry logs give the cost of a key itself, so the marginal cost of an entry is
    # (bytes per key - bytes per 1-entry key) / (entries - 1).
    total = 20_000 if quick else 100_000
    start_ms = int(time.time() * 1000)
    for what, tag in (("RL.SLIDINGLOG", "sl"), ("Lua sliding log (sorted set)", "zl"),
                      ("rl_slidinglog (library: list)", "fl")):
        one_entry = None
        for entries in (1, 100, 1000):
            nkeys = total // entries

            def chunks(entries=entries, nkeys=nkeys, tag=tag):
                if tag == "sl":
                    # The debug clock moves 1 ms between rounds: every entry has its own
                    # timestamp, the case a run-length encoding cannot shrink.
                    yield resp("RL.DEBUG", "CLOCK", "SET", start_ms)
                for r in range(entries):
                    keys = [name("m:%s%d" % (tag, entries), k) for k in range(nkeys)]
                    if tag == "sl":
                        yield b"".join([resp("RL.DEBUG", "CLOCK", "ADVANCE", 1)]
                                       + [resp("RL.SLIDINGLOG", k, entries, 3600000) for k in keys])
                    elif tag == "fl":
                        # What the library stores: a header, then "<ms> <count>" per instant.
                        at = start_ms + r + 1
                        head = ["s %d 3600000 %d %d %d" % (entries, entries, at, entries)] if r == 0 else []
                        yield b"".join(resp("RPUSH", k, *head, "%d 1" % at) for k in keys)
                    else:
                        # What the Lua script stores: score = time in µs, member "<time>:<n>".
                        at = start_ms * 1000 + (r + 1) * 1000
                        yield b"".join(resp("ZADD", k, at, "%d:%d" % (at, r + 1)) for k in keys)
                if tag == "sl":
                    yield resp("RL.DEBUG", "CLOCK", "REAL")

            sent = entries * nkeys + (2 + entries if tag == "sl" else 0)
            per_key = measure(server, chunks, sent) / nkeys
            if entries == 1:
                one_entry = per_key
                continue
            log_rows.append({"what": what, "entries": entries, "keys": nkeys,
                             "bytes_per_entry": per_key / entries,
                             "marginal_bytes_per_entry": (per_key - one_entry) / (entries - 1)})
            print("bench: memory %-30s L=%-5d %.1f bytes/entry (%.1f marginal)"
                  % (what, entries, per_key / entries, log_rows[-1]["marginal_bytes_per_entry"]),
                  flush=True)
    c("FLUSHALL")
    return rows, log_rows


def memory_tables(rows, log_rows):
    lines = ["| key | keys | bytes per key (used_memory delta) | MEMORY USAGE of one key |",
             "|---|---:|---:|---:|"]
    for r in rows:
        lines.append("| %s | %s | %.1f | %s |" % (r["what"], "{:,}".format(r["keys"]),
                                                   r["bytes_per_key"], r["memory_usage"]))
    lines += ["", "| sliding log | entries per key | keys | bytes per entry, all in | "
              "marginal bytes per entry |", "|---|---:|---:|---:|---:|"]
    for r in log_rows:
        lines.append("| %s | %d | %s | %.1f | %.1f |" % (
            r["what"], r["entries"], "{:,}".format(r["keys"]), r["bytes_per_entry"],
            r["marginal_bytes_per_entry"]))
    return "\n".join(lines)
