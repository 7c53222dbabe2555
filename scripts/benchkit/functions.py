"""`make bench-functions` (`scripts/bench functions`): the Functions library against the Lua a
gateway runs today, on a server without the module (a managed service's). Side by side in one
run on one server: the library through FCALL, the same library through the scripts backend
(EVALSHA of the script generated for the function), and go-redis/redis_rate's allowN script (the
anchor, lua.py), on three workloads, at -P 1 and -P 16 with redis-benchmark -c 50, each run
repeated and interleaved, each run's ops/s and the server's own time per call (INFO
commandstats); then the instructions the server spends per call (callgrind) on the same
workloads. Prints each median and its ratio to the anchor's; then calls past the hot path, FCALL
against the scripts backend (general_path.py)."""

import os
import shutil
import subprocess
import sys
import tempfile
import time

from . import general_path
from .callgrind import counted
from .lua import LIBRARY, LUA_REDIS_RATE, library_script
from .report import fmt_ratio, load_snapshot, median
from .server import Server, commandstats

CLIENTS = 50
HOT_KEYS = 100
NEW_KEYS = 100_000

# Each workload's calls, by row: the anchor's arguments are (burst, rate, period s, cost), the
# library's L W BURST B, the same policy. {key} is the workload's key pattern.
WORKLOADS = [
    {"name": "admits on a hot key", "keys": 1, "fresh": False,
     "anchor": "10000000 10000000 1 1", "library": "10000000 1000 BURST 10000000"},
    {"name": "denials on 100 hot keys", "keys": HOT_KEYS, "fresh": False,
     "anchor": "1 1 3600 1", "library": "1 3600000 BURST 1"},
    {"name": "100,000 mostly-new keys, burst 1000", "keys": NEW_KEYS, "fresh": True,
     "anchor": "1000 100 1 1", "library": "100 1000 BURST 1000"},
]

ROWS = [
    {"label": "redis_rate allowN (EVALSHA, the anchor)", "kind": "anchor"},
    {"label": "rl_gcra (FCALL)", "kind": "fcall", "entry": "rl_gcra"},
    {"label": "rl_gcra (scripts backend, EVALSHA)", "kind": "script", "entry": "rl_gcra"},
    {"label": "rl_tokenbucket (FCALL)", "kind": "fcall", "entry": "rl_tokenbucket"},
]


def words_for(row, workload, shas):
    key = "bench:%s:%s" % (row["kind"] + row.get("entry", ""),
                     "hot" if workload["keys"] == 1 else "__rand_int__")
    if row["kind"] == "anchor":
        return ["EVALSHA", shas["anchor"], "1", key] + workload["anchor"].split()
    if row["kind"] == "script":
        return ["EVALSHA", shas[row["entry"]], "1", key] + workload["library"].split()
    return ["FCALL", row["entry"], "1", key] + workload["library"].split()


def load(c):
    """Loads the library, the anchor and the scripts backend's scripts; their SHAs."""
    with open(LIBRARY) as f:
        source = f.read()
    c("FUNCTION", "LOAD", "REPLACE", source)
    shas = {"anchor": c("SCRIPT", "LOAD", LUA_REDIS_RATE)}
    for row in ROWS:
        if row["kind"] == "script":
            shas[row["entry"]] = c("SCRIPT", "LOAD", library_script(source, row["entry"]))
    return shas


