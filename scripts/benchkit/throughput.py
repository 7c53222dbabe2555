"""Part 1: throughput, latency and server time per call of each row, run by redis-benchmark
against INCR (the floor) and the Lua equivalents, in four configurations."""

import subprocess
import sys
import time

from . import registry
from .lua import load_scripts, with_shas
from .report import fmt_ratio, load_snapshot, median
from .server import commandstats, process_cpu_seconds, replica_caught_up

# The rows of the table. `cmd` is the command; `{key}` is replaced by a random-key pattern or
# the hot key, `{sha:NAME}` by the SHA of the Lua script NAME.
# `lua` names the row it is compared with. Each limiter of the registry has its command's row
# and its library function's row (`table_rows()` derives them, in the registry's order); what differs
# between them is here, by the registry's word: the sliding log gets a long window (60 s), so its
# logs fill up instead of emptying between two requests, and each row's comparison. A word here
# that the registry lacks stops the benchmark, naming this file.
WINDOW_MS = {"SLIDINGLOG": 60000}
COMPARED = {"GCRA": "Lua GCRA (string)", "TOKENBUCKET": "Lua token bucket (hash)",
            "SLIDINGLOG": "Lua sliding log (zset)"}
LIBRARY_COMPARED = {"SLIDINGLOG": "Lua sliding log (zset)"}
LIBRARY_DEFAULT = "Lua allowN GCRA (redis_rate)"

FLOOR = [{"label": "INCR", "cmd": "INCR {key}", "kind": "floor"}]
MODULE_MORE = [
    {"label": "RL.LEASE", "cmd": "RL.LEASE {key} 100 1000 WANT 10",
     "lua": "Lua token bucket (hash)"},
    # RL.ALL over 2 and 4 GCRA limiters (a key and its tenant; four levels): against two RL.GCRA
    # calls. Each {key} gets its own random number, so the limiters are independent keys.
    {"label": "RL.ALL x2", "cmd": "RL.ALL 2 {key}:k {key}:t GCRA 100 1000 GCRA 100000 1000"},
    {"label": "RL.ALL x4", "cmd": "RL.ALL 4 {key}:k {key}:t {key}:u {key}:v GCRA 100 1000 GCRA 100000 1000 "
                                  "GCRA 100 1000 GCRA 100000 1000"},
    {"label": "Lua GCRA (string)", "cmd": "EVALSHA {sha:gcra} 1 {key} 100 1000 100 1", "kind": "lua"},
    {"label": "Lua token bucket (hash)", "cmd": "EVALSHA {sha:token_bucket} 1 {key} 100 1000 100 1",
     "kind": "lua"},
    {"label": "Lua sliding log (zset)", "cmd": "EVALSHA {sha:sliding_log} 1 {key} 100 60000 1",
     "kind": "lua"},
    # go-redis/redis_rate's allowN at 100 per second: the script the library must keep up with.
    {"label": "Lua allowN GCRA (redis_rate)", "cmd": "EVALSHA {sha:redis_rate} 1 {key} 100 100 1 1",
     "kind": "lua"},
]
LIBRARY_MORE = [
    {"label": "rl_lease (library)", "cmd": "FCALL rl_lease 1 {key} 100 1000 WANT 10",
     "kind": "library", "lua": "Lua allowN GCRA (redis_rate)"},
    {"label": "rl_all x2 (library)",
     "cmd": "FCALL rl_all 2 {key}:k {key}:t GCRA 100 1000 GCRA 100000 1000", "kind": "library",
     "lua": "Lua allowN GCRA (redis_rate)"},
]


