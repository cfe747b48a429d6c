#!/usr/bin/env bash
# test_openai.sh - run test_openai.py with the official `openai` Python package.
# The package comes from PyPI into a virtual environment under the build folder,
# made once (this is the test's set-up; the test itself downloads nothing).
# Usage: test_openai.sh H2OSERVE_BINARY VENV_DIR
set -eu
bin=$1
venv=$2
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import openai" 2>/dev/null; then
    /usr/bin/python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        -r "$here/requirements-openai.txt" >&2
fi
exec "$venv/bin/python" "$here/test_openai.py" "$bin"
