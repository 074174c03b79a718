#!/usr/bin/env bash
# weft-bench's nccl-tests flags, run for real on forked host ranks: each
# flag is taken, and changes what it should in the table (rows, columns,
# header notes, files), or ends the run the way nccl-tests' would.
#
#   bench_flags_test.sh WEFT_BENCH
#
# Sizes stay small (1 KiB to 4 KiB, two ranks) so the whole script takes
# seconds on a shared 2-core machine.
set -u
bench=$1
export WEFT_DEVICE=cpu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
small=(-np 2 -b 1K -e 4K -f 2 -n 2 -w 1)
passed=0
failed=0

ok() { passed=$((passed + 1)); }
bad() {
  failed=$((failed + 1))
  echo "FAILED: $*"
}
# run NAME ARGS...: runs weft-bench; its output in $out, exit code in $rc.
run() {
  out=$("$bench" "$@" 2>&1)
  rc=$?
}
# rows: the table's data lines in $out.
rows() { printf '%s\n' "$out" | grep -c '^ *[0-9]'; }
has() { printf '%s\n' "$out" | grep -q -- "$1"; }
# expect_ok WHAT PATTERN: the run passed and its output matches PATTERN.
expect_ok() {
  if [ "$rc" = 0 ] && has "$2"; then ok; else
    bad "$1 (exit $rc)"
    printf '%s\n' "$out" | tail -n 20
  fi
}

# Defaults are nccl-tests': one row of 32 MiB.
run allreduce -np 2 -n 1 -w 0 -c 0
if [ "$rc" = 0 ] && [ "$(rows)" = 1 ] && has '^ *33554432 '; then ok; else bad "default sizes: one row of 32 MiB"; fi
# -i adds when -f is 1 (the default).
run allreduce -np 2 -b 1K -e 3K -i 1K -n 1 -w 0
if [ "$rc" = 0 ] && [ "$(rows)" = 3 ]; then ok; else bad "-i 1K: 1K, 2K, 3K"; fi

# Every collective, checked, with every root in turn where there is one.
for coll in allreduce allgather reducescatter broadcast reduce sendrecv alltoall gather scatter hypercube; do
  run "$coll" "${small[@]}" -r -1 -c 2
  expect_ok "$coll checked" '# Out of bounds values : 0 OK'
done
# nccl-tests' mulsum (a PreMulSum per rank), every type, checked.
run allreduce -np 3 -b 64 -e 4K -f 8 -n 1 -w 0 -o mulsum -d all -c 1
if [ "$rc" = 0 ] && [ "$(rows)" = 36 ] && has "# Out of bounds values : 0 OK" && has " mulsum "; then ok; else bad "-o mulsum -d all"; fi
run broadcast -np 3 -b 1K -e 1K -n 1 -w 0 -r -1
if [ "$rc" = 0 ] && [ "$(rows)" = 3 ] && has '^ *1024 .* 2  '; then ok; else bad "-r -1: a row per root"; fi
run gather -np 3 -b 1K -e 1K -n 1 -w 0 -r 2
if [ "$rc" = 0 ] && [ "$(rows)" = 1 ] && has '^ *1008 .*none *2 '; then ok; else bad "gather -r 2"; fi
run hypercube -np 3 -b 1K -e 1K
if [ "$rc" != 0 ] && has 'power-of-two'; then ok; else bad "hypercube on 3 ranks is refused"; fi
run nosuch -np 2
if [ "$rc" != 0 ] && has 'allreduce, allgather, reducescatter, broadcast, reduce, sendrecv, alltoall, gather, scatter, hypercube'; then ok; else bad "an unknown collective lists the names"; fi

# -N: the sweep again; -c 0: no checks.
run allreduce "${small[@]}" -N 2 -c 0
if [ "$rc" = 0 ] && [ "$(rows)" = 6 ] && has 'N/A'; then ok; else bad "-N 2 -c 0: six unchecked rows"; fi
# --passes: the sweep three times, then per size the median [min-max]
# lines; --json has every pass's rows, numbered.
run broadcast "${small[@]}" --passes 3 -c 1 --json "$tmp/p.json"
if [ "$rc" = 0 ] && [ "$(rows)" = 9 ] && has '^# Passes: 3 (--passes): the sweep runs 3 times' &&
  [ "$(printf '%s\n' "$out" | grep -c '^# *[0-9][0-9]* *[0-9][0-9]* .*\[.*-.*\].*\[.*\].*\[.*\].*\[.*\]$')" = 3 ] &&
  has '# Out of bounds values : 0 OK'; then ok; else
  bad "--passes 3: nine rows, then three median lines"
  printf '%s\n' "$out" | tail -n 12
