#!/bin/sh
# libibverbs is opened at run time (transport/net/ib/ib_verbs.c, whose
# discovery the topology shares): no binary of weft links it, so libnccl
# and weft-topo load where rdma-core is not installed. Exits 77 (skip)
# without readelf.
#   check_no_ibverbs_link.sh BINARY...
command -v readelf >/dev/null 2>&1 || {
  echo "readelf not found (binutils): cannot read the dynamic sections"
  exit 77
}
bad=0
for f in "$@"; do
  needed=$(readelf -d "$f" | grep NEEDED) || {
    echo "FAILED: $f has no dynamic section readelf can read"
    exit 1
  }
  if printf '%s\n' "$needed" | grep -q libibverbs; then
    echo "FAILED: $f links libibverbs:"
    printf '%s\n' "$needed"
    bad=1
  fi
done
[ $bad -eq 0 ] && echo "no libibverbs link in: $*"
exit $bad
