"""pglib.py - a private PostgreSQL server for the integration tests, as
tests/lib/pg_testlib.c starts one for the unit tests: initdb in a temporary folder,
the server on a unix socket there (no TCP port), run as `nobody` when the tests run
as root (initdb and postgres refuse root), stopped and removed by stop().

Debian's postgresql puts the programs under /usr/lib/postgresql/<version>/bin
(H2O_PG_BINDIR overrides). Without them start() raises: a test that needs
PostgreSQL fails rather than skips (bootstrap.sh installs it).
"""
import glob
import os
import pwd
import shutil
import subprocess
import tempfile


class PgServer:
    def __init__(self, fsync=False):
        # fsync off by default: the tests check what a commit means, not the disk's
        # speed; a benchmark asks for the real thing.
        self.fsync = fsync
        self.bindir = os.environ.get("H2O_PG_BINDIR") or ""
        if not self.bindir:
            found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
            self.bindir = os.path.dirname(found[-1]) if found else ""
        if not os.access(os.path.join(self.bindir, "initdb"), os.X_OK):
            raise RuntimeError("PostgreSQL is not installed (no initdb under "
                               "/usr/lib/postgresql/*/bin); ./bootstrap.sh installs it")
        self.dir = tempfile.mkdtemp(prefix="h2o_pg.")
        self.as_user = []
        if os.geteuid() == 0:
            pw = pwd.getpwnam("nobody")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self.as_user = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}",
                            "--clear-groups"]
        self.data = os.path.join(self.dir, "data")
        self._run("initdb", "-D", self.data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
                  "--locale=C", "--no-sync")
        self.resume()
        self.n_db = 0

    def resume(self):
        """Start the server (again, after pause())."""
        self._run("pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "server.log"), "-w",
                  "-s", "-o", f"-k {self.dir} -c listen_addresses='' "
                  f"-c fsync={'on' if self.fsync else 'off'} -c max_connections=100",
                  "start")

    def pause(self):
        """Stop the server, keeping its data: a database outage (its clients'
        connections are cut; new ones are refused until resume())."""
        self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "-s", "stop")

    def _run(self, prog, *args):
        r = subprocess.run([*self.as_user, os.path.join(self.bindir, prog), *args],
                           cwd=self.dir, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{prog} failed: {r.stdout}{r.stderr}")

    def uri(self, db="postgres"):
        return f"postgresql:///{db}?host={self.dir}&user=postgres"

    def psql(self, sql, db="postgres"):
        """Run sql with psql; its output (unaligned, tuples only)."""
        psql = os.path.join(self.bindir, "psql")
        r = subprocess.run([psql, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql,
                            self.uri(db)], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"psql: {r.stderr}")
        return r.stdout.strip()

    def new_db(self):
        self.n_db += 1
        name = f"it{os.getpid()}_{self.n_db}"
        self.psql(f"CREATE DATABASE {name} ENCODING 'UTF8'")
        return self.uri(name), name

    def stop(self):
        try:
            self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-s", "stop")
        except RuntimeError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
