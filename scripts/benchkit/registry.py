"""The algorithm registry (the core crate's `algo::registry!`), as the benchmark derives its rows
from it: read from `$RL_REGISTRY` when set (the text itself, as tests/registry_lists.rs hands
it), else printed by the core's `registry` example (`cargo run -q -p redis-ratelimit-core
--example registry`: the core has no dependencies, so that builds in seconds)."""

import collections
import os
import subprocess

from . import ROOT

Listed = collections.namedtuple("Listed", "word id name tag burst limiter")


def parse(text):
    """One `Listed` per line: word, id, name, tag, `burst` or `-`, `limiter` or `shaper`."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        word, id_, name, tag, burst, kind = line.split("\t")
        out.append(Listed(word, id_, name, int(tag), burst == "burst", kind == "limiter"))
    return out


def load():
    text = os.environ.get("RL_REGISTRY")
    if text is None:
        text = subprocess.run(
            ["cargo", "run", "-q", "-p", "redis-ratelimit-core", "--example", "registry"],
            cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return parse(text)
