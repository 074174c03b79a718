#!/bin/sh
# tune-sweep.sh: the runs the tuning model is fitted from. weft-bench once
# per forced NCCL_ALGO x NCCL_PROTO and once by default, each writing
# --json into DIR (and a short run with NCCL_DEBUG_SUBSYS=TUNING, whose
# lines name the path type); then weft-fit prints the rows for
# sched/tuning_fit.c and the verification table (also kept in
# DIR/fit.txt). Exit: weft-fit's (1 only with --check), 2 on errors.
#
# usage: tune-sweep.sh [-o DIR] [--bench PATH] [--fit PATH] [--algos LIST]
#                      [--protos LIST] [--ll-max SIZE] [--path NAME]
#                      [--machine NAME] [--check] -- COLLECTIVE [weft-bench flags...]
#   --algos   default "Ring Tree Direct" for allreduce, "Ring" otherwise
#   --protos  default "Simple LL" ("Simple LL LL128" over NVLink, where LL128 runs), "Simple" with --cpu or WEFT_DEVICE=cpu
#             (host ranks run Simple whatever NCCL_PROTO says)
#   --ll-max  LL runs stop at SIZE (weft-bench's -e), where LL has long
#             lost (its lines are half flag) and its largest sizes would
#             take most of the sweep's time; default: the whole range
#   --path    the path type of the rows; default: the one the default
#             run's TUNING lines name
#   --check   exit 1 when the default is not within 10% of the best forced
#             configuration at every size
#   weft-bench and weft-fit: --bench/--fit, else $WEFT_BENCH/$WEFT_FIT,
#   else next to this script, else on PATH.
# Example (docs/PERFORMANCE.md, "Tuning model"):
#   bench/tune-sweep.sh -o /tmp/sweep-8 --bench build/bench/weft-bench \
#     --fit build/bench/weft-fit --ll-max 64M -- \
#     allreduce --gpu -np 1 -t 8 -b 8 -e 4G -f 2 -n 10 -w 2 -c 0
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
llmax=
while [ $# -gt 0 ]; do
  case $1 in
    -o) dir=${2:?-o: expected a directory}; shift 2 ;;
    --bench) bench=${2:?--bench: expected weft-bench}; shift 2 ;;
    --fit) fit=${2:?--fit: expected weft-fit}; shift 2 ;;
    --algos) algos=${2:?--algos: expected a list}; shift 2 ;;
    --protos) protos=${2:?--protos: expected a list}; shift 2 ;;
    --path) path=${2:?--path: expected a path type}; shift 2 ;;
    --ll-max) llmax=${2:?--ll-max: expected a size}; shift 2 ;;
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
    cap=
    [ "$p" = LL ] && [ -n "$llmax" ] && cap="-e $llmax"
    echo "tune-sweep.sh: NCCL_ALGO=$a NCCL_PROTO=$p $cmd${cap:+ $cap}" >&2
    # shellcheck disable=SC2086 # cap is empty or two words
    if NCCL_ALGO=$a NCCL_PROTO=$p "$bench" "$@" $cap --json "$dir/$name.json" >"$dir/$name.txt" 2>&1; then
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
"$fit" --path "$path" --command "$cmd${llmax:+ (LL runs: -e $llmax)}" ${machine:+--machine "$machine"} $check $configs \
  default="$dir/default.json" >"$dir/fit.txt"
rc=$?
cat "$dir/fit.txt"
exit $rc
