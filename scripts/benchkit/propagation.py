"""Parts 3 and 4: what an admitted request propagates (the AOF's growth, which every replica
receives too) and its server time, on the debug clock: a full sliding log by its length, and a
key that changed policy once and stays busy under its current one."""

import sys

from .report import fmt_ratio, median
from .server import RedisError, Server, commandstats, info_fields, resp

# Where the debug clock starts: a fixed instant, so every run propagates the same timestamps.
START_MS = 1_800_000_000_000


def debug_clock_server():
    """A server of its own for each measured key: its own debug clock and its own AOF."""
    return Server(module_args=["DEBUG-CLOCK", "yes"], appendonly=True)


def admit_every(c, admit, step_ms, n):
    """n calls of `admit`, each step_ms later on the debug clock, pipelined 500 at a time; every
    one must be admitted (a denial propagates nothing and would skew the bytes per admit)."""
    advance = ("RL.DEBUG", "CLOCK", "ADVANCE", step_ms)
    for start in range(0, n, 500):
        replies = c.pipeline([advance, admit] * min(500, n - start))
        for reply in replies[1::2]:
            if isinstance(reply, RedisError) or reply[0] != 1:
                sys.exit("bench: %s was not admitted: %r" % (" ".join(map(str, admit)), reply))


def propagated_round(c, admit, step_ms, n):
    """One measured round of `admit_every`: (the AOF's growth per admit, server µs per call)."""
    c("CONFIG", "RESETSTAT")
    before = int(info_fields(c, "persistence")["aof_current_size"])
    admit_every(c, admit, step_ms, n)
    after = int(info_fields(c, "persistence")["aof_current_size"])
    calls, usec = commandstats(c).get(admit[0].lower(), (0, 0))
    return (after - before) / n, usec / calls if calls else float("nan")


# Part 3: what an admitted sliding-log request propagates, by the log's length.

LOG_WINDOW_MS = 10_000


