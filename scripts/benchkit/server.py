"""A minimal RESP2 client and the throwaway redis-server with the module (optionally with a
replica), on free 127.0.0.1 ports, with the INFO readers the tables use."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from . import ROOT

MODULE = os.environ.get(
    "BENCH_MODULE", os.path.join(ROOT, "target", "release", "libredis_ratelimit.so")
)
HOST = "127.0.0.1"
# More load arguments for the module, e.g. BENCH_MODULE_ARGS="CELL-COMPAT yes".
MODULE_ARGS = os.environ.get("BENCH_MODULE_ARGS", "").split()


class RedisError(Exception):
    pass


class Client:
    def __init__(self, port=None, timeout=60, sock=None):
        """To 127.0.0.1:`port`, or over `sock` (an operator's store: benchkit/store.py)."""
        self.sock = sock or socket.create_connection((HOST, port), timeout=timeout)
        self.buf = b""

    def __call__(self, *words):
        self.sock.sendall(resp(*words))
        reply = self._reply()
        if isinstance(reply, RedisError):
            raise reply
        return reply

    def pipeline(self, commands):
        """Sends every command at once, then reads the replies in order (errors as values)."""
        self.sock.sendall(b"".join(resp(*words) for words in commands))
        return [self._reply() for _ in commands]

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RedisError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n).decode(errors="replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RedisError("unexpected reply %r" % line)


def resp(*words):
    """One command in the wire format (for the client and for `redis-cli --pipe`)."""
    out = [b"*%d\r\n" % len(words)]
    for w in words:
        w = w if isinstance(w, bytes) else str(w).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(w), w))
    return b"".join(out)


# The throwaway server.

def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Server:
    """redis-server with the module (without it when `module` is False: a managed service's
    server, for the Functions library), on a free loopback port, in a temporary directory."""

    def __init__(self, module_args=(), wrapper=(), ready_timeout=20, appendonly=False,
                 module=True):
        self.dir = tempfile.mkdtemp(prefix="rl-bench-")
        self.port = free_port()
        args = list(wrapper) + [
            "redis-server", "--port", str(self.port), "--bind", HOST, "--dir", self.dir,
            "--save", "", "--logfile", "redis.log", "--enable-debug-command", "yes",
        ]
        if appendonly:
            # Every propagated byte reaches the file at once (no fsync to wait behind), and no
            # rewrite replaces the file while it is measured.
            args += ["--appendonly", "yes", "--appendfsync", "no",
                     "--auto-aof-rewrite-percentage", "0"]
        else:
            args += ["--appendonly", "no"]
        if module:
            args += ["--loadmodule", MODULE, *module_args, *MODULE_ARGS]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     cwd=self.dir)
        deadline = time.monotonic() + ready_timeout
        while True:
            try:
                c = Client(self.port, timeout=5)
                if c("PING") == "PONG":
                    self.client = c
                    break
            except (OSError, RedisError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = self.log()
                self.stop()
                sys.exit("bench: redis-server did not start on port %d\n%s" % (self.port, log))
            time.sleep(0.1)

    def bench_args(self):
        """redis-benchmark's flags that reach this server."""
        return ["-h", HOST, "-p", str(self.port)]

    def flush(self):
        self.client("FLUSHALL")

    def log(self):
        try:
            with open(os.path.join(self.dir, "redis.log")) as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            try:
                Client(self.port, timeout=5)("SHUTDOWN", "NOSAVE")
            except (OSError, RedisError, ConnectionError):
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


def attach_replica(master):
    """A second server (with the module, which it needs to apply the effects) replicating
    `master` over loopback, once its initial sync is done. The master keeps a replica that falls
    behind instead of dropping it (no output-buffer limit): the runs measure propagation, not
    resynchronisation."""
    master.client("CONFIG", "SET", "client-output-buffer-limit", "replica 0 0 0")
    replica = Server()
    replica.client("REPLICAOF", HOST, master.port)
    deadline = time.monotonic() + 60
    while info_fields(replica.client, "replication").get("master_link_status") != "up":
        if time.monotonic() > deadline:
            replica.stop()
            sys.exit("bench: the replica did not connect\n%s" % replica.log())
        time.sleep(0.1)
    return replica


def replica_caught_up(master, timeout_ms=60_000):
    """Waits until the replica has acknowledged everything the master sent; False if it did not
    within the timeout or is no longer connected."""
    return master.client("WAIT", 1, timeout_ms) == 1


def info_fields(c, section):
    fields = {}
    for line in c("INFO", section).splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            fields[k] = v
    return fields


def commandstats(c):
    """{command: (calls, usec)} from INFO commandstats."""
    stats = {}
    for k, v in info_fields(c, "commandstats").items():
        parts = dict(p.split("=", 1) for p in v.split(","))
        stats[k[len("cmdstat_"):].lower()] = (int(parts["calls"]), int(parts["usec"]))
    return stats


def process_cpu_seconds(pid):
    """User + system CPU time of a process so far (Linux /proc), NaN elsewhere and for an
    operator's store (`pid` None: not our process)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return float("nan")