def table_rows(listed=None):
    """The table's rows: INCR, each limiter's command, the others, each limiter's library
    function, the library's others."""
    limiters = [a for a in (listed if listed is not None else registry.load()) if a.limiter]
    words = {a.word for a in limiters}
    for name, table in (("WINDOW_MS", WINDOW_MS), ("COMPARED", COMPARED),
                        ("LIBRARY_COMPARED", LIBRARY_COMPARED)):
        unknown = sorted(set(table) - words)
        if unknown:
            raise SystemExit("scripts/benchkit/throughput.py: %s names %s, which the registry's "
                             "limiters lack" % (name, ", ".join(unknown)))
    module, library = [], []
    for a in limiters:
        window, fname = WINDOW_MS.get(a.word, 1000), "rl_" + a.word.lower()
        row = {"label": "RL." + a.word, "cmd": "RL.%s {key} 100 %d" % (a.word, window)}
        if a.word in COMPARED:
            row["lua"] = COMPARED[a.word]
        module.append(row)
        library.append({"label": fname + " (library)",
                        "cmd": "FCALL %s 1 {key} 100 %d" % (fname, window), "kind": "library",
                        "lua": LIBRARY_COMPARED.get(a.word, LIBRARY_DEFAULT)})
    return FLOOR + module + MODULE_MORE + library + LIBRARY_MORE


CONFIGS = [
    {"name": "-P 16, random keys", "pipeline": 16, "random": True},
    {"name": "-P 16, hot key", "pipeline": 16, "random": False},
    {"name": "-P 1, random keys", "pipeline": 1, "random": True},
    {"name": "-P 1, hot key", "pipeline": 1, "random": False},
]
CLIENTS = 50
KEYSPACE = 100_000


