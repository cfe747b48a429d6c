#!/usr/bin/env bash
# corpus.sh - install the Debian packages whose English text the default model learns
# from (if missing), then build the corpus with corpus.py.
# Idempotent and non-interactive (root, or sudo without a prompt). Usage:
#   models/train/corpus.sh OUT_DIR [corpus.py options]
# Writes OUT_DIR/train.txt, OUT_DIR/heldout.txt and OUT_DIR/corpus.json.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: corpus.sh OUT_DIR [corpus.py options]}"
shift

pkgs=(python3.11-doc linux-doc fortunes fortunes-min)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "corpus.sh: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo -n"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
fi
exec /usr/bin/python3 "$here/corpus.py" --out "$out" "$@"
