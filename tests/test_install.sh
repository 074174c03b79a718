#!/bin/sh
# The installed library as NCCL users consume it: `meson install --destdir`
# into a temporary directory, then a program compiled with
# `pkg-config --cflags --libs nccl` (-lnccl, libnccl.so.2) and one linked
# statically against libnccl_static.a (`pkg-config --static`); both run.
# Usage: test_install.sh BUILD_DIR SOURCE_FILE
set -eu
build=$1
src=$2
cc=${CC:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-test-install-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

fail() { echo "test_install: $*"; exit 1; }

meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/root" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "meson install --destdir failed"; }

pc=$(find "$tmp/root" -name nccl.pc | head -n 1)
[ -n "$pc" ] || fail "no nccl.pc installed"
libdir=$(dirname "$(dirname "$pc")")
[ -f "$libdir/libnccl_static.a" ] || fail "no libnccl_static.a beside nccl.pc ($libdir)"
[ -e "$libdir/libnccl.so.2" ] || fail "no libnccl.so.2 in $libdir"
for f in $(find "$tmp/root" -name 'libweft*'); do fail "a second copy of the library: $f"; done

# The .pc file names the prefix; the sysroot maps it into the destdir.
export PKG_CONFIG_PATH="$(dirname "$pc")"
export PKG_CONFIG_SYSROOT_DIR="$tmp/root"
libs=$(pkg-config --libs nccl)
case " $libs " in *" -lnccl "*) ;; *) fail "pkg-config --libs nccl gave '$libs', not -lnccl" ;; esac
[ "$(pkg-config --modversion nccl)" != "" ] || fail "nccl.pc has no Version"

# shellcheck disable=SC2046
$cc -o "$tmp/app_shared" "$src" $(pkg-config --cflags --libs nccl) ||
  fail "could not build against pkg-config nccl"
LD_LIBRARY_PATH="$libdir" "$tmp/app_shared" || fail "the program linked to libnccl.so.2 failed"
LD_LIBRARY_PATH="$libdir" ldd "$tmp/app_shared" | grep -q "$libdir/libnccl.so.2" ||
  fail "the program did not load the installed libnccl.so.2"

# Static: -lnccl_static, with what nccl.pc's Libs.private says it needs.
private=$(pkg-config --static --libs nccl | sed 's/ -lnccl / /; s/ -lnccl$//; s/^-lnccl //')
# shellcheck disable=SC2086
$cc -o "$tmp/app_static" "$src" $(pkg-config --cflags nccl) -L"$libdir" -lnccl_static $private ||
  fail "could not link statically against libnccl_static.a"
if readelf -d "$tmp/app_static" | grep -q 'libnccl'; then fail "the static program needs libnccl"; fi
"$tmp/app_static" || fail "the program linked to libnccl_static.a failed"
echo "test_install: shared and static programs ran"
