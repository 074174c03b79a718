#!/bin/sh
# Runs weft-bench and weft-mpi-ref on the same sizes with the same ranks,
# one after the other, and prints both tables and a merged one:
# size, type, op, each one's time and busbw, and weft/MPI.
#
#   bench/compare-mpi.sh [-B BUILDDIR] [-np N] [COLLECTIVE] [FLAGS...]
#
# FLAGS go to both programs; weft-mpi-ref takes -b -e -f -i -n -w -c -d -o
# -r -a. N defaults to 2, BUILDDIR to build. MPIRUN (default "mpirun
# --allow-run-as-root --oversubscribe"), WEFT_BENCH and WEFT_MPI_REF
# override the launcher and the binaries. Exit status: 0 when both ran
# cleanly, otherwise the first failing program's.
set -u

builddir=build
np=2
while [ $# -gt 0 ]; do
  case "$1" in
    -B) builddir=$2; shift 2 ;;
    -np|--np) np=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done

mpirun=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe}
weft=${WEFT_BENCH:-$builddir/bench/weft-bench}
ref=${WEFT_MPI_REF:-$builddir/bench/weft-mpi-ref}
for bin in "$weft" "$ref"; do
  if [ ! -x "$bin" ]; then
    echo "compare-mpi.sh: $bin not found (build with -Dmpi=enabled, or set WEFT_BENCH / WEFT_MPI_REF)" >&2
    exit 2
  fi
done

tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM

# weft-bench joins the MPI job when it was built with MPI; otherwise it
# forks its N ranks itself. Both ways give N host ranks on this machine:
# --cpu keeps them on host buffers where there is a GPU too, since MPI's
# side runs on host buffers.
if "$weft" --version | grep -q 'mpi: yes'; then
  $mpirun -np "$np" "$weft" --cpu "$@" >"$tmp/weft" 2>"$tmp/weft.err"
else
  "$weft" --cpu -np "$np" "$@" >"$tmp/weft" 2>"$tmp/weft.err"
fi
weft_rc=$?
$mpirun -np "$np" "$ref" "$@" >"$tmp/mpi" 2>"$tmp/mpi.err"
mpi_rc=$?

echo "######## weft-bench (exit $weft_rc)"
cat "$tmp/weft" "$tmp/weft.err"
echo
echo "######## weft-mpi-ref (exit $mpi_rc)"
cat "$tmp/mpi" "$tmp/mpi.err"
echo

# Rows are the lines not starting with '#'; both programs print the same
# rows in the same order. Out-of-place columns: time $6, busbw $8.
# The ratio is weft busbw / MPI busbw, computed as MPI time / weft time so
# small sizes, whose busbw rounds to 0.00, still get one.
echo "######## weft vs MPI, $np ranks, out-of-place (time in us, busbw in GB/s)"
awk '
  /^#/ || NF < 13 { next }
  FILENAME == ARGV[1] { n1++; size[n1] = $1; type[n1] = $3; op[n1] = $4; wt[n1] = $6; wb[n1] = $8 }
  FILENAME == ARGV[2] { n2++; mt[n2] = $6; mb[n2] = $8 }
  END {
    printf "# %10s  %8s  %6s  %10s  %10s  %10s  %10s  %8s\n", "size", "type", "redop",
           "weft time", "MPI time", "weft busbw", "MPI busbw", "weft/MPI"
    n = n1 < n2 ? n1 : n2
    for (i = 1; i <= n; i++) {
      ratio = wt[i] > 0 ? mt[i] / wt[i] : 0
      printf "%12s  %8s  %6s  %10s  %10s  %10s  %10s  %8.2f\n", size[i], type[i], op[i],
             wt[i], mt[i], wb[i], mb[i], ratio
      if (ratio > 0) { logsum += log(ratio); nr++ }
    }
    if (nr > 0)
      printf "# Geometric mean of weft/MPI : %.2f over %d sizes\n", exp(logsum / nr), nr
    if (n1 != n2)
      printf "# Row counts differ (weft %d, MPI %d): compared the first %d\n", n1, n2, n
  }' "$tmp/weft" "$tmp/mpi"

if [ "$weft_rc" -ne 0 ]; then exit "$weft_rc"; fi
exit "$mpi_rc"