def benchmark(server, words, n, pipeline, keys, clients=CLIENTS, csv=True):
    args = ["redis-benchmark", *server.bench_args(), "-c", str(clients), "-P",
            str(pipeline), "-n", str(n)] + (["--csv"] if csv else ["-q"])
    if keys > 1:
        args += ["-r", str(keys)]
    out = subprocess.run(args + words, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError("redis-benchmark failed: %s" % out.stderr.strip())
    if not csv:
        return 0.0
    last = [l for l in out.stdout.splitlines() if l.strip()][-1]
    return float(last.split('","')[1])


def prepare(server, workload, words):
    """The state a run starts from: nothing for the new keys; the hot keys called before (the
    denials' keys spent, the hot key existing)."""
    server.flush()
    if not workload["fresh"]:
        benchmark(server, words, 20 * workload["keys"] + 1000, 16, workload["keys"],
                  clients=4, csv=False)


def requests_for(workload, pipeline, quick):
    if workload["fresh"]:
        n = NEW_KEYS  # at most as many calls as keys: most of them on a new key
    else:
        n = 300_000 if pipeline > 1 else 100_000
    return max(n // 5, 10_000) if quick else n


def throughput(quick, repeat, store=None):
    server = store or Server(module=False)
    results = {}
    try:
        shas = load(server.client)
        for rep in range(repeat):
            for workload in WORKLOADS:
                for pipeline in (1, 16):
                    for row in ROWS:
                        words = words_for(row, workload, shas)
                        prepare(server, workload, words)
                        n = requests_for(workload, pipeline, quick)
                        # The server's own time per call from INFO commandstats (differences,
                        # not CONFIG RESETSTAT: an operator's ACL user may not have CONFIG):
                        # what redis-benchmark's 50 clients, on the same cores, blur in ops/s.
                        command = words[0].lower()
                        calls, usec = commandstats(server.client).get(command, (0, 0))
                        rps = benchmark(server, words, n, pipeline, workload["keys"])
                        after = commandstats(server.client).get(command, (0, 0))
                        calls, usec = after[0] - calls, after[1] - usec
                        us = usec / calls if calls else float("nan")
                        results.setdefault((workload["name"], pipeline, row["label"]),
                                           []).append((rps, us))
                        print("bench: [%d/%d] %-36s -P %-2d %-40s %10.0f ops/s %6.2f us/call"
                              "  load %s" % (rep + 1, repeat, workload["name"], pipeline,
                                             row["label"], rps, us, load_snapshot()), flush=True)
    finally:
        if store:
            server.flush()
        server.stop()
    return results


def throughput_table(results):
    lines = ["| workload | -P | command | ops/s (median) | spread | × anchor "
             "| server µs/call (median) | × anchor |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    for workload in WORKLOADS:
        for pipeline in (1, 16):
            first = results.get((workload["name"], pipeline, ROWS[0]["label"]), [])
            anchor = median([rps for rps, _ in first])
            anchor_us = median([us for _, us in first])
            for row in ROWS:
                samples = results.get((workload["name"], pipeline, row["label"]), [])
                if not samples:
                    continue
                rates = [rps for rps, _ in samples]
                m = median(rates)
                us = median([us for _, us in samples])
                spread = (max(rates) - min(rates)) / m * 50 if m else float("nan")
                lines.append("| %s | %d | %s | %s | ±%.0f%% | %s | %.2f | %s |" % (
                    workload["name"], pipeline, row["label"], "{:,.0f}".format(m), spread,
                    fmt_ratio(m, anchor), us, fmt_ratio(anchor_us, us)))
    return "\n".join(lines + ["", "Server µs/call: the server's own time in the command (INFO "
                              "commandstats); its × anchor is the anchor's time over the row's "
                              "(above 1: faster than the anchor)."])


def instructions(calls):
    """Instructions per call inside processCommand (callgrind), each row on each workload: the
    workload prepared as for the runs, then `calls` calls counted, one client, -P 16."""
    if not shutil.which("valgrind"):
        return "(no valgrind: instructions per call not counted; scripts/install-deps installs it)"
    out_dir = tempfile.mkdtemp(prefix="rl-callgrind-")
    server = Server(wrapper=["valgrind", "--tool=callgrind",
                             "--callgrind-out-file=" + os.path.join(out_dir, "cg.out")],
                    ready_timeout=120, module=False)
    lines = ["| workload | command | instructions per call | × anchor |", "|---|---|---:|---:|"]
    try:
        shas = load(server.client)
        for index, workload in enumerate(WORKLOADS):
            anchor = None
            for row in ROWS:
                words = words_for(row, workload, shas)
                prepare(server, workload, words)
                n = min(calls, NEW_KEYS) if workload["fresh"] else calls
                per_call = counted(
                    server.proc.pid, out_dir,
                    lambda: benchmark(server, words, n, 16, workload["keys"], clients=1,
                                      csv=False),
                    n, "w%d" % index)
                count = per_call.get("???:processCommand", 0)
                anchor = anchor or count
                lines.append("| %s | %s | %s | %s |" % (workload["name"], row["label"],
                                                        "{:,.0f}".format(count),
                                                        fmt_ratio(anchor, count)))
                print("bench: callgrind %-36s %-40s %8.0f instructions per call"
                      % (workload["name"], row["label"], count), flush=True)
    finally:
        server.stop()
        shutil.rmtree(out_dir, ignore_errors=True)
    return "\n".join(lines + ["", "× anchor: the anchor's instructions over the row's (above 1: "
                              "fewer than the anchor's)."])


def bench_functions(header, store=None):
    """`store`: an operator's (benchkit/store.py) in place of a throwaway server; the
    instructions are then not counted (callgrind runs a server of ours under valgrind)."""
    quick = os.environ.get("BENCH_QUICK") == "1"
    repeat = max(1, int(os.environ.get("BENCH_REPEAT", "3")))
    started = time.monotonic()
    out = []
    if os.environ.get("BENCH_SKIP_THROUGHPUT") != "1":
        results = throughput(quick, repeat, store)
        out += ["", "Throughput (redis-benchmark -c %d, median of %d, interleaved; %s):"
                % (CLIENTS, repeat, "the store of --url" if store else "no module loaded"),
                "", throughput_table(results)]
    if store:
        out += ["", "Instructions per call: not counted with --url (callgrind runs a server of "
                "ours under valgrind)."]
    elif os.environ.get("BENCH_SKIP_CALLGRIND") != "1":
        out += ["", "Instructions per call (callgrind, inside processCommand):", "",
                instructions(2_000 if quick else 10_000)]
    if not store:
        # Calls past the hot path: FCALL against the scripts backend (general_path.py).
        runs = (general_path.times(repeat, quick)
                if os.environ.get("BENCH_SKIP_THROUGHPUT") != "1" else None)
        counts = (general_path.instructions(1_000 if quick else 3_000)
                  if os.environ.get("BENCH_SKIP_CALLGRIND") != "1" else None)
        if runs or counts:
            out += ["", "Past the hot path (server µs/call: redis-benchmark -c 4 -P 16 over %d "
                    "keys, median of %d; instructions: callgrind inside processCommand):"
                    % (general_path.KEYS, repeat), "", general_path.table(runs, counts)]
    out += ["", "(%.0f s; load average at the end: %s)" % (time.monotonic() - started,
                                                         load_snapshot())]
    print("\n".join(["", "=" * 100] + header + out))
    sys.stdout.flush()
