"""`scripts/bench callgrind`: the instructions the server spends per command (valgrind's
callgrind, collecting inside processCommand)."""

import os
import shutil
import subprocess
import sys
import tempfile

from .lua import load_scripts, with_shas
from .server import HOST, Server
from .throughput import KEYSPACE

def callgrind(argv):
    n, top, keyspace, setup = 20_000, 0, KEYSPACE, []
    while len(argv) >= 2 and argv[0] in ("-n", "--top", "-r", "--setup"):
        if argv[0] == "-n":
            n = int(argv[1])
        elif argv[0] == "-r":
            keyspace = int(argv[1])
        elif argv[0] == "--setup":
            # Run once after each FLUSHALL, before the warm-up (e.g. RL.SHARE on the key).
            setup.append(argv[1].split())
        else:
            top = int(argv[1])
        argv = argv[2:]
    if not argv or not shutil.which("valgrind"):
        sys.exit("usage: scripts/bench callgrind [-n N] [-r KEYSPACE] [--top K] [--setup 'CMD']"
                 " 'CMD ARGS' ...  (needs valgrind)")
    out_dir = tempfile.mkdtemp(prefix="rl-callgrind-")
    out = os.path.join(out_dir, "cg.out")
    server = Server(wrapper=["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out],
                    ready_timeout=120)
    pid = server.proc.pid
    # The Lua rows' scripts ({sha:NAME} in a command) and the library, as the table has them.
    shas = load_scripts(server.client)
    try:
        for index, text in enumerate(argv, 1):
            text = with_shas(text, shas)
            words = text.split()
            server.client("FLUSHALL")
            for words_ in setup:
                server.client(*words_)
            # Warm up (first-touch costs, dict growth), then count n calls.
            subprocess.run(["redis-benchmark", "-h", HOST, "-p", str(server.port), "-c", "1",
                            "-P", "16", "-n", str(min(n, 2000)), "-r", str(keyspace), "-q"]
                           + words, capture_output=True, timeout=600, check=True)
            subprocess.run(["callgrind_control", "--zero", str(pid)], capture_output=True,
                           timeout=60, check=True)
            subprocess.run(["redis-benchmark", "-h", HOST, "-p", str(server.port), "-c", "1",
                            "-P", "16", "-n", str(n), "-r", str(keyspace), "-q"] + words,
                           capture_output=True, timeout=1200, check=True)
            subprocess.run(["callgrind_control", "--dump=" + words[0], str(pid)],
                           capture_output=True, timeout=60, check=True)
            dumps = sorted((f for f in os.listdir(out_dir) if f.startswith("cg.out.")),
                           key=lambda f: os.path.getmtime(os.path.join(out_dir, f)))
            keep = os.path.join(out_dir, "%d.%s.callgrind" % (index, words[0].lower()))
            os.rename(os.path.join(out_dir, dumps[-1]), keep)
            per_call = inclusive(keep, n)
            print("%-46s %6.0f instructions per call in processCommand, %6.0f in the whole server"
                  " (%s)" % (text, per_call.get("???:processCommand", 0), per_call["total"], keep),
                  flush=True)
            for fn, count in sorted(per_call.items(), key=lambda kv: -kv[1])[:top]:
                if fn != "total":
                    print("    %8.0f  %s" % (count, fn[:110]))
    finally:
        server.stop()


def counted(pid, out_dir, run, calls, tag):
    """Inclusive instructions per call ({function: count}, plus "total") of `run()`, which makes
    `calls` calls to the server `pid` running under callgrind with its dumps in `out_dir`:
    counters zeroed, run, dumped as `tag`, the newest dump read."""
    subprocess.run(["callgrind_control", "--zero", str(pid)], capture_output=True, timeout=60,
                   check=True)
    run()
    subprocess.run(["callgrind_control", "--dump=" + tag, str(pid)], capture_output=True,
                   timeout=60, check=True)
    dumps = sorted((f for f in os.listdir(out_dir) if f.startswith("cg.out.")),
                   key=lambda f: os.path.getmtime(os.path.join(out_dir, f)))
    return inclusive(os.path.join(out_dir, dumps[-1]), calls)


def inclusive(path, n):
    """{function: inclusive instructions per call} from a callgrind dump, plus "total"."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                         capture_output=True, text=True, timeout=120).stdout
    per_call = {}
    for line in out.splitlines():
        words = line.split()
        if len(words) < 3 or not words[0].replace(",", "").isdigit():
            continue
        count = int(words[0].replace(",", "")) / n
        if "PROGRAM" in line:
            per_call["total"] = count
            continue
        fn = words[-2] if words[-1].startswith("[") else words[-1]
        if fn.startswith(("./csu", "???:(below", "???:0x", "???:main", "???:aeMain")):
            continue
        per_call[fn] = max(per_call.get(fn, 0), count)
    return per_call
