#!/usr/bin/env bash
# test_cli.sh - the h2oserve binary from the outside: generate and tokenize on the
# built-in and golden models, and clean one-line errors (exit status 1 or 2, no
# crash) for bad models, bad checkpoints and bad flags. TAP output.
set -u
bin=$1
data=$2
n=0
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }

# expect NAME WANT_STATUS STDERR_PATTERN -- command...
expect() {
    local name=$1 want=$2 pat=$3
    shift 4
    "$@" >"$tmp/out" 2>"$tmp/err"
    local st=$?
    if [ "$st" -eq "$want" ] && grep -Eq -- "$pat" "$tmp/err"; then
        ok "$name"
    else
        not_ok "$name" "exit $st (want $want)" "stderr: $(head -c 400 "$tmp/err")"
    fi
}

# Generation on the dummy model prints text and the diagnostics line.
expect "generate dummy:tiny" 0 "generated tokens" -- \
    "$bin" generate --model dummy:tiny --prompt "Hello" --max-tokens 8 --temperature 0 --dtype fp32
[ -s "$tmp/out" ] && ok "generate printed a completion" || not_ok "generate printed a completion"

# Same seed, same text; temperature 0 is deterministic too.
"$bin" generate --model dummy:tiny --prompt "abc" --max-tokens 12 --seed 7 --dtype fp32 >"$tmp/a" 2>/dev/null
"$bin" generate --model dummy:tiny --prompt "abc" --max-tokens 12 --seed 7 --dtype fp32 >"$tmp/b" 2>/dev/null
cmp -s "$tmp/a" "$tmp/b" && ok "same seed, same completion" || not_ok "same seed, same completion"

# --kv-cache-dtype int8: the same command runs, and says what the cache stores; a
# dtype that is not one of the choices is refused naming them.
expect "generate --kv-cache-dtype int8" 0 "KV cache int8" -- \
    "$bin" generate --model dummy:tiny --prompt "Hello" --max-tokens 8 --temperature 0 \
    --dtype fp32 --kv-cache-dtype int8 --kv-policy h2o --h2o-heavy 2 --h2o-recent 2 \
    --kv-min-budget 0
[ -s "$tmp/out" ] && ok "int8 KV generate printed a completion" \
    || not_ok "int8 KV generate printed a completion"
expect "generate --kv-cache-dtype fp8 names the choices" 2 \
    "kv-cache-dtype wants auto, fp32, bf16 or int8" -- \
    "$bin" generate --model dummy:tiny --prompt "Hello" --kv-cache-dtype fp8

# Several prompts: one line each.
"$bin" generate --model dummy:tiny --prompt "a" --prompt "bb" --prompt "ccc" --max-tokens 4 \
    --temperature 0 --dtype fp32 >"$tmp/out" 2>/dev/null
[ "$(wc -l <"$tmp/out")" -eq 3 ] && ok "three prompts, three completions" \
    || not_ok "three prompts, three completions" "$(cat "$tmp/out")"

# --prompts-file and the KV flags: one completion per line, KV stats on stderr.
printf 'first prompt\n\nsecond prompt\nthird\n' >"$tmp/prompts.txt"
"$bin" generate --model dummy:tiny --prompts-file "$tmp/prompts.txt" --max-tokens 20 \
    --temperature 0 --dtype fp32 --kv-policy h2o --h2o-heavy 2 --h2o-recent 3 --kv-min-budget 0 \
    >"$tmp/out" 2>"$tmp/err"
[ "$(wc -l <"$tmp/out")" -eq 3 ] && ok "prompts file, three completions" \
    || not_ok "prompts file, three completions" "$(cat "$tmp/out")"
grep -q "kv h2o H=2 R=3 (floor 0): 5 slots per head, 1 blocks" "$tmp/err" && grep -q "tokens evicted" "$tmp/err" \
    && ok "per-sequence KV stats" || not_ok "per-sequence KV stats" "$(cat "$tmp/err")"

# The default floor: the README's short prompt under the default policy (h2o 20%,
# floor 128) keeps every token, so its greedy text is exactly full's; without the
# floor the 20% budget (a few tokens) is what made it repeat itself.
"$bin" generate --prompt 'The Linux kernel' --max-tokens 24 --temperature 0 --dtype fp32 \
    >"$tmp/dflt" 2>"$tmp/err"
"$bin" generate --prompt 'The Linux kernel' --max-tokens 24 --temperature 0 --dtype fp32 \
    --kv-policy full >"$tmp/full" 2>/dev/null
