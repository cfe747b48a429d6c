#!/usr/bin/env bash
# test_chat_clients.sh - run test_chat_clients.py with the chat clients people use:
# the official `openai` package, LangChain's ChatOpenAI and litellm. They come from
# PyPI into a virtual environment under the build folder, made once (this is the
# test's set-up; the test itself downloads nothing).
# Usage: test_chat_clients.sh H2OSERVE_BINARY DATA_DIR VENV_DIR
set -eu
bin=$1
data=$2
venv=$3
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$venv/bin/python" ] ||
    ! "$venv/bin/python" -c "import openai, langchain_openai, litellm" 2>/dev/null; then
    /usr/bin/python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        -r "$here/requirements-chat.txt" >&2
fi
# litellm fetches a model price list from GitHub at import unless told to use its own.
export LITELLM_LOCAL_MODEL_COST_MAP=True
exec "$venv/bin/python" "$here/test_chat_clients.py" "$bin" "$data"
