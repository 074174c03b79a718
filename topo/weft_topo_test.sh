#!/bin/sh
# weft-topo --version names weft's version and the NCCL version it
# implements; on a topology whose links report no speed (FILE.xml) every
# output says "unknown" where it has no figure.
#   weft_topo_test.sh WEFT_TOPO VERSION FILE.xml
t=$1
version=$2
xml=$3
fail() {
  echo "FAILED: $1"
  exit 1
}
v=$("$t" --version) || fail "--version exits $?"
echo "$v"
echo "$v" | grep -q "^weft-topo $version (implements NCCL [0-9]*\.[0-9]*\.[0-9]*)$" ||
  fail "--version: expected 'weft-topo $version (implements NCCL x.y.z)'"
m=$("$t" --topo-file "$xml") || fail "matrix exits $?"
echo "$m"
echo "$m" | grep -q "NIC0: eth9.* (speed unknown)$" || fail "matrix: the NIC's speed is not 'unknown'"
echo "$m" | grep -q "^GPU0 .* SHM unknown" ||
  fail "matrix: the GPU pair's bandwidth is not 'unknown'"
j=$("$t" --topo-file "$xml" --json) || fail "--json exits $?"
echo "$j" | grep -q '"speed_mbps": null' || fail "json: the NIC's speed is not null"
echo "$j" | grep -q '"speed_mbps": 0' && fail "json: 0 for an unknown speed"
echo "$j" | grep -q '"gpu_gpu_bw": \[' || fail "json: no gpu_gpu_bw"
d=$("$t" --topo-file "$xml" --dot) || fail "--dot exits $?"
echo "$d" | grep -q 'speed unknown (24 GB/s assumed)' || fail "dot: no 'speed unknown' edge"
echo "passed"
