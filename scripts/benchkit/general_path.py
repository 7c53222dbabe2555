"""`make bench-functions`' last table: calls past the hot path. These are the functions without
one, and the calls a hot path hands on. Each runs as FCALL and as the scripts backend's EVALSHA of
the script generated for the function, on one server without the module. The table gives the
server's time per call (INFO commandstats: median of the runs, interleaved) and the instructions
per call (callgrind). Through FCALL the library was built when it loaded; a script builds its
share of it again on every such call (docs/functions.md, past the hot path)."""

import os
import shutil
import subprocess
import tempfile

from .callgrind import counted
from .lua import LIBRARY, library_script
from .report import median
from .server import Server, commandstats

KEYS = 200

# (label, function, keys and arguments); __rand_int__ is one of KEYS keys (or holder ids).
CASES = [
    ("rl_gcra 10 1000 burst 10 (the general path)", "rl_gcra",
     "1 k:__rand_int__ 10 1000 burst 10"),
    ("rl_slidinglog 100 60000", "rl_slidinglog", "1 k:__rand_int__ 100 60000"),
    ("rl_fixedwindow 100 60000", "rl_fixedwindow", "1 k:__rand_int__ 100 60000"),
    ("rl_lease 100 60000 WANT 10", "rl_lease", "1 k:__rand_int__ 100 60000 WANT 10"),
    ("rl_peek on an empty key", "rl_peek", "1 k:__rand_int__"),
    ("rl_concurrency 10 60000 ACQUIRE id", "rl_concurrency",
     "1 k:__rand_int__ 10 60000 ACQUIRE __rand_int__"),
    ("rl_all over two GCRA keys", "rl_all",
     "2 a:__rand_int__ b:__rand_int__ GCRA 100 1000 GCRA 100 1000"),
]


def load(c):
    """Loads the library and each case's script; {function: SHA}."""
    with open(LIBRARY) as f:
        source = f.read()
    c("FUNCTION", "LOAD", "REPLACE", source)
    return {fn: c("SCRIPT", "LOAD", library_script(source, fn)) for _, fn, _ in CASES}


def words(kind, fn, args, shas):
    return (["FCALL", fn] if kind == "FCALL" else ["EVALSHA", shas[fn]]) + args.split()


def run(server, words_, n, clients):
    subprocess.run(["redis-benchmark", *server.bench_args(), "-c", str(clients), "-P", "16",
                    "-n", str(n), "-r", str(KEYS), "-q"] + words_,
                   capture_output=True, timeout=900, check=True)


def times(repeat, quick):
    """{(label, kind): [µs per call, one per run]}."""
    server = Server(module=False)
    n = 4_000 if quick else 20_000
    out = {}
    try:
        shas = load(server.client)
        for _ in range(repeat):
            for label, fn, args in CASES:
                for kind in ("FCALL", "EVALSHA"):
                    server.flush()
                    command = kind.lower()
                    before = commandstats(server.client).get(command, (0, 0))
                    run(server, words(kind, fn, args, shas), n, 4)
                    after = commandstats(server.client).get(command, (0, 0))
                    calls, usec = after[0] - before[0], after[1] - before[1]
                    us = usec / calls if calls else float("nan")
                    out.setdefault((label, kind), []).append(us)
    finally:
        server.stop()
    return out


def instructions(calls):
    """{(label, kind): instructions per call inside processCommand}, or None without valgrind."""
    if not shutil.which("valgrind"):
        return None
    out_dir = tempfile.mkdtemp(prefix="rl-callgrind-")
    server = Server(wrapper=["valgrind", "--tool=callgrind",
                             "--callgrind-out-file=" + os.path.join(out_dir, "cg.out")],
                    ready_timeout=120, module=False)
    out = {}
    try:
        shas = load(server.client)
        for index, (label, fn, args) in enumerate(CASES):
            for kind in ("FCALL", "EVALSHA"):
                w = words(kind, fn, args, shas)
                server.flush()
                run(server, w, calls // 2, 2)
                per_call = counted(server.proc.pid, out_dir, lambda: run(server, w, calls, 1),
                                   calls, "g%d" % index)
                out[(label, kind)] = per_call.get("???:processCommand", 0)
                print("bench: callgrind %-44s %-8s %8.0f instructions per call"
                      % (label, kind, out[(label, kind)]), flush=True)
    finally:
        server.stop()
        shutil.rmtree(out_dir, ignore_errors=True)
    return out


def table(time_runs, counts):
    lines = ["| call | FCALL µs/call | scripts backend µs/call | × FCALL "
             "| FCALL instructions | scripts backend instructions | × FCALL |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for label, _, _ in CASES:
        f = median(time_runs.get((label, "FCALL"), [])) if time_runs else float("nan")
        s = median(time_runs.get((label, "EVALSHA"), [])) if time_runs else float("nan")
        fi = (counts or {}).get((label, "FCALL"), float("nan"))
        si = (counts or {}).get((label, "EVALSHA"), float("nan"))
        lines.append("| %s | %.1f | %.1f | %.1f | %s | %s | %.1f |" % (
            label, f, s, s / f if f else float("nan"), "{:,.0f}".format(fi),
            "{:,.0f}".format(si), si / fi if fi else float("nan")))
    return "\n".join(lines + ["", "× FCALL: the scripts backend's over FCALL's (above 1: "
                              "slower than FCALL)."])
