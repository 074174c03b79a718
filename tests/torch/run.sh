#!/usr/bin/env bash
# Runs check_torch.py under torchrun with weft's libnccl.so.2 preloaded, all
# ranks on GPU 0, after checking that weft defines every nccl* function
# libtorch_cuda.so imports: for each rank count and MPS setting, the checks, then
# the abort check (the last rank exits mid-loop); optionally one run with
# non-blocking communicators and the CuPy check. Prints one line per run,
# the checks that failed, and where the logs are; exits non-zero if a run
# failed.
#
#   tests/torch/run.sh BUILD_DIR [options]
#
#   --np "2 4"          rank counts (default "2 4")
#   --mps "off on"      MPS settings (default "off on"); "on" starts a private
#                       MPS daemon (CUDA_MPS_PIPE_DIRECTORY in a temp dir) and
#                       stops it after; "off" points clients at an empty one
#   --modes "checks abort"   what to run per setting (default both)
#   --nonblocking       also one checks run with TORCH_NCCL_USE_COMM_NONBLOCKING=1
#   --cupy              also check_cupy.py (2 processes)
#   --hosts             every process on a host of its own (own_host.sh: a UTS
#                       namespace with its own host name, else NCCL_HOSTID), so
#                       ranks reach each other through the proxy and the net
#                       transport; the captured all_reduce must then work
#   --any-nccl          do not require weft (run the same against NVIDIA's NCCL)
#   -- ARGS             passed to check_torch.py (e.g. -- --steps 100)
#
# PYTHON names the interpreter (default python3); RUN_TIMEOUT bounds each run
# in seconds (default 540). Other variables (NCCL_DEBUG, WEFT_*) pass through.
set -u

usage() { sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] || usage
BUILD=$1
shift
NPS="2 4"
MPS_SET="off on"
MODES="checks abort"
NONBLOCKING=0
CUPY=0
HOSTS=0
ANY=()
EXTRA=()
while [ $# -gt 0 ]; do
  case $1 in
    --np) NPS=$2; shift 2 ;;
    --mps) MPS_SET=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --nonblocking) NONBLOCKING=1; shift ;;
    --cupy) CUPY=1; shift ;;
    --hosts) HOSTS=1; shift ;;
    --any-nccl) ANY=(--any-nccl); shift ;;
    --) shift; EXTRA=("$@"); break ;;
    *) usage ;;
  esac
done

LIB=$(cd "$BUILD" 2>/dev/null && pwd)/src/libnccl.so.2
if [ ! -e "$LIB" ]; then
  echo "run.sh: no $BUILD/src/libnccl.so.2: build weft first (meson setup BUILD && ninja -C BUILD)" >&2
  exit 2
fi
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
RUN_TIMEOUT=${RUN_TIMEOUT:-540}
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "run.sh: $PY has no torch with CUDA: nothing to run" >&2
  exit 2
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/weft-torch.XXXXXX")
LOGS=$WORK/logs
mkdir -p "$LOGS" "$WORK/mps-pipe" "$WORK/mps-log" "$WORK/no-mps"
MPS_UP=0

mps_start() {
  if ! command -v nvidia-cuda-mps-control >/dev/null; then
    echo "SKIP MPS: nvidia-cuda-mps-control is not installed"
    return 1
  fi
  export CUDA_MPS_PIPE_DIRECTORY=$WORK/mps-pipe CUDA_MPS_LOG_DIRECTORY=$WORK/mps-log
  if ! nvidia-cuda-mps-control -d; then
    echo "SKIP MPS: the MPS daemon did not start (see $WORK/mps-log)"
    return 1
  fi
  MPS_UP=1
  sleep 1
}

mps_stop() {
  [ "$MPS_UP" = 1 ] || return 0
  echo quit | nvidia-cuda-mps-control
  MPS_UP=0
  sleep 1
}

mps_off() {
  # An empty pipe directory: a daemon some other user started is not used.
  export CUDA_MPS_PIPE_DIRECTORY=$WORK/no-mps CUDA_MPS_LOG_DIRECTORY=$WORK/mps-log
}

trap 'mps_stop' EXIT

FAILED=0
SUMMARY=()

