#!/bin/sh
# tune-sweep.sh: the runs the tuning model is fitted from. weft-bench once
# per forced NCCL_ALGO x NCCL_PROTO and once by default, each writing
# --json into DIR (and a short run with NCCL_DEBUG_SUBSYS=TUNING, whose
# lines name the path type); then weft-fit prints the rows for sched/tuning_fit.c
# and the verification table (also kept in DIR/fit.txt).
#
# usage: tune-sweep.sh [-o DIR] [--bench PATH] [--fit PATH] [--algos LIST]
#                      [--protos LIST] [--path NAME] [--machine NAME] [--check]
#                      -- COLLECTIVE [weft-bench flags...]
#   --algos   default "Ring Tree Direct" for allreduce, "Ring" otherwise
#   --protos  default "Simple LL", "Simple" with --cpu or WEFT_DEVICE=cpu
#             (host ranks run Simple whatever NCCL_PROTO says)
#   --path    the path type of the rows; default: the one the default
#             run's TUNING lines name
#   --check   exit 1 when the default is not within 10% of the best forced
#             configuration at every size
#   weft-bench and weft-fit: --bench/--fit, else $WEFT_BENCH/$WEFT_FIT,
#   else next to this script, else on PATH.
# Example (docs/PERFORMANCE.md, "Tuning model"):
#   bench/tune-sweep.sh -o /tmp/sweep-8 --bench build/bench/weft-bench \
#     --fit build/bench/weft-fit -- allreduce --gpu -np 1 -t 8 -b 8 -e 4G -f 2 -n 5 -w 1 -c 0
set -u

die() {
  echo "tune-sweep.sh: $*" >&2
  exit 2
}

dir=tune-sweep.$$
bench=${WEFT_BENCH:-}
fit=${WEFT_FIT:-}
algos=
protos=
path=
machine=
check=
while [ $# -gt 0 ]; do
  case $1 in
    -o) dir=${2:?-o: expected a directory}; shift 2 ;;
    --bench) bench=${2:?--bench: expected weft-bench}; shift 2 ;;
    --fit) fit=${2:?--fit: expected weft-fit}; shift 2 ;;
    --algos) algos=${2:?--algos: expected a list}; shift 2 ;;
    --protos) protos=${2:?--protos: expected a list}; shift 2 ;;
    --path) path=${2:?--path: expected a path type}; shift 2 ;;
    --machine) machine=${2:?--machine: expected a name}; shift 2 ;;
    --check) check=--check; shift ;;
    --) shift; break ;;
    *) die "unknown flag $1 (weft-bench's flags go after --)" ;;
  esac
done
[ $# -gt 0 ] || die "no collective: expected -- COLLECTIVE [weft-bench flags...]"
coll=$1

here=$(dirname "$0")
find_tool() { # name given
  if [ -n "$2" ]; then echo "$2"
  elif [ -x "$here/$1" ]; then echo "$here/$1"
  else command -v "$1" || die "$1 not found: give --bench/--fit or put it on PATH"
  fi
}
bench=$(find_tool weft-bench "$bench") || exit 2
fit=$(find_tool weft-fit "$fit") || exit 2

if [ -z "$algos" ]; then
  case $coll in
    allreduce | all_reduce*) algos="Ring Tree Direct" ;;
    *) algos=Ring ;;
  esac
fi
if [ -z "$protos" ]; then
  protos="Simple LL"
  case " $* " in *" --cpu "*) protos=Simple ;; esac
  [ "${WEFT_DEVICE:-}" = cpu ] && protos=Simple
fi

mkdir -p "$dir" || die "cannot make $dir"
cmd="weft-bench $*"
configs=
for a in $algos; do
  for p in $protos; do
    name=$a-$p
    echo "tune-sweep.sh: NCCL_ALGO=$a NCCL_PROTO=$p $cmd" >&2
    if NCCL_ALGO=$a NCCL_PROTO=$p "$bench" "$@" --json "$dir/$name.json" >"$dir/$name.txt" 2>&1; then
      configs="$configs $a/$p=$dir/$name.json"
    else
      echo "tune-sweep.sh: $a/$p failed (exit $?), left out; see $dir/$name.txt" >&2
    fi
  done
done
[ -n "$configs" ] || die "no forced run succeeded; see $dir/*.txt"

echo "tune-sweep.sh: default: $cmd" >&2
"$bench" "$@" --json "$dir/default.json" >"$dir/default.txt" 2>&1 ||
  die "the default run failed (exit $?); see $dir/default.txt"
if [ -z "$path" ]; then
  # The path type from the TUNING lines of a short run (logging every call
  # would slow the timed one): weft-bench takes the last of a repeated flag.
  rm -f "$dir"/default.tuning.*
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING NCCL_DEBUG_FILE="$dir/default.tuning.%h.%p" \
    "$bench" "$@" -b 1024 -e 1024 -n 1 -w 0 -c 0 >/dev/null 2>&1
  path=$(cat "$dir"/default.tuning.* 2>/dev/null | sed -n 's/.* path \([a-z-]*\): .*/\1/p' | sort |
    uniq -c | sort -rn | sed -n '1s/^ *[0-9]* //p')
  [ -n "$path" ] || die "no TUNING line in $dir/default.tuning.*: give --path"
fi

# shellcheck disable=SC2086 # configs is a list of words without blanks in them
"$fit" --path "$path" --command "$cmd" ${machine:+--machine "$machine"} $check $configs \
  default="$dir/default.json" >"$dir/fit.txt"
rc=$?
cat "$dir/fit.txt"
exit $rc
