#!/bin/sh
# weft-fit and tune-sweep.sh end to end. weft-fit on synthetic weft-bench
# JSON (time = alpha + bytes / beta per configuration): the rows it prints
# carry the per-step figures (AllReduce's ring on 2 ranks: alpha / 2), the
# command, and --check passes where the default is the best forced
# configuration at every size and fails (exit 1) where it is Ring's
# everywhere or 1.5x the best at one size;
# bad input exits 2 naming the file. Then a real sweep of host ranks
# (tiny sizes, few iterations): every forced run, the default, the path
# type read from the TUNING lines, a row per configuration and a
# verification line per size. Times are not asserted.
#
# usage: fit_cli_test.sh WEFT_FIT WEFT_BENCH TUNE_SWEEP_SH
set -u
fit=$1 bench=$2 sweep=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/weft-fit-test.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
bad=0
fail() {
  echo "FAIL: $*" >&2
  bad=1
}

# json FILE NRANKS ALPHA BETA: weft-bench's layout, sizes 8 B to 512 KiB
# (x4), time = ALPHA + size / BETA.
json() {
  awk -v n="$2" -v a="$3" -v b="$4" 'BEGIN {
    printf "{\"program\": \"weft-bench\", \"collective\": \"allreduce\", \"nranks\": %d,\n \"rows\": [", n
    sep = ""
    for (s = 8; s <= 1048576; s *= 4) {
      t = a + s / b
      printf "%s\n  {\"size\": %d, \"out_of_place\": {\"time_us\": %.6f}, \"in_place\": {\"time_us\": null}}", sep, s, t
      sep = ","
    }
    printf "\n ], \"avg_busbw\": null}\n" }' >"$1"
}

json "$dir/ring.json" 2 10 20000
json "$dir/tree.json" 2 4 5000
json "$dir/default.json" 2 10 20000 # Ring everywhere: 2.5x at 8 B
# best FILE [SIZE FACTOR]: the least of Ring's and Tree's times at every
# size (Tree's up to 32 KiB), the one at SIZE multiplied by FACTOR.
best() {
  awk -v at="${2:-0}" -v f="${3:-1}" 'BEGIN {
    printf "{\"collective\": \"allreduce\", \"nranks\": 2, \"rows\": ["
    sep = ""
    for (s = 8; s <= 1048576; s *= 4) {
      t = 10 + s / 20000; u = 4 + s / 5000; if (u < t) t = u; if (s == at) t *= f
      printf "%s{\"size\": %d, \"out_of_place\": {\"time_us\": %.6f}}", sep, s, t; sep = ","
    }
    printf "]}\n" }' >"$1"
}
best "$dir/good.json"
best "$dir/slow.json" 2048 1.5

out=$("$fit" --path nvlink --machine testhost --date 2026-01-02 --command "weft-bench allreduce -np 2" \
  --check Ring/Simple="$dir/ring.json" Tree/Simple="$dir/tree.json" default="$dir/good.json")
rc=$?
printf '%s\n' "$out"
[ $rc = 0 ] || fail "--check on the best default: exit $rc, expected 0"
printf '%s\n' "$out" | grep -q 'within 10% of the best forced at 9 of 9 sizes: PASS' ||
  fail "no PASS line"
row=$(printf '%s\n' "$out" | grep 'WEFT_TUNE_NVLINK, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 2,')
alpha=$(printf '%s\n' "$row" | awk -F', ' '{ print $6 }')
beta=$(printf '%s\n' "$row" | awk -F', ' '{ print $7 }')
# Ring on 2 ranks: 2 steps of alpha, one buffer's bytes: alpha 5, beta 20000.
awk -v a="$alpha" -v b="$beta" 'BEGIN { exit !(a > 4.99 && a < 5.01 && b > 19990 && b < 20010) }' ||
  fail "Ring row: alpha $alpha beta $beta, expected 5 and 20000"
printf '%s\n' "$out" | grep -q '"testhost 2026-01-02: NCCL_ALGO=Tree NCCL_PROTO=Simple weft-bench allreduce -np 2"' ||
  fail "no Tree row with its machine, date and command"

out=$("$fit" --path nvlink --check Ring/Simple="$dir/ring.json" Tree/Simple="$dir/tree.json" \
  default="$dir/default.json")
rc=$?
[ $rc = 1 ] || fail "--check on a Ring-only default: exit $rc, expected 1"
printf '%s\n' "$out" | grep -q ': FAIL$' || fail "no FAIL line"
out=$("$fit" --check Ring/Simple="$dir/ring.json" Tree/Simple="$dir/tree.json" \
  default="$dir/slow.json")
rc=$?
[ $rc = 1 ] || fail "--check with the default 1.5x at 2 KiB: exit $rc, expected 1"
printf '%s\n' "$out" | grep -E '^ +2048 .* 1\.50 +NO ' >/dev/null || fail "2048 not marked NO"
[ "$(printf '%s\n' "$out" | grep -c ' NO ')" = 1 ] || fail "other sizes than 2048 marked NO"

err=$("$fit" Ring/Simple="$dir/none.json" 2>&1)
rc=$?
if [ $rc != 2 ] || ! printf '%s\n' "$err" | grep -q 'none.json: cannot open'; then
  fail "missing file: exit $rc: $err"
fi
json "$dir/four.json" 4 10 20000
err=$("$fit" Ring/Simple="$dir/ring.json" Tree/Simple="$dir/four.json" 2>&1)
rc=$?
if [ $rc != 2 ] || ! printf '%s\n' "$err" | grep -q 'on 4 ranks, but the first file has allreduce on 2'; then
  fail "mixed ranks: exit $rc: $err"
fi
err=$("$fit" Ring/LL256="$dir/ring.json" 2>&1)
[ $? = 2 ] || fail "LL256 accepted: $err"

"$fit" --help 2>/dev/null || fail "--help: exit $?"
"$fit" --min-bytes 1q Ring/Simple="$dir/ring.json" 2>/dev/null
[ $? = 2 ] || fail "--min-bytes 1q accepted"
# A size range: 2048, 8192 and 32768 B only.
"$fit" --min-bytes 2K --max-bytes 32k Ring/Simple="$dir/ring.json" | grep -q ', 3 sizes, rms' ||
  fail "--min-bytes 2K --max-bytes 32k: not 3 sizes fitted"

# A real sweep of host ranks.
WEFT_DEVICE=cpu "$sweep" -o "$dir/sweep" --bench "$bench" --fit "$fit" -- \
  allreduce --cpu -np 2 -b 8 -e 4K -f 8 -n 3 -w 1 -c 0 >"$dir/sweep.out" 2>&1
rc=$?
cat "$dir/sweep.out"
[ $rc = 0 ] || fail "tune-sweep.sh: exit $rc"
for c in Ring-Simple Tree-Simple Direct-Simple default; do
  [ -s "$dir/sweep/$c.json" ] || fail "tune-sweep.sh wrote no $c.json"
done
[ "$(grep -c '^    {WEFT_TUNE_SHM, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_' "$dir/sweep/fit.txt")" = 3 ] ||
  fail "not 3 rows of path shm"
[ "$(grep -cE '^ +(8|64|512|4096) ' "$dir/sweep/fit.txt")" = 4 ] || fail "not 4 verification lines"
grep -q 'of the best forced at [0-9]* of 4 sizes' "$dir/sweep/fit.txt" || fail "no verdict line"
exit $bad