if [ -s "$tmp/full" ] && cmp -s "$tmp/dflt" "$tmp/full" \
    && grep -q "kv h2o H=14 R=14 (floor 128): 27 slots per head.*, 0 tokens evicted" "$tmp/err"; then
    ok "a request under the floor gives full's greedy text"
else
    not_ok "a request under the floor gives full's greedy text" "$(cat "$tmp/dflt")" \
        "$(cat "$tmp/full")" "$(cat "$tmp/err")"
fi
"$bin" generate --prompt 'The Linux kernel' --max-tokens 24 --temperature 0 --dtype fp32 \
    --kv-min-budget 0 >"$tmp/nofloor" 2>"$tmp/err"
grep -q "kv h2o H=3 R=3 (floor 0)" "$tmp/err" && ! cmp -s "$tmp/nofloor" "$tmp/full" \
    && ok "--kv-min-budget 0 runs the bare 20% budget" \
    || not_ok "--kv-min-budget 0 runs the bare 20% budget" "$(cat "$tmp/nofloor")" "$(cat "$tmp/err")"
expect "local policy" 0 "kv local H=0" -- \
    "$bin" generate --model dummy:tiny --prompt "abc" --max-tokens 30 --kv-policy local --dtype fp32
expect "full policy" 0 "kv full" -- \
    "$bin" generate --model dummy:tiny --prompt "abc" --max-tokens 30 --kv-policy full --dtype fp32
expect "bad kv policy" 2 "--kv-policy" -- "$bin" generate --model dummy:tiny --prompt x --kv-policy lru
expect "recent below 1" 2 "--h2o-recent" -- "$bin" generate --model dummy:tiny --prompt x --h2o-recent 0
# Tensor parallelism and devices: TP=2 gives TP=1's greedy text; a bad split, a bad
# device name, and --device cuda where no GPU (or no CUDA build) is, fail cleanly.
"$bin" generate --model dummy:tiny --prompt "abc" --max-tokens 16 --temperature 0 --dtype fp32 \
    >"$tmp/tp1" 2>/dev/null
"$bin" generate --model dummy:tiny --prompt "abc" --max-tokens 16 --temperature 0 --dtype fp32 \
    --tensor-parallel 2 >"$tmp/tp2" 2>/dev/null
cmp -s "$tmp/tp1" "$tmp/tp2" && [ -s "$tmp/tp1" ] && ok "tensor parallel 2, same text" \
    || not_ok "tensor parallel 2, same text" "$(cat "$tmp/tp1")" "$(cat "$tmp/tp2")"
expect "tensor parallel 3 on 4 heads" 1 "not all divisible by 3 ranks" -- \
    "$bin" generate --model dummy:tiny --prompt x --tensor-parallel 3
expect "bad device" 2 "--device wants cpu, cuda or auto" -- \
    "$bin" generate --model dummy:tiny --prompt x --device gpu
if [ ! -e /dev/nvidiactl ]; then
    expect "cuda without a GPU" 1 "CUDA|cuda" -- \
        "$bin" generate --model dummy:tiny --prompt x --device cuda
    expect "auto without a GPU runs on the CPU" 0 "generated tokens" -- \
        "$bin" generate --model dummy:tiny --prompt x --device auto --max-tokens 2
fi
expect "missing prompts file" 1 "nope.txt" -- "$bin" generate --model dummy:tiny --prompts-file "$tmp/nope.txt"

