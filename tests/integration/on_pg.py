#!/usr/bin/env python3
"""on_pg.py - run an integration test with every server's job store in PostgreSQL:
start a private server (pglib.py), run TEST.py with H2O_TEST_PG_HOST set (which
test_server.Server turns into --job-store, one database per data dir), stop the
server. The test's TAP output and exit status are its own.

Usage: on_pg.py TEST.py H2OSERVE_BINARY [ARGS...]
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pglib import PgServer  # noqa: E402


def main():
    pg = PgServer()
    try:
        env = dict(os.environ, H2O_TEST_PG_HOST=pg.dir, H2O_TEST_PG_BINDIR=pg.bindir)
        return subprocess.run([sys.executable, *sys.argv[1:]], env=env).returncode
    finally:
        pg.stop()


if __name__ == "__main__":
    sys.exit(main())
