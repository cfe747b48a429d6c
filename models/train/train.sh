#!/usr/bin/env bash
# train.sh - the one command that trains the built-in `default` model (models/default).
# Installs the text packages (corpus.sh), makes a venv over Debian's python3-torch
# with the pinned tokenizers, builds the corpus and runs train_default.py. About an
# hour on 2 cores; run by hand, not by CI. Usage:
#   models/train/train.sh [--smoke] [train_default.py options, e.g. --minutes 60]
# Build products go to $H2O_TRAIN_BUILD (default build-model/ at the repository root).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${H2O_TRAIN_BUILD:-$root/build-model}"

if ! /usr/bin/python3 -c "import torch, venv" 2>/dev/null; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo -n"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        python3-torch python3-venv python3-pip >/dev/null
fi
venv="$build/venv"
stamp="$venv/.requirements"
if ! cmp -s "$here/requirements.txt" "$stamp" 2>/dev/null; then
    /usr/bin/python3 -m venv --system-site-packages "$venv"
    "$venv/bin/pip" install -q -r "$here/requirements.txt"
    cp "$here/requirements.txt" "$stamp"
fi

corpus="$build/corpus"
corpus_opts=()
for arg in "$@"; do
    if [ "$arg" = "--smoke" ]; then
        corpus="$build/corpus-smoke"
        corpus_opts=(--max-mb 2)
    fi
done
"$here/corpus.sh" "$corpus" "${corpus_opts[@]}"
exec "$venv/bin/python" "$here/train_default.py" --corpus "$corpus" "$@"
