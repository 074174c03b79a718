#!/bin/sh
# Every row of the parameter table is read somewhere: a variable listed in
# docs/ENVIRONMENT.md but read nowhere (NCCL_SOCKET_NTHREADS was one) makes
# users tune a knob that does nothing. Usage: test_params_used.sh SOURCE_ROOT
set -eu
root=$1
ids=$(grep -o 'WEFT_PARAM_[A-Z0-9_]*,' "$root/src/base/param.h" | tr -d , | grep -v -e '^WEFT_PARAM_COUNT$' -e '^WEFT_PARAM_KIND_')
[ -n "$ids" ] || { echo "no parameter ids in src/base/param.h"; exit 1; }
bad=0
for id in $ids; do
  if ! grep -rqw --include='*.c' --exclude='param.c' --exclude='param_table.c' "$id" \
      "$root/src" "$root/transport" "$root/topo"; then
    echo "test_params_used: $id is in the table but nothing reads it"
    bad=1
  fi
done
exit $bad
