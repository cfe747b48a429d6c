#!/usr/bin/env bash
# .ci/readme.sh - the README's commands, literally, as a new user runs them: the
# repository is cloned into a new empty temporary folder (nothing beside it), and
# there the first two ```sh blocks of README.md ("Two commands") and the curl block
# of "Talking to it" run exactly as written:
#   - the test command must pass;
#   - the serve command must come up on 127.0.0.1:8000, answer the curl request with
#     HTTP 200 and a completion with non-empty text, and exit 0 on SIGTERM.
# The commands are read from README.md, not copied here, so they cannot drift.
#
# Usage: .ci/readme.sh   (from the repository to test). Exit 0 when all hold.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

# The n-th (1-based) ```sh block of README.md, joined into one line where a
# backslash continues it.
block() {
    awk -v want="$1" '
        /^```sh$/ { n++; inside = (n == want); next }
        /^```$/   { inside = 0; next }
        inside    { print }' "$repo/README.md" | sed -e ':a' -e '/\\$/N; s/\\\n//; ta'
}
serve_cmd=$(block 1)
test_cmd=$(block 2)
curl_cmd=$(block 3)
case "$serve_cmd|$test_cmd|$curl_cmd" in
*"h2oserve serve"*"|"*"meson test"*"|curl "*) ;;
*) echo "readme: README.md's first three sh blocks are not serve, test, curl:" \
        "'$serve_cmd' '$test_cmd' '$curl_cmd'" >&2
   exit 1 ;;
esac

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git clone -q "$repo" "$tmp/h2oserve" || exit 1
cd "$tmp/h2oserve" || exit 1
echo "readme: in an empty folder, $tmp/h2oserve"
status=0

echo "readme: \$ $test_cmd"
if bash -c "$test_cmd"; then
    echo "readme: the test command passed"
else
    echo "readme: FAILED: the test command"
    status=1
fi

echo "readme: \$ $serve_cmd"
bash -c "$serve_cmd" >serve.log 2>&1 &
shell=$!
up=""
for _ in $(seq 600); do
    kill -0 "$shell" 2>/dev/null || break
    curl -sf -m 5 http://127.0.0.1:8000/health >/dev/null 2>&1 && { up=1; break; }
    sleep 0.5
done
if [ -z "$up" ]; then
    echo "readme: FAILED: the serve command did not come up on 127.0.0.1:8000"
    tail -20 serve.log
    kill "$shell" 2>/dev/null
    exit 1
fi

echo "readme: \$ $curl_cmd"
out=$(bash -c "$curl_cmd -s -w '\nHTTP %{http_code}'")
code=${out##*HTTP }
body=${out%$'\n'HTTP *}
if [ "$code" = 200 ] && printf '%s' "$body" | python3 -c '
import json, sys
text = json.load(sys.stdin)["choices"][0]["text"]
sys.exit(0 if text.strip() else 1)'; then
    echo "readme: HTTP 200, text: $(printf '%s' "$body" | python3 -c 'import json,sys; print(repr(json.load(sys.stdin)["choices"][0]["text"]))')"
else
    echo "readme: FAILED: the curl request: HTTP $code: $body"
    status=1
fi

# SIGTERM to the server itself, whose status becomes the shell's: the shell's child,
# or the shell itself where bash exec'd the last command of the list.
server=""
if [ "$(cat "/proc/$shell/comm" 2>/dev/null)" = h2oserve ]; then
    server=$shell
else
    for p in /proc/[0-9]*; do
        read -r pid comm _ ppid _ <"$p/stat" 2>/dev/null || continue
        [ "$ppid" = "$shell" ] && [ "$comm" = "(h2oserve)" ] && server=$pid
    done
fi
if [ -z "$server" ]; then
    echo "readme: FAILED: no h2oserve process under the serve command"
    kill "$shell" 2>/dev/null
    exit 1
fi
kill -TERM "$server"
rc=0
wait "$shell" || rc=$?
if [ "$rc" -eq 0 ]; then
    echo "readme: the server exited 0 on SIGTERM"
else
    echo "readme: FAILED: the server exited $rc on SIGTERM"
    tail -20 serve.log
    status=1
fi
exit $status