# --prompt-ids / --print-ids: ids in, ids out. transformers' own greedy tokens for the
# golden model's prompts (golden.json, written by tests/data/make_golden.py) come back
# exactly; a text prompt and its ids (as tokenize gives them) generate the same.
golden_args=$(python3 -c '
import json, sys
g = json.load(open(sys.argv[1]))
for p in g["prompts"]:
    print("--prompt-ids", json.dumps(p["tokens"], separators=(",", ":")))
' "$data/golden/tiny-opt/golden.json")
python3 -c '
import json, sys
for p in json.load(open(sys.argv[1]))["prompts"]:
    print(json.dumps(p["decode_tokens"]))
' "$data/golden/tiny-opt/golden.json" >"$tmp/want_ids"
# shellcheck disable=SC2086 # golden_args is flag/value pairs without spaces inside
"$bin" generate --model "$data/golden/tiny-opt" $golden_args --max-tokens 20 \
    --temperature 0 --dtype fp32 --kv-policy full --ignore-eos --print-ids \
    >"$tmp/got_ids" 2>"$tmp/err"
if [ -s "$tmp/want_ids" ] && cmp -s "$tmp/want_ids" "$tmp/got_ids"; then
    ok "--prompt-ids --print-ids give transformers' greedy ids"
else
    not_ok "--prompt-ids --print-ids give transformers' greedy ids" \
        "want $(head -c 300 "$tmp/want_ids")" "got $(head -c 300 "$tmp/got_ids")" \
        "$(tail -3 "$tmp/err")"
fi
hello_ids=$("$bin" tokenize --model dummy:tiny --text "Hello" 2>/dev/null)
"$bin" generate --model dummy:tiny --prompt "Hello" --max-tokens 8 --temperature 0 \
    --dtype fp32 >"$tmp/by_text" 2>/dev/null
"$bin" generate --model dummy:tiny --prompt-ids "$hello_ids" --max-tokens 8 --temperature 0 \
    --dtype fp32 >"$tmp/by_ids" 2>/dev/null
[ -s "$tmp/by_text" ] && cmp -s "$tmp/by_text" "$tmp/by_ids" \
    && ok "a text prompt and its ids generate the same text" \
    || not_ok "a text prompt and its ids generate the same text" "ids $hello_ids" \
        "$(cat "$tmp/by_text")" "$(cat "$tmp/by_ids")"
"$bin" generate --model dummy:tiny --prompt "Hello" --prompt-ids "$hello_ids" --max-tokens 8 \
    --temperature 0 --dtype fp32 --print-ids >"$tmp/both" 2>/dev/null
[ "$(wc -l <"$tmp/both")" -eq 2 ] && [ "$(sed -n 1p "$tmp/both")" = "$(sed -n 2p "$tmp/both")" ] \
    && grep -Eq '^\[[0-9]+(, [0-9]+){7}\]$' "$tmp/both" \
    && ok "--prompt and --prompt-ids together, one JSON array a line" \
    || not_ok "--prompt and --prompt-ids together, one JSON array a line" "$(cat "$tmp/both")"
for bad in '[]' '[2, 1.5]' '[2, -1]' '2' '[2,' '["a"]'; do
    expect "--prompt-ids '$bad' is refused" 2 "--prompt-ids #1: expected a non-empty JSON array" -- \
        "$bin" generate --model dummy:tiny --prompt-ids "$bad"
done
expect "--prompt-ids outside the vocabulary" 2 "id 512 is outside the vocabulary \(0..511\)" -- \
    "$bin" generate --model dummy:tiny --prompt-ids '[2, 5]' --prompt-ids '[2, 512]'
expect "generate without any prompt names --prompt-ids" 2 "--prompt-ids" -- \
    "$bin" generate --model dummy:tiny

# A model folder with tokenizer.json (here the Llama-3-style tiny tokenizer of
# tests/data/tokenizers, beside a config.json) is tokenized with it: its own BOS
# <|begin_of_text|> (1500) first, and the ids decode back to the text. A tokenizer
# with more tokens than the model's vocab_size (embedding rows) fails the load.
mkdir -p "$tmp/tokjson"
cp "$data"/tokenizers/llama3/tokenizer.json "$data"/tokenizers/llama3/tokenizer_config.json \
    "$data"/tokenizers/llama3/generation_config.json "$tmp/tokjson/"
sed 's/"vocab_size": *1024/"vocab_size": 1536/' "$data/golden/tiny-opt/config.json" \
    >"$tmp/tokjson/config.json"
tj_ids=$("$bin" tokenize --model "$tmp/tokjson" --text "Hello world" 2>"$tmp/err")
tj_text=$("$bin" tokenize --model "$tmp/tokjson" --decode "$tj_ids" 2>/dev/null)
case "$tj_ids" in
"[1500, "*) [ "$tj_text" = "Hello world" ] && ok "a tokenizer.json folder tokenizes with it" \
    || not_ok "a tokenizer.json folder tokenizes with it" "decoded '$tj_text'" ;;
*) not_ok "a tokenizer.json folder tokenizes with it" "ids $tj_ids" "$(cat "$tmp/err")" ;;
esac
cp "$data/golden/tiny-opt/config.json" "$tmp/tokjson/config.json"
expect "a tokenizer larger than the embedding fails the load" 1 \
    "the tokenizer has 1510 tokens but config.json's vocab_size is 1024" -- \
    "$bin" tokenize --model "$tmp/tokjson" --text "Hello"