def log_propagation(quick):
    """Bytes propagated (to the AOF, and so to every replica: the same stream) per admitted
    RL.SLIDINGLOG on a full log, and the server time per call, at L=10 and L=10,000.

    On the debug clock, L requests spaced W/L apart fill the log (L entries, each its own
    instant); every measured request then comes W/L later, so the oldest entry has just left:
    each admit drops one entry and appends one, the steady state of a log kept full. The AOF
    (appendfsync no, no rewrite) grows by exactly what is propagated. Each L has its own server
    (its own clock); the measurement alternates between them in rounds and reports the median
    round, so both see the same noise."""
    limits = (10, 10_000)
    rounds, per_round = (3, 100) if quick else (9, 200)
    servers = {}
    try:
        for limit in limits:
            servers[limit] = debug_clock_server()
        admit = {limit: ("RL.SLIDINGLOG", "bench:log:%d" % limit, limit, LOG_WINDOW_MS)
                 for limit in limits}
        full = {}
        for limit in limits:
            c = servers[limit].client
            c("RL.DEBUG", "CLOCK", "SET", START_MS)
            admit_every(c, admit[limit], LOG_WINDOW_MS // limit, limit)
            full[limit] = c(*admit[limit], "COST", "0")[2]
        samples = {limit: [] for limit in limits}
        for _ in range(rounds):
            for limit in limits:
                samples[limit].append(propagated_round(servers[limit].client, admit[limit],
                                                       LOG_WINDOW_MS // limit, per_round))
        rows = []
        for limit in limits:
            row = {"limit": limit, "entries": limit, "remaining_before": full[limit],
                   "admits": rounds * per_round, "request_bytes": len(resp(*admit[limit])),
                   "bytes_per_admit": median([b for b, _ in samples[limit]]),
                   "usec_per_call": median([u for _, u in samples[limit]]),
                   "usec_rounds": [u for _, u in samples[limit]]}
            rows.append(row)
            print("bench: sliding log L=%-6d full (remaining %d): %.1f bytes propagated per admit "
                  "(request %d bytes), %.2f us/call (rounds: %s)"
                  % (limit, full[limit], row["bytes_per_admit"], row["request_bytes"],
                     row["usec_per_call"], " ".join("%.2f" % u for u in row["usec_rounds"])),
                  flush=True)
    finally:
        for server in servers.values():
            server.stop()
    return rows


# Part 4: a key that changed policy once and stays busy under its current one.

ROLLOUTS = [
    # (command, L, W ms, the other W called once, the interval between admits in ms)
    ("RL.SLIDINGLOG", 1000, 60_000, 60_001, 60),
    ("RL.GCRA", 100, 1000, 1001, 10),
]


def rollout_propagation(quick):
    """Bytes propagated and server time per admitted request on a key that was called once under
    another configuration (a W one more: a gateway's rollout for one call) and is then admitted
    under its own, one request every W/L on the debug clock: beside the same key that never saw
    the other configuration. The key remembers the other one while it still counts (for a busy
    key, as long as it stays busy); the target is within 1.5x of the plain key. Each key has its
    own server (its own clock and AOF); rounds alternate between them."""
    rounds, per_round = (3, 100) if quick else (7, 300)
    rows = []
    for command, limit, window, other, step_ms in ROLLOUTS:
        servers = {}
        try:
            for kind in ("plain", "changed"):
                servers[kind] = debug_clock_server()
            admit = (command, "bench:rollout", limit, window)
            for kind, server in servers.items():
                c = server.client
                c("RL.DEBUG", "CLOCK", "SET", START_MS)
                if kind == "changed":
                    c(command, "bench:rollout", limit, other)
                # A window's worth first: the steady state of a busy key.
                admit_every(c, admit, step_ms, window // step_ms)
            samples = {kind: [] for kind in servers}
            for _ in range(rounds):
                for kind, server in servers.items():
                    samples[kind].append(propagated_round(server.client, admit, step_ms,
                                                          per_round))
            memory = {kind: s.client("MEMORY", "USAGE", "bench:rollout")
                      for kind, s in servers.items()}
            remembering = info_fields(servers["changed"].client, "ratelimit").get(
                "ratelimit_keys_with_several_configurations")
            row = {"command": command, "limit": limit, "window": window, "other": other,
                   "step_ms": step_ms, "admits": rounds * per_round,
                   "remembering": remembering}
            for kind in servers:
                row[kind] = {"bytes_per_admit": median([b for b, _ in samples[kind]]),
                             "usec_per_call": median([u for _, u in samples[kind]]),
                             "memory_usage": memory[kind]}
            rows.append(row)
            print("bench: rollout %s %d %d (once %d): %.1f vs %.1f bytes per admit, "
                  "%.2f vs %.2f us/call, MEMORY USAGE %s vs %s, keys remembering: %s"
                  % (command, limit, window, other, row["changed"]["bytes_per_admit"],
                     row["plain"]["bytes_per_admit"], row["changed"]["usec_per_call"],
                     row["plain"]["usec_per_call"], memory["changed"], memory["plain"],
                     remembering), flush=True)
        finally:
            for server in servers.values():
                server.stop()
    return rows


def rollout_propagation_table(rows):
    lines = ["| key admitted under its policy, one call every W/L | admits | bytes propagated per "
             "admit | × plain | server µs/call | × plain | MEMORY USAGE |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        p, c = r["plain"], r["changed"]
        lines.append("| %s %d %d, never another policy | %d | %.1f | | %.2f | | %s |" % (
            r["command"], r["limit"], r["window"], r["admits"], p["bytes_per_admit"],
            p["usec_per_call"], p["memory_usage"]))
        lines.append("| %s %d %d, once called with W = %d | %d | %.1f | %s | %.2f | %s | %s |" % (
            r["command"], r["limit"], r["window"], r["other"], r["admits"], c["bytes_per_admit"],
            fmt_ratio(c["bytes_per_admit"], p["bytes_per_admit"]), c["usec_per_call"],
            fmt_ratio(c["usec_per_call"], p["usec_per_call"]), c["memory_usage"]))
    lines.append("")
    lines.append("The changed key still remembers the other configuration (it keeps counting "
                 "for it while the key is busy); target: within 1.5× of the plain key.")
    return "\n".join(lines)


def log_propagation_table(rows):
    lines = ["| RL.SLIDINGLOG, full log | admits | request bytes | bytes propagated per admit "
             "| server µs/call (median round) |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append("| L=%s, W=%d ms, %s entries | %d | %d | %.1f | %.2f |" % (
            "{:,}".format(r["limit"]), LOG_WINDOW_MS, "{:,}".format(r["entries"]), r["admits"],
            r["request_bytes"], r["bytes_per_admit"], r["usec_per_call"]))
    if len(rows) == 2:
        a, b = rows
        lines.append("")
        lines.append("L=%s over L=%s: %.2f× the bytes, %.2f× the server time (target: within 1.5×)."
                     % ("{:,}".format(b["limit"]), "{:,}".format(a["limit"]),
                        b["bytes_per_admit"] / a["bytes_per_admit"],
                        b["usec_per_call"] / a["usec_per_call"]))
    lines.append("")
    lines.append("Bytes propagated: the AOF's growth per admitted request (what every replica "
                 "receives too). Each measured request drops the oldest entry and appends one.")
    return "\n".join(lines)
