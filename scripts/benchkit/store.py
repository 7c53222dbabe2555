"""An operator's store given as a URL (`scripts/bench --url URL`): the forms of the client's
connection layer (client/src/connection.rs) that name one server, as redis-benchmark's flags and
as the RESP client's TLS and AUTH. A Cluster and the master the sentinels name are refused:
redis-benchmark drives one server, so give that server's own URL.

The password reaches redis-benchmark as `-a` (it reads no environment variable for it), so it is
in that process's command line while a run lasts; nothing here prints it."""

import socket
import ssl
import subprocess
import urllib.parse

from .server import Client, RedisError

SCHEMES = ("redis", "rediss", "unix", "redis+unix")


class Settings:
    """One server: `host`/`port` or a Unix `socket`; `db`; `user`, `password`; TLS files."""

    def __init__(self):
        self.host, self.port, self.socket, self.db = None, 6379, None, 0
        self.user = self.password = None
        self.tls, self.ca, self.cert, self.key = False, None, None, None
        self.skip_hostname_verification = False

    def redacted(self):
        """Where the store is and as whom, never the password."""
        where = "unix:%s" % self.socket if self.socket else "%s:%d" % (self.host, self.port)
        return "%s%s%s, db %d%s" % (
            "TLS to " if self.tls else "", where,
            " as %s" % (self.user or "default") if self.password is not None or self.user else "",
            self.db, ", CA %s" % self.ca if self.ca else "")


def parse(url):
    """Settings from a URL; SystemExit naming what is wrong (never the password)."""
    scheme, sep, rest = url.strip().partition("://")
    scheme = scheme.lower()
    if not sep:
        raise SystemExit("bench: --url: not a URL (rediss://user:pass@host:port/?ca=ca.pem)")
    if scheme.endswith("+cluster") or scheme.endswith("+sentinel"):
        raise SystemExit("bench: --url: %s:// names a Cluster or the sentinels' master; "
                         "redis-benchmark drives one server: give that server's own URL" % scheme)
    if scheme not in SCHEMES:
        raise SystemExit("bench: --url: unknown scheme %s:// (%s)" % (scheme, ", ".join(SCHEMES)))
    s = Settings()
    s.tls = scheme == "rediss"
    rest, _, query = rest.partition("?")
    if scheme in ("unix", "redis+unix"):
        s.socket = urllib.parse.unquote(rest)
    else:
        authority, _, path = rest.partition("/")
        userinfo, at, hosts = authority.rpartition("@")
        if at:
            # As the client reads it: `user@`, `user:password@`, `:password@` (user default).
            user, colon, password = userinfo.partition(":")
            s.user = urllib.parse.unquote(user) or None
            if colon:
                s.password = urllib.parse.unquote(password)
        if "," in hosts:
            raise SystemExit("bench: --url: several hosts; redis-benchmark drives one server")
        host, colon, port = hosts.rpartition(":") if "]" not in hosts[-1:] else (hosts, "", "")
        if not colon:
            host, port = hosts, "6379"
        s.host = host.strip("[]") or "127.0.0.1"
        try:
            s.port = int(port)
        except ValueError:
            raise SystemExit("bench: --url: the port %r is not a number" % port) from None
        if path.strip("/"):
            s.db = db_number(path.strip("/"))
    for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if key == "db":
            s.db = db_number(value)
        elif key in ("ca", "cert", "key"):
            setattr(s, key, value)
        elif key == "skip_hostname_verification":
            s.skip_hostname_verification = value in ("true", "1", "yes")
        elif key == "user":
            s.user = value
        elif key == "password":
            s.password = value
        elif key not in ("sentinel_user", "sentinel_password"):
            raise SystemExit("bench: --url: unknown parameter %r" % key)
    if (s.ca or s.cert or s.key) and not s.tls:
        raise SystemExit("bench: --url: ca=, cert= and key= need rediss://")
    if bool(s.cert) != bool(s.key):
        raise SystemExit("bench: --url: cert= and key= go together")
    if s.user and s.password is None:
        raise SystemExit("bench: --url: the user %s has no password (user:password@); "
                         "redis-benchmark's --user needs one" % s.user)
    return s


def db_number(text):
    if not text.isdigit():
        raise SystemExit("bench: --url: the database %r is not a number" % text)
    return int(text)


def benchmark_flags(s):
    """redis-benchmark's flags that reach the store `s`."""
    flags = ["-s", s.socket] if s.socket else ["-h", s.host, "-p", str(s.port)]
    if s.tls:
        # hiredis checks the chain against --cacert (without it, the system's roots) and sends
        # the host as SNI; it has no switch for hostname verification alone.
        flags += ["--tls", "--sni", s.host]
        if s.ca:
            flags += ["--cacert", s.ca]
        if s.cert:
            flags += ["--cert", s.cert, "--key", s.key]
    if s.user:
        flags += ["--user", s.user]
    if s.password is not None:
        flags += ["-a", s.password]
    if s.db:
        flags += ["--dbnum", str(s.db)]
    return flags


def tls_supported():
    """Whether this machine's redis-benchmark was built with TLS (its --help lists --tls)."""
    out = subprocess.run(["redis-benchmark", "--help"], capture_output=True, text=True,
                         timeout=10)
    return "--tls" in out.stdout + out.stderr


class External:
    """The operator's store in place of a throwaway `Server`: no process of ours (so no CPU
    figures), and never FLUSHALL — `flush` deletes the bench's own keys (`bench:*`) only."""

    proc = None

    def __init__(self, settings):
        self.settings = settings
        self.client = connect(settings)

    def bench_args(self):
        return benchmark_flags(self.settings)

    def flush(self):
        cursor = "0"
        while True:
            cursor, keys = self.client("SCAN", cursor, "MATCH", "bench:*", "COUNT", 1000)
            if keys:
                self.client("UNLINK", *keys)
            if cursor == "0":
                return

    def stop(self):
        self.client.sock.close()


def connect(s):
    try:
        if s.socket:
            sock = socket.socket(socket.AF_UNIX)
            sock.settimeout(60)
            sock.connect(s.socket)
        else:
            sock = socket.create_connection((s.host, s.port), timeout=60)
            if s.tls:
                ctx = ssl.create_default_context(cafile=s.ca)
                ctx.check_hostname = not s.skip_hostname_verification
                if s.cert:
                    ctx.load_cert_chain(s.cert, s.key)
                sock = ctx.wrap_socket(sock, server_hostname=s.host)
    except (OSError, ssl.SSLError) as e:
        raise SystemExit("bench: --url %s: %s" % (s.redacted(), e)) from None
    c = Client(sock=sock)
    try:
        if s.password is not None:
            c("AUTH", *([s.user] if s.user else []), s.password)
        if s.db:
            c("SELECT", s.db)
        c("PING")
    except RedisError as e:
        raise SystemExit("bench: --url %s: %s" % (s.redacted(), e)) from None
    return c