# A golden checkpoint folder (safetensors and .bin) loads and generates. It has no
# tokenizer files, so it is for token ids only: text prompts, text output and stop
# strings are refused with a message that says why and what to use.
expect "generate golden safetensors" 0 "generated tokens" -- \
    "$bin" generate --model "$data/golden/tiny-opt" --prompt-ids '[2, 5]' --max-tokens 4 \
    --dtype fp32 --print-ids
expect "generate golden .bin" 0 "generated tokens" -- \
    "$bin" generate --model "$data/golden/tiny-opt-350m-bin" --prompt-ids '[2, 5]' \
    --max-tokens 4 --print-ids
expect "no tokenizer: a text prompt is refused" 2 "has no tokenizer.*--prompt-ids.*--print-ids" -- \
    "$bin" generate --model "$data/golden/tiny-opt" --prompt "x" --max-tokens 4
expect "no tokenizer: text output is refused" 2 "has no tokenizer.*--print-ids" -- \
    "$bin" generate --model "$data/golden/tiny-opt" --prompt-ids '[2, 5]' --max-tokens 4
expect "no tokenizer: --stop is refused" 2 "no text for --stop" -- \
    "$bin" generate --model "$data/golden/tiny-opt" --prompt-ids '[2, 5]' --print-ids --stop x
expect "no tokenizer: tokenize says so" 1 "has no tokenizer" -- \
    "$bin" tokenize --model "$data/golden/tiny-opt" --text "x"
grep -q "token ids only" "$tmp/err" && ok "no tokenizer: the load warns" \
    || not_ok "no tokenizer: the load warns" "$(cat "$tmp/err")"

# tokenize: the byte tokenizer of the dummy models, and --decode back.
out=$("$bin" tokenize --model dummy:tiny --text "Hi" 2>/dev/null)
[ "$out" = "[2, 76, 109]" ] && ok "tokenize dummy:tiny" || not_ok "tokenize dummy:tiny" "got $out"
out=$("$bin" tokenize --model dummy:tiny --decode "[2, 76, 109]" 2>/dev/null)
[ "$out" = "Hi" ] && ok "decode dummy:tiny" || not_ok "decode dummy:tiny" "got $out"
# Its flags come from config/'s table (scope tokenize): --text is the text itself,
# taken as given ("" is BOS alone, newlines stay), --no-bos drops BOS, --bos=true
# keeps it, the --decode list may use commas and spaces.
out=$("$bin" tokenize --model dummy:tiny --text "" 2>/dev/null)
[ "$out" = "[2]" ] && ok "tokenize of empty text is BOS" || not_ok "tokenize of empty text is BOS" "got $out"
out=$("$bin" tokenize --model dummy:tiny --no-bos --text "$(printf 'a\nb')" 2>/dev/null)
[ "$out" = "[101, 14, 102]" ] && ok "tokenize --no-bos keeps a newline" \
    || not_ok "tokenize --no-bos keeps a newline" "got $out"
out=$("$bin" tokenize --model=dummy:tiny --bos=true --text=Hi 2>/dev/null)
[ "$out" = "[2, 76, 109]" ] && ok "tokenize --name=VALUE forms" || not_ok "tokenize --name=VALUE forms" "got $out"
out=$("$bin" tokenize --model dummy:tiny --decode "2,76 109" 2>/dev/null)
[ "$out" = "Hi" ] && ok "decode a comma/space list" || not_ok "decode a comma/space list" "got $out"
expect "tokenize needs --text or --decode" 2 "exactly one of --text and --decode" -- \
    "$bin" tokenize --model dummy:tiny
expect "tokenize takes not both" 2 "exactly one of --text and --decode" -- \
    "$bin" tokenize --model dummy:tiny --text a --decode 1
expect "tokenize unknown flag" 2 "unknown option '--prompt'" -- "$bin" tokenize --prompt x
expect "tokenize bad ids" 2 "--decode wants token ids" -- "$bin" tokenize --model dummy:tiny --decode x
"$bin" tokenize --help >"$tmp/help" 2>&1
st=$?
[ "$st" -eq 0 ] && grep -q -- "--text TEXT" "$tmp/help" && grep -q -- "--decode IDS" "$tmp/help" \
    && grep -q -- "--\[no-\]bos" "$tmp/help" && ! grep -q -- "--prompt-len" "$tmp/help" \
    && ok "tokenize --help lists its flags only" \
    || not_ok "tokenize --help lists its flags only" "exit $st" "$(head -5 "$tmp/help")"