fi
if [ "$(grep -c '"pass": [123],' "$tmp/p.json")" = 9 ] && grep -q '"passes": 3,' "$tmp/p.json"; then ok; else bad "--passes 3 --json: nine rows with their pass"; fi
run allreduce "${small[@]}" --passes 2 -N 2
if [ "$rc" != 0 ] && has 'expected one of them'; then ok; else bad "--passes with -N is refused"; fi
# -C and -S change the columns.
run allreduce "${small[@]}" -C 1 -S 1
expect_ok "-C 1 -S 1" 'cputime .*timestamp'
has '^ *1024 .* [0-9]\{4\}-[0-9][0-9]-[0-9][0-9] [0-9:]\{8\}$' && ok || bad "-S 1: a timestamp on each row"
# -I and -K: per-iteration columns.
run allreduce "${small[@]}" -n 4 -I 1 -K 1
expect_ok "-I 1 -K 1" 'i_min .*i_max .*i_p99 .*i_cv%'
# -M: a memory line; -J: a JSON file.
run allreduce "${small[@]}" -M 1 -J "$tmp/r.json"
expect_ok "-M 1" '^# Memory (rank 0'
if [ -s "$tmp/r.json" ] && grep -q '"busbw"\|"bus_bw"' "$tmp/r.json"; then ok; else bad "-J FILE.json: results written"; fi
# -z, -p, -R, -x, -u, -y, -G, -T, -m, -a: taken, and said in the header.
run allreduce "${small[@]}" -z 1
expect_ok "-z 1" '^# Blocking Enabled (-z 1)'
run allreduce "${small[@]}" -z 2 -m 3
expect_ok "-z 2 -m 3" '^# Blocking Enabled (-z 2)'
run allreduce "${small[@]}" -z 3 -a 2
expect_ok "-z 3 -a 2" 'untimed barrier'
has 'the minimum across ranks (-a 2)' && ok || bad "-a 2 in the header"
for p in 0 1; do
  run allreduce -np 1 -t 2 -b 1K -e 4K -f 2 -n 2 -p $p
  expect_ok "-p $p -t 2" "created by .*(-p $p)"
done
run allreduce -np 1 -t 2 -g 2 -b 1K -e 4K -f 2 -n 2 -w 0 -c 1
if [ "$rc" = 0 ] && has 'nThread 2 nGpus 2' && has 'Rank  3 ' && has '# Out of bounds values : 0 OK'; then ok; else bad "-t 2 -g 2: four ranks in one process"; fi
for r in 1 2; do
  run reducescatter "${small[@]}" -R $r
  expect_ok "-R $r" "registered with .*(-R $r)"
done
run allreduce "${small[@]}" -x 1
expect_ok "-x 1" '^# CTA policy: 1'
run allgather "${small[@]}" -u 3 -d double -c 2
expect_ok "-u 3" '^# Buffers shifted by 3 elements'
has '# Out of bounds values : 0 OK' && ok || bad "-u 3: results still right"
run allreduce "${small[@]}" -y 1 -G 2
expect_ok "-y 1 -G 2 on host ranks" '^# Note: -G 2 does not apply: host ranks'
has '^# Note: -y 1 does not apply' && ok || bad "-y 1 on host ranks says why"
run allreduce "${small[@]}" -T 30
expect_ok "-T 30, nothing stuck" '^# Timeout: 30 s'
run allreduce "${small[@]}" -D 1
if [ "$rc" != 0 ] && has 'NCCL 2.28'; then ok; else bad "-D 1 is refused with the reason"; fi

# -T: a rank that stops answering ends the run with nccl-tests' message
# well before weft's own (much longer) timeouts would.
"$bench" allreduce -np 2 -b 8 -e 8 -n 100000000 -w 0 -c 0 -T 2 >"$tmp/t.out" 2>&1 &
parent=$!
child=""
for _ in $(seq 50); do
  sleep 0.2
  child=$(pgrep -P "$parent" | head -n 1)
  if [ -n "$child" ] && grep -q '(elements)' "$tmp/t.out"; then break; fi
done
start=$(date +%s)
[ -n "$child" ] && kill -STOP "$child"
timeout 60 tail --pid="$parent" -f /dev/null
elapsed=$(($(date +%s) - start))
# Still there after a minute: -T did nothing; end it (and its ranks).
if kill -0 "$parent" 2>/dev/null; then
  for pid in $(pgrep -P "$parent"); do kill -KILL "$pid"; done
  kill -KILL "$parent"
fi
wait "$parent"
trc=$?
if [ "$trc" != 0 ] && grep -q 'Test timeout (2s)' "$tmp/t.out" && [ "$elapsed" -lt 30 ]; then ok; else
  bad "-T 2 with a stopped rank (exit $trc after ${elapsed}s)"
  tail -n 5 "$tmp/t.out"
fi
[ -n "$child" ] && kill -KILL "$child" 2>/dev/null

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
