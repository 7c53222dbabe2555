"""What the report's header says about the run (machine, load, revision) and the helpers the
tables share."""

import os
import platform
import statistics
import subprocess

from . import ROOT


def load_snapshot():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def machine():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "%d cores, %s, %s" % (os.cpu_count() or 0, model, platform.platform())


def git_rev():
    try:
        return subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def fmt_ratio(a, b):
    return "%.2f" % (a / b) if b and b == b and a == a else "—"