# Bad models and checkpoints: one clear line naming what is wrong, exit 1.
expect "missing model folder" 1 "config.json" -- "$bin" generate --model "$tmp/nope" --prompt x
expect "unknown dummy" 1 "dummy:opt-1t" -- "$bin" generate --model dummy:opt-1t --prompt x
mkdir -p "$tmp/trunc"
cp "$data/golden/tiny-opt/config.json" "$tmp/trunc/"
head -c 5000 "$data/golden/tiny-opt/model.safetensors" >"$tmp/trunc/model.safetensors"
expect "truncated safetensors" 1 "model.safetensors" -- "$bin" generate --model "$tmp/trunc" --prompt x
mkdir -p "$tmp/noweights"
cp "$data/golden/tiny-opt/config.json" "$tmp/noweights/"
expect "no weights file" 1 "noweights" -- "$bin" generate --model "$tmp/noweights" --prompt x
mkdir -p "$tmp/badcfg"
echo '{"hidden_size": "big"' >"$tmp/badcfg/config.json"
expect "malformed config.json" 1 "config.json" -- "$bin" generate --model "$tmp/badcfg" --prompt x

# Bad flags: usage error, exit 2.
expect "bad temperature" 2 "--temperature" -- "$bin" generate --model dummy:tiny --prompt x --temperature 9
expect "bad dtype" 2 "--dtype" -- "$bin" generate --model dummy:tiny --prompt x --dtype fp8
expect "no prompt" 2 "--prompt" -- "$bin" generate --model dummy:tiny
expect "unknown command" 2 "unknown command" -- "$bin" frobnicate
expect "context exceeded" 1 "context length" -- \
    "$bin" generate --model "$data/golden/tiny-opt" --prompt-ids '[2]' --max-tokens 500 \
    --print-ids

# serve --help lists every flag with its default; bad serve flags are usage errors.
"$bin" serve --help >"$tmp/help" 2>&1
grep -q -- "--kv-cache-bytes" "$tmp/help" && grep -q -- "--api-key" "$tmp/help" \
    && grep -q "default" "$tmp/help" && ok "serve --help" || not_ok "serve --help" "$(head -5 "$tmp/help")"
expect "serve bad flag" 2 "--no-such-flag" -- "$bin" serve --no-such-flag
expect "serve bad value" 2 "--port" -- "$bin" serve --port 99999

# The built-in model `default` (models/default): what the commands load when no
# --model is given. It writes text, not noise: its perplexity on the first two
# segments of its held-out text (63.5 in fp32 when it was trained) is far from a
# random model's (about the vocabulary, 8192).
root="$data/../.."
expect "generate with the default model" 0 "generated tokens" -- \
    "$bin" generate --prompt "The Linux kernel" --max-tokens 8 --temperature 0 --dtype fp32
# The README's tokenize example, as it is written there, on default.
ex_text=$(grep -o -- '--text "[^"]*"` gives `\[[0-9, ]*\]`' "$root/README.md" | head -1)
ex_ids=$(printf '%s' "$ex_text" | grep -o '\[[0-9, ]*\]')
ex_text=$(printf '%s' "$ex_text" | sed 's/^--text "\([^"]*\)".*/\1/')
ex_dec=$(grep -o -- '--decode "\[[0-9, ]*\]"' "$root/README.md" | head -1 | grep -o '\[[0-9, ]*\]')
out=$("$bin" tokenize --text "$ex_text" 2>&1)
dec=$("$bin" tokenize --decode "$ex_dec" 2>&1)
if [ -n "$ex_ids" ] && [ "$out" = "$ex_ids" ] && [ "$ex_dec" = "$ex_ids" ] && [ "$dec" = "$ex_text" ]; then
    ok "the README's tokenize example on default"
else
    not_ok "the README's tokenize example on default" "text '$ex_text' ids '$ex_ids' decode '$ex_dec'" \
        "got '$out' and '$dec'"
fi
out=$("$bin" tokenize --decode "[2, 31414]" 2>&1)
rc=$?
[ $rc -ne 0 ] && printf '%s' "$out" | grep -q "31414 is outside 0..8191" \
    && ok "tokenize --decode of an id outside default's vocabulary is a clear error" \
    || not_ok "tokenize --decode of an id outside default's vocabulary is a clear error" "rc $rc: $out"
