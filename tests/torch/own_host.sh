#!/bin/sh
# Runs a command as if on a host of its own: in a UTS namespace whose host
# name is weft-host-$LOCAL_RANK (torchrun sets LOCAL_RANK), so weft's host
# identity (host name and boot id) differs between the ranks of one machine.
# Where a UTS namespace cannot be made (no privilege), NCCL_HOSTID gives the
# rank the same distinct identity instead. Used by run.sh --hosts.
#
#   own_host.sh COMMAND [ARGS...]
name="weft-host-${LOCAL_RANK:-0}"
if unshare -u true 2>/dev/null; then
  exec unshare -u sh -c 'hostname "$0" && exec "$@"' "$name" "$@"
fi
echo "own_host.sh: no UTS namespace here (unshare -u failed): NCCL_HOSTID=$name" >&2
NCCL_HOSTID=$name exec "$@"
