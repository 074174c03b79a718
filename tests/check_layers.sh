#!/bin/sh
# The layer rules of docs/ARCHITECTURE.md ("What each layer may include"),
# checked on the source tree: every #include "..." of src/, transport/ and
# topo/ against what its layer may reach, and no engine tested by flag or
# called by its private functions outside exec/. Prints one line per
# breach (file:line: what, and the rule) and exits 1 if there is any.
#
# usage: check_layers.sh SOURCE_ROOT
set -u
root=${1:?usage: check_layers.sh SOURCE_ROOT}
cd "$root" || exit 2

# Headers a file outside its transport's folder may include: the shared
# transport headers at the top of transport/, and these: the network
# interface (net.h), the net transport's proxy side (net_fifo.h, which
# src/proxy/ drives) and its GPU side's FIFOs (net_gpu.h, which the CUDA
# engine hands to the proxy), and the p2p transport's slot-size rule
# (p2p.h). Add a transport's public header here (one word) when it gets one.
public_transport="transport/net/net.h transport/net/net_fifo.h transport/net/net_gpu.h
transport/p2p/p2p.h"

bad=0
breach() {
  echo "$1: includes \"$2\": $3"
  bad=1
}

in_list() { # word list...
  w=$1
  shift
  for x in "$@"; do [ "$x" = "$w" ] && return 0; done
  return 1
}

is_base() {
  case $1 in
    base/*) return 0 ;;
  esac
  return 1
}

# A header of transport/<t>/ that only transport/<t>/ may include.
is_transport_private() {
  case $1 in
    transport/*/*) ;;
    *) return 1 ;;
  esac
  # shellcheck disable=SC2086
  ! in_list "$1" $public_transport
}

# transport/<t>/ of a path (empty for the shared top level).
transport_dir() {
  case $1 in
    transport/*/*) echo "$1" | cut -d/ -f1-2 ;;
    *) echo "" ;;
  esac
}

check_file() {
  f=$1
  grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
    sed 's/^\([0-9]*\):.*"\([^"]*\)".*/\1 \2/' >"$tmp"
  while read -r line inc; do
    where="$f:$line"
    case $inc in
      nccl.h | weft.h | weft_config.h) continue ;;
    esac
    # A header next to the file, by its bare name (topo/ does this).
    [ -f "$(dirname "$f")/$inc" ] && case $inc in */*) ;; *) continue ;; esac
    case $f in
      src/base/*)
        is_base "$inc" || breach "$where" "$inc" "base/ includes only base/ headers"
        ;;
      topo/*)
        case $inc in topo/*) continue ;; esac
        # The one exception: the topology's RDMA ports are net/ib's port
        # discovery (issue 17: one discovery, so NIC k is net/ib's device k).
        [ "$f:$inc" = "topo/detect_ib.c:transport/net/ib/ib.h" ] && continue
        is_base "$inc" || breach "$where" "$inc" "topo/ includes only base/ and topo/ headers"
        ;;
      transport/*)
        is_base "$inc" && continue
        case $inc in
          transport/*) ;;
          *)
            breach "$where" "$inc" "transport/ includes only base/ and transport/ headers"
            continue
            ;;
        esac
        own=$(transport_dir "$f")
        if is_transport_private "$inc" && [ "$(transport_dir "$inc")" != "$own" ]; then
          breach "$where" "$inc" "a transport's private header (only its own folder includes it)"
        fi
        ;;
      src/core/* | src/api/* | src/sched/*)
        case $f:$inc in
          src/core/*:exec/*) breach "$where" "$inc" "core/ includes no exec/ header (the engine table is core/engine.h)" ;;
          src/core/*:sched/*) breach "$where" "$inc" "core/ includes no sched/ header (sched/ builds on core/comm.h)" ;;
          *:exec/engine.h) ;;
          *:exec/*) breach "$where" "$inc" "api/ and sched/ include exec/engine.h only" ;;
        esac
        case $f in
          src/core/* | src/sched/*)
            case $inc in api/*) breach "$where" "$inc" "core/ and sched/ never include api/" ;; esac
            ;;
        esac
        is_transport_private "$inc" && breach "$where" "$inc" "a transport's private header"
        ;;
      *)
        is_transport_private "$inc" && breach "$where" "$inc" "a transport's private header"
        ;;
    esac
  done <"$tmp"
}

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for f in $(find src transport topo -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' |
  sort); do
  check_file "$f"
done

# Engines are tables (core/engine.h): no flag tests and no engine's own
# functions outside exec/.
flags='(->|\.)(host_engine|staged)\b|weft_(host|cuda)_engine_[a-z_]+\(|weft_cuda_staged_[a-z_]+\('
if grep -nE "$flags" src/core/*.c src/core/*.h src/api/*.c src/api/*.h 2>/dev/null; then
  echo "the lines above test or call an engine directly; go through comm->engine (core/engine.h)"
  bad=1
fi

# The GPU transports make their own links (transport/gpu_transport.h): CUDA
# IPC only in transport/p2p/ (inboxes, and the direct collectives' boards
# through p2p.h's weft_p2p_ipc_*), net FIFOs opened and connected
# only in transport/net/ (the engine uploads what they fill).
if grep -nE 'cudaIpc[A-Za-z]+\(' $(find src transport -name '*.c' -o -name '*.h' -o -name '*.cu' |
  grep -v '^transport/p2p/'); then
  echo "the lines above use CUDA IPC outside transport/p2p/ (the p2p transport maps inboxes; others call weft_p2p_ipc_* of p2p.h)"
  bad=1
fi
if grep -nE 'weft_net_fifo_(open|connect)\(' $(find src -name '*.c' -o -name '*.h'); then
  echo "the lines above open net FIFOs outside transport/net/ (the net transport's GPU side does)"
  bad=1
fi

[ $bad -eq 0 ] && echo "layer rules hold"
exit $bad