a=$("$bin" tokenize --text "The scheduler runs" 2>/dev/null)
b=$("$bin" tokenize --model "$root/models/default" --text "The scheduler runs" 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok "tokenize defaults to models/default" \
    || not_ok "tokenize defaults to models/default" "default: $a" "folder: $b"
"$bin" bench quality --text "$root/models/default/heldout.txt" --segments 2 --dtype fp32 \
    >"$tmp/out" 2>"$tmp/err"
ppl=$(sed -n 's/.*"policy": "full".*"perplexity": \([0-9.]*\).*/\1/p' "$tmp/out")
if [ -n "$ppl" ] && awk -v p="$ppl" 'BEGIN { exit !(p > 20 && p < 80) }'; then
    ok "default model perplexity $ppl"
else
    not_ok "default model perplexity" "$(head -c 400 "$tmp/out")" "$(head -c 300 "$tmp/err")"
fi
printf '%s\n' '{"custom_id":"a","method":"POST","url":"/v1/completions","body":{"model":"default","prompt":"The kernel","max_tokens":4,"temperature":0}}' \
    >"$tmp/batch.jsonl"
if "$bin" run-batch -i "$tmp/batch.jsonl" -o "$tmp/batch.out" >/dev/null 2>"$tmp/err" \
    && grep -q '"status_code":200' "$tmp/batch.out"; then
    ok "run-batch with the default model"
else
    not_ok "run-batch with the default model" "$(head -c 400 "$tmp/batch.out" 2>/dev/null)" \
        "$(head -c 300 "$tmp/err")"
fi

# bench quality: a sweep on dummy:tiny prints the table and a JSON line per
# configuration (full, then h2o and local per fraction); bad input is a clean error.
head -c 30000 "$data/../../README.md" >"$tmp/text.txt"
"$bin" bench quality --model dummy:tiny --dtype fp32 --text "$tmp/text.txt" --prompt-len 16 \
    --gen-len 48 --segments 4 --sweep 0.1,0.5 >"$tmp/out" 2>"$tmp/err"
if [ $? -eq 0 ] && [ "$(grep -c '^{"bench": "quality"' "$tmp/out")" -eq 5 ] \
    && grep -q '"policy": "local", "heavy": 0, "recent": 32, "min_budget": 0, "prompt_len": 16, "gen_len": 48, "segments": 4, "tokens": 192' "$tmp/out" \
    && grep -Eq '^full +0 +0 +[0-9.]+ +1.0000x' "$tmp/out"; then
    ok "bench quality sweep"
else
    not_ok "bench quality sweep" "$(head -c 600 "$tmp/out")" "$(head -c 300 "$tmp/err")"
fi
expect "bench quality without --text" 2 "--text FILE is required" -- "$bin" bench quality --model dummy:tiny
expect "bench quality missing text" 1 "nope.txt" -- "$bin" bench quality --model dummy:tiny --text "$tmp/nope.txt"
expect "bench quality bad sweep" 2 "--sweep" -- "$bin" bench quality --text "$tmp/text.txt" --sweep 0.1,2
echo "too short" >"$tmp/short.txt"
expect "bench quality text too short" 1 "fewer than one segment" -- \
    "$bin" bench quality --model dummy:tiny --text "$tmp/short.txt"
expect "bench quality longer than the positions" 1 "positions" -- \
    "$bin" bench quality --model dummy:tiny --text "$tmp/text.txt" --prompt-len 2000 --gen-len 100
expect "bench quality without a tokenizer" 1 "has no tokenizer" -- \
    "$bin" bench quality --model "$data/golden/tiny-opt" --text "$tmp/text.txt"
expect "bench quality plot without sweep" 2 "--plot" -- \
    "$bin" bench quality --text "$tmp/text.txt" --plot "$tmp/x.png"
# --plot without gnuplot says so before the run, not after it (an empty PATH: no
# gnuplot, whatever this machine has installed).
mkdir -p "$tmp/empty-path"
expect "bench quality --plot without gnuplot fails at the start" 2 "needs gnuplot.*gnuplot-nox" -- \
    env PATH="$tmp/empty-path" "$bin" bench quality --text "$root/models/default/heldout.txt" \
    --sweep 0.1,0.2 --plot "$tmp/x.png"
[ ! -s "$tmp/out" ] && [ ! -e "$tmp/x.png" ] \
    && ok "... and runs nothing" || not_ok "... and runs nothing" "$(head -c 300 "$tmp/out")"
expect "bench unknown" 2 "quality" -- "$bin" bench speed

echo "1..$n"
[ "$failed" -eq 0 ]
