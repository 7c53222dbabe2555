"""The parts of `scripts/bench` (its docstring documents the knobs):

  server.py       a minimal RESP client, the throwaway redis-server, a replica, INFO readers
  store.py        a store of yours from --url: redis-benchmark's flags, the client's TLS and AUTH
  lua.py          the Lua scripts a gateway runs without the module, and the Functions library
  report.py       the header's facts (machine, load, revision) and the figures' helpers
  throughput.py   part 1: redis-benchmark's table against INCR and the Lua scripts
  registry.py     the algorithm registry, read from the core, which the table's rows derive from
  memory.py       part 2: bytes per limiter key and per sliding-log entry
  propagation.py  parts 3 and 4: what a full sliding log and a key after a rollout propagate
  callgrind.py    `scripts/bench callgrind`: instructions per command
  concurrency.py  part 5: RL.CONCURRENCY's pair beside RL.GCRA and the sorted-set recipe

Standard library only: CI has nothing but python3.
"""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
