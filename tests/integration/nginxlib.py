"""nginxlib.py - the deployment of docs/deploy.md for the integration tests: h2oserve
replicas on one job store, each on a fixed port, and nginx in front of them with the
committed configuration (deploy/nginx/h2oserve.conf) filled in; Deployment puts the
three together on a private PostgreSQL (pglib.py).

nginx runs unprivileged in a temporary folder that holds everything it writes (pid,
logs, the *_temp_path folders), on 127.0.0.1 and a free port; as `nobody` when the
tests run as root, as pglib.py runs PostgreSQL. stop() stops it and removes the
folder. nginx is the one on PATH, else /usr/sbin/nginx (Debian's), or $H2O_NGINX.
Without it, Nginx() raises: a test that needs it fails rather than skips
(bootstrap.sh installs it).
"""
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from pglib import PgServer
from test_server import BIN, Endpoint, Server, tap

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy",
                        "nginx", "h2oserve.conf")

# What the test adds around the committed file: nginx's main context, and the http
# context's paths, which Debian's build points under /var (not ours to write).
MAIN_CONF = """\
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log info;
events {{ worker_connections 512; }}
http {{
    client_body_temp_path {dir}/client_body_temp;
    proxy_temp_path {dir}/proxy_temp;
    fastcgi_temp_path {dir}/fastcgi_temp;
    uwsgi_temp_path {dir}/uwsgi_temp;
    scgi_temp_path {dir}/scgi_temp;
    include {dir}/h2oserve.conf;
}}
"""


def free_ports(n):
    """n distinct ports free on 127.0.0.1 now, below the kernel's ephemeral range
    where it has one: a killed replica's port is then not handed out as the source
    port of some connection while the replica is down, so it can come back on it.
    (Held together while chosen, so none repeats; another process that binds fixed
    ports may still take one before it is used.)"""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    rng = random.Random()
    socks = []
    try:
        for _ in range(200):
            if len(socks) == n:
                break
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", rng.randrange(10000, low) if low > 11000 else 0))
                socks.append(s)
            except OSError:
                s.close()
        while len(socks) < n:  # no luck below the range: let the kernel choose
            socks.append(socket.socket())
            socks[-1].bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def render(template, listen, replicas, log_dir):
    """The template filled in: each @REPLICA@ line once per replica ("host:port")."""
    out = []
    for line in template.splitlines(keepends=True):
        if "@REPLICA@" in line:
            out += [line.replace("@REPLICA@", r) for r in replicas]
        else:
            out.append(line.replace("@LISTEN@", listen).replace("@LOG_DIR@", log_dir))
    return "".join(out)


class Nginx(Endpoint):
    def __init__(self, replicas):
        """nginx in front of `replicas` ("127.0.0.1:PORT" each), once it accepts."""
        self.bin = (os.environ.get("H2O_NGINX") or shutil.which("nginx")
                    or "/usr/sbin/nginx")
        if not os.access(self.bin, os.X_OK):
            raise RuntimeError(f"nginx is not installed ({self.bin}: not found); "
                               "./bootstrap.sh installs it")
        self.dir = tempfile.mkdtemp(prefix="h2o_nginx.")
        as_user = []
        if os.geteuid() == 0:
            pw = pwd.getpwnam("nobody")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            as_user = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}",
                       "--clear-groups"]
        self.port = free_ports(1)[0]
        with open(TEMPLATE) as f:
            conf = render(f.read(), f"127.0.0.1:{self.port}", replicas, self.dir)
        with open(os.path.join(self.dir, "h2oserve.conf"), "w") as f:
            f.write(conf)
        main = os.path.join(self.dir, "nginx.conf")
        with open(main, "w") as f:
            f.write(MAIN_CONF.format(dir=self.dir))
        # -e: the log of the start itself, before the configuration names one.
        self.proc = subprocess.Popen(
            [*as_user, self.bin, "-p", self.dir, "-c", main, "-e",
             os.path.join(self.dir, "error.log"), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 20
        while time.time() < deadline and self.proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        err = self.proc.stderr.read() if self.proc.poll() is not None else "(no answer)"
        log = self.error_log()
        self.stop()
        raise RuntimeError(f"nginx did not start: {err}{log}")

    def _read(self, name):
        try:
            with open(os.path.join(self.dir, name)) as f:
                return f.read()
        except OSError:
            return ""

    def error_log(self):
        return self._read("error.log")

    def access_log(self):
        """The access log's lines (deploy/nginx/h2oserve.conf's h2oserve format)."""
        return self._read("h2oserve.access.log").splitlines()

    def stop(self):
        """Fast shutdown (SIGTERM), then the folder goes. Returns nginx's exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc


class Replicas:
    """n servers (test_server.Server: dummy:tiny and the tests' defaults) on one job
    store, each on its own fixed port, so that a replica killed and started again is
    where nginx expects it."""

    def __init__(self, n, job_store, *extra):
        self.args = ("--job-store", job_store, *extra)
        self.ports = free_ports(n)
        self.srv = []
        try:
            for p in self.ports:
                self.srv.append(Server(*self.args, port=p))
        except Exception:
            self.stop()
            raise

    def addrs(self):
        return [f"127.0.0.1:{p}" for p in self.ports]

    def kill(self, i):
        """kill -9 replica i (its requests in flight are lost, as in a crash)."""
        self.srv[i].kill()

    def start(self, i):
        """Start replica i again on its port (after kill)."""
        self.srv[i] = Server(*self.args, port=self.ports[i])

    def stop(self):
        """SIGTERM to each; their exit statuses (one that had ended already, killed and
        not started again or crashed, gives the status it ended with)."""
        return [s.stop() if s.proc.poll() is None else s.proc.returncode for s in self.srv]


class Deployment:
    """A private PostgreSQL (pglib.PgServer), n replicas on one database of it
    (Replicas), nginx in front of them (Nginx)."""

    def __init__(self, n, *extra):
        self.pg = PgServer()
        self.replicas = self.nginx = None
        try:
            self.uri, self.db = self.pg.new_db()
            self.replicas = Replicas(n, self.uri, *extra)
            self.nginx = Nginx(self.replicas.addrs())
        except Exception:
            self._stop()
            raise

    def _stop(self):
        rc_nginx = self.nginx.stop() if self.nginx else None
        rcs = self.replicas.stop() if self.replicas else []
        self.pg.stop()
        return rc_nginx, rcs

    def stop(self):
        """Stop nginx, the replicas and PostgreSQL, as a TAP check that nginx and the
        replicas exit 0."""
        rc_nginx, rcs = self._stop()
        tap(rc_nginx == 0 and all(rc == 0 for rc in rcs),
            "nginx and the replicas stop cleanly", (rc_nginx, rcs))