# run NAME COMMAND...: one bounded run, its log kept, one summary line.
run() {
  local name=$1 log=$LOGS/$1.log
  shift
  local t0=$SECONDS
  timeout -k 10 "$RUN_TIMEOUT" env LD_PRELOAD="$LIB${LD_PRELOAD:+:$LD_PRELOAD}" "$@" >"$log" 2>&1
  local rc=$?
  local verdict=PASS
  [ $rc -eq 0 ] || verdict=FAIL
  [ $rc -eq 124 ] && verdict="FAIL (timed out after ${RUN_TIMEOUT} s)"
  local line
  line=$(printf '%-6s %-36s %4d s  exit %d' "${verdict%% *}" "$name" $((SECONDS - t0)) $rc)
  [ "$verdict" = PASS ] || line="$line  ${verdict#FAIL}"
  echo "$line"
  SUMMARY+=("$line")
  if [ "$verdict" != PASS ]; then
    FAILED=1
    grep -E '^(\[rank [0-9]+\] )?FAIL' "$log" | head -20 | sed 's/^/    /'
  fi
}

echo "weft: $LIB"

# Every nccl* function libtorch_cuda.so imports must be defined by weft:
# one it lacked would resolve to the NCCL that PyTorch's wheel loads too.
imports_check() {
  local torch_lib names missing
  torch_lib=$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))')
  if ! command -v nm >/dev/null || [ ! -e "$torch_lib" ]; then
    echo "SKIP   torch imports: no nm, or no $torch_lib"
    return
  fi
  names=$(nm -D --undefined-only "$torch_lib" | awk '{print $NF}' | sed 's/@.*//' | grep -E '^nccl' | sort -u)
  missing=$(comm -23 <(echo "$names") <(nm -D --defined-only "$LIB" | awk '{print $NF}' | sed 's/@.*//' | sort -u))
  if [ -n "$missing" ]; then
    echo "FAIL   torch imports: weft lacks $(echo $missing)"
    FAILED=1
  else
    echo "PASS   torch imports: all $(echo "$names" | wc -l) nccl functions libtorch_cuda.so imports are weft's"
  fi
}
[ ${#ANY[@]} -eq 0 ] && imports_check
echo "logs: $LOGS"
for mps in $MPS_SET; do
  if [ "$mps" = on ]; then
    mps_start || continue
  else
    mps_off
  fi
  for np in $NPS; do
    for mode in $MODES; do
      name="np$np-mps$mps-$mode"
      # Without MPS, weft stages ranks of different processes on one GPU
      # through host memory (NVIDIA's NCCL refuses them outright). Ranks on
      # hosts of their own go through the net transport instead.
      STAGED=()
      [ "$mps" = off ] && [ "$np" -gt 1 ] && [ ${#ANY[@]} -eq 0 ] && [ $HOSTS = 0 ] &&
        STAGED=(--staged)
      if [ $HOSTS = 1 ]; then
        run "$name-hosts" "$PY" -m torch.distributed.run --standalone --nproc-per-node "$np" \
          --no-python "$HERE/own_host.sh" "$PY" "$HERE/check_torch.py" --mode "$mode" \
          "${ANY[@]}" "${EXTRA[@]}"
      else
        run "$name" "$PY" -m torch.distributed.run --standalone --nproc-per-node "$np" \
          "$HERE/check_torch.py" --mode "$mode" "${ANY[@]}" "${STAGED[@]}" "${EXTRA[@]}"
      fi
    done
  done
  if [ "$mps" = on ]; then
    echo get_server_list | nvidia-cuda-mps-control >"$LOGS/mps-servers.txt" 2>&1
    [ -s "$LOGS/mps-servers.txt" ] || echo "    note: no MPS server was listed; MPS may not have been used"
    mps_stop
  fi
done

if [ "$NONBLOCKING" = 1 ]; then
  mps_off
  np=${NPS%% *}
  STAGED=()
  [ "$np" -gt 1 ] && [ ${#ANY[@]} -eq 0 ] && STAGED=(--staged)
  TORCH_NCCL_USE_COMM_NONBLOCKING=1 run "np$np-nonblocking-checks" "$PY" -m torch.distributed.run \
    --standalone --nproc-per-node "$np" "$HERE/check_torch.py" "${ANY[@]}" "${STAGED[@]}" \
    "${EXTRA[@]}"
fi

if [ "$CUPY" = 1 ]; then
  mps_off
  if "$PY" -c 'import cupy' 2>/dev/null; then
    run "cupy-np2" "$PY" "$HERE/check_cupy.py" 2 "${ANY[@]}"
  else
    echo "SKIP   cupy: $PY cannot import cupy"
  fi
fi

echo
echo "==== weft under PyTorch: $([ $FAILED = 0 ] && echo PASS || echo FAIL) ===="
printf '%s\n' "${SUMMARY[@]}"
echo "logs: $LOGS"
exit $FAILED
