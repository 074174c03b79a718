#!/bin/sh
# weft-topo shows, per GPU, the NIC it uses, the path type to it and
# whether GPUDirect RDMA may cross it (NCCL_NET_GDR_LEVEL), in the text,
# JSON and Graphviz reports; and detection takes RDMA ports from net/ib's
# discovery (NCCL_IB_DISABLE reaches the topology).
#   weft_topo_nic_test.sh WEFT_TOPO FIXTURES_DIR IB_NET(0|1)
t=$1
dir=$2
ib_net=$3
fail() {
  echo "FAILED: $1"
  exit 1
}
# expect OUTPUT LINE...: every LINE is a whole line of OUTPUT.
expect() {
  out=$1
  shift
  for line in "$@"; do
    printf '%s\n' "$out" | grep -qxF -- "$line" || fail "no line '$line' in:
$out"
  done
}
unset NCCL_TOPO_FILE NCCL_NET_GDR_LEVEL NCCL_IB_DISABLE NCCL_IB_HCA

m=$("$t" --topo-file "$dir/nic-distances.xml") || fail "matrix exits $?"
expect "$m" "NIC per GPU (GDR level PXB):" \
  "  GPU0 -> NIC0 mlx5_0 port 1, PIX, GDR" \
  "  GPU1 -> NIC0 mlx5_0 port 1, PXB, GDR" \
  "  GPU2 -> NIC0 mlx5_0 port 1, PHB, no GDR (PHB beyond PXB)" \
  "  GPU3 -> NIC0 mlx5_0 port 1, SYS, no GDR (SYS beyond PXB)"
m=$(NCCL_NET_GDR_LEVEL=PHB "$t" --topo-file "$dir/nic-distances.xml") || fail "PHB exits $?"
expect "$m" "NIC per GPU (GDR level PHB):" "  GPU2 -> NIC0 mlx5_0 port 1, PHB, GDR" \
  "  GPU3 -> NIC0 mlx5_0 port 1, SYS, no GDR (SYS beyond PHB)"
m=$(NCCL_NET_GDR_LEVEL=1 "$t" --topo-file "$dir/nic-distances.xml") || fail "1 exits $?"
expect "$m" "NIC per GPU (GDR level PIX):" \
  "  GPU1 -> NIC0 mlx5_0 port 1, PXB, no GDR (PXB beyond PIX)"
m=$(NCCL_DEBUG=WARN NCCL_NET_GDR_LEVEL=fast "$t" --topo-file "$dir/nic-distances.xml" 2>&1) ||
  fail "a bad level exits $?"
printf '%s\n' "$m" | grep -q "NCCL_NET_GDR_LEVEL=fast is not valid (expected one of LOC,.*PXB.*SYS, or 0..5); using the default PXB" ||
  fail "a bad NCCL_NET_GDR_LEVEL is not named with the values expected: $m"
expect "$m" "NIC per GPU (GDR level PXB):"

j=$("$t" --topo-file "$dir/nic-distances.xml" --json) || fail "--json exits $?"
printf '%s\n' "$j" | grep -q '"gdr_level": "PXB"' || fail "json: no gdr_level"
printf '%s\n' "$j" | grep -q '"index": 0, .*"nearest_nic": 0, "nic_path": "PIX", "gdr": true}' ||
  fail "json: GPU0's NIC, path or GDR"
printf '%s\n' "$j" | grep -q '"index": 3, .*"nearest_nic": 0, "nic_path": "SYS", "gdr": false}' ||
  fail "json: GPU3's NIC, path or GDR"
d=$("$t" --topo-file "$dir/nic-distances.xml" --dot) || fail "--dot exits $?"
[ "$(printf '%s\n' "$d" | grep -c 'style=dotted.*label="uses: ')" -eq 4 ] ||
  fail "dot: not one 'uses' edge per GPU"
printf '%s\n' "$d" | grep -q 'label="uses: SYS, no GDR"' || fail "dot: GPU3's edge"

m=$("$t" --topo-file "$dir/nic-speeds.xml") || fail "speeds exits $?"
expect "$m" "  GPU0 -> NIC1 mlx5_1 port 1, PIX, GDR" "  GPU1 -> NIC3 mlx5_3 port 1, PIX, GDR" \
  "  GPU2 -> NIC2 mlx5_2 port 1, PIX, no GDR (gdr=0 in the topology)"
m=$("$t" --topo-file "$dir/no-nic.xml") || fail "no-nic exits $?"
expect "$m" "NIC per GPU: none (the topology has no NIC)"
j=$("$t" --topo-file "$dir/no-nic.xml" --json) || fail "no-nic --json exits $?"
printf '%s\n' "$j" | grep -q '"nearest_nic": -1, "nic_path": null, "gdr": false}' ||
  fail "json: a GPU without NIC"

# Detection: the RDMA ports are net/ib's, so its NCCL_IB_DISABLE applies.
m=$(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=GRAPH NCCL_IB_DISABLE=1 "$t" 2>&1) || fail "detect exits $?"
if [ "$ib_net" = 1 ]; then
  printf '%s\n' "$m" | grep -q "topology: no RDMA port (NCCL_IB_DISABLE=1)" ||
    fail "detection did not go through net/ib (NCCL_IB_DISABLE=1 not seen): $m"
  m=$(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=GRAPH "$t" 2>&1) || fail "detect exits $?"
  printf '%s\n' "$m" | grep -Eq "topology: (no RDMA port \(.+\)|net/ib found [0-9]+ RDMA ports)" ||
    fail "detection says nothing of RDMA ports: $m"
else
  printf '%s\n' "$m" | grep -q "topology: built without <infiniband/verbs.h>" ||
    fail "no INFO line for a build without the verbs header: $m"
fi
echo "passed"