def requests_for(config, row, quick):
    """Requests per run: about 1-3 s each on 2 shared cores."""
    if config["pipeline"] == 1:
        n = 100_000
    elif row.get("kind") in ("lua", "library"):
        n = 300_000
    else:
        n = 1_000_000
    return max(n // 5, 10_000) if quick else n


def run_benchmark(server, command_words, n, pipeline, random_keys):
    args = ["redis-benchmark", *server.bench_args(), "-c", str(CLIENTS),
            "-P", str(pipeline), "-n", str(n), "--csv"]
    if random_keys:
        args += ["-r", str(KEYSPACE)]
    args += command_words
    out = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError("redis-benchmark failed: %s" % out.stderr.strip())
    # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",
    # "p99_latency_ms","max_latency_ms"
    lines = [l for l in out.stdout.splitlines() if l.strip()]
    header = [h.strip('"') for h in lines[0].split('","')]
    values = [v.strip('"') for v in lines[-1].rsplit('","', len(header) - 1)]
    row = dict(zip(header, values))
    return float(row["rps"]), float(row["p50_latency_ms"]), float(row["p99_latency_ms"])


def throughput(server, quick, repeat, only, replica=None):
    c = server.client
    shas = load_scripts(c)
    rows = [row for row in table_rows()
            if not only or any(w.lower() in row["label"].lower() for w in only)]

    def words_for(row, config):
        key = "bench:%s:%s" % (row["label"].split()[0].lower().replace("rl.", ""),
                               "__rand_int__" if config["random"] else "hot")
        if row.get("kind") == "lua":
            key += ":" + row["label"].split()[1].lower()
        return with_shas(row["cmd"].replace("{key}", key), shas).split()

    results = {}  # (config name, label) -> list of samples
    started = time.monotonic()
    # Steady state, not first touches: every random key is created before anything is measured
    # (INCR's keys then stay; a limiter's key stays as long as its TTL and the request rate
    # keep it alive, which is part of what is measured).
    server.flush()
    for row in rows:
        run_benchmark(server, words_for(row, {"random": True}), 2 * KEYSPACE, 16, True)
    if replica and not replica_caught_up(server):
        sys.exit("bench: the replica did not catch up with the warm-up")
    for rep in range(repeat):
        for config in CONFIGS:
            for row in rows:
                words = words_for(row, config)
                n = requests_for(config, row, quick)
                # Differences, not CONFIG RESETSTAT: an operator's ACL user may not have CONFIG.
                calls_before, usec_before = commandstats(c).get(words[0].lower(), (0, 0))
                cpu_before = process_cpu_seconds(server.proc and server.proc.pid)
                replica_before = process_cpu_seconds(replica.proc.pid) if replica else 0.0
                rps, p50, p99 = run_benchmark(server, words, n, config["pipeline"], config["random"])
                cpu = process_cpu_seconds(server.proc and server.proc.pid) - cpu_before
                # The replica's share: what it spent applying this run's stream, caught up or
                # not when the run ended (it competes for the same cores while it runs).
                if replica and not replica_caught_up(server):
                    sys.exit("bench: the replica fell behind by more than a minute or dropped")
                replica_cpu = (process_cpu_seconds(replica.proc.pid) - replica_before
                               if replica else float("nan"))
                calls, usec = commandstats(c).get(words[0].lower(), (0, 0))
                calls, usec = calls - calls_before, usec - usec_before
                sample = {"rps": rps, "p50": p50, "p99": p99,
                          "usec_per_call": usec / calls if calls else float("nan"),
                          "cpu_usec_per_request": cpu / n * 1e6,
                          "replica_cpu_usec_per_request": replica_cpu / n * 1e6,
                          "calls": calls, "n": n, "load": load_snapshot()}
                results.setdefault((config["name"], row["label"]), []).append(sample)
                print("bench: [%d/%d] %s%-18s %-26s %10.0f ops/s  p50 %.3f  p99 %.3f ms  "
                      "%.2f us/call  %.2f cpu us/req  load %s"
                      % (rep + 1, repeat, "replica, " if replica else "", config["name"],
                         row["label"], rps, p50, p99, sample["usec_per_call"],
                         sample["cpu_usec_per_request"], sample["load"]),
                      flush=True)
    return rows, results, time.monotonic() - started


def throughput_table(rows, results, replica=False):
    cols = ["configuration", "command", "ops/s (median)", "spread", "× INCR", "× Lua", "p50 ms",
            "p99 ms", "server µs/call", "server CPU µs/req"]
    if replica:
        cols.append("replica CPU µs/req")
    lines = ["| %s |" % " | ".join(cols), "|---|---|" + "---:|" * (len(cols) - 2)]
    keys = ("rps", "p50", "p99", "usec_per_call", "cpu_usec_per_request",
            "replica_cpu_usec_per_request")
    for config in CONFIGS:
        med = {}
        for row in rows:
            samples = results.get((config["name"], row["label"]), [])
            if samples:
                med[row["label"]] = {k: median([s.get(k, float("nan")) for s in samples])
                                     for k in keys}
        for row in rows:
            m = med.get(row["label"])
            if not m:
                continue
            rps = [s["rps"] for s in results[(config["name"], row["label"])]]
            cpu = m["cpu_usec_per_request"]  # NaN for a store of yours (--url): not our process
            spread = (max(rps) - min(rps)) / m["rps"] * 100 if m["rps"] else float("nan")
            incr = med.get("INCR", {}).get("rps")
            lua = med.get(row.get("lua", ""), {}).get("rps")
            cells = [config["name"], row["label"], "{:,.0f}".format(m["rps"]),
                     "±%.0f%%" % (spread / 2),
                     fmt_ratio(m["rps"], incr) if row["label"] != "INCR" else "1.00",
                     fmt_ratio(m["rps"], lua) if lua else "—",
                     "%.3f" % m["p50"], "%.3f" % m["p99"], "%.2f" % m["usec_per_call"],
                     "%.2f" % cpu if cpu == cpu else "—"]
            if replica:
                cells.append("%.2f" % m["replica_cpu_usec_per_request"])
            lines.append("| %s |" % " | ".join(cells))
    lines += [
        "",
        "ops/s, p50 and p99: redis-benchmark's. × INCR, × Lua: ops/s over INCR's and over the Lua "
        "equivalent's in the same configuration. Server µs/call: INFO commandstats of the master "
        "(the command itself, RM_Replicate's queueing included; writing to the replica link is "
        "not in it). Server CPU µs/req: the master redis-server's user+system time over the run "
        "per request (reading, parsing, replies, propagation, expiry cycles included; at -P 1 "
        "mostly system calls). Spread: half of (max-min) over the median."
        + (" Replica CPU µs/req: the replica's user+system time per request, from the run's start "
           "until it had acknowledged everything (`WAIT 1`); master and replica share the same "
           "cores." if replica else ""),
    ]
    return "\n".join(lines)
