#!/usr/bin/env bash
# test_install.sh BUILD SRC — `cmake --install` of BUILD into a temporary
# prefix, then the C example (examples/) built against what was installed:
# with CMake (find_package(h3block)) and with pkg-config, each linked once
# against the shared and once (CMake) against the static library, and run
# (exit 0, or 77 without a GPU: both fine here; what is tested is that the
# installed header, libraries, CMake package and .pc file work).
set -uo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
step() { echo "== $*"; }
bad() { echo "FAIL: $*"; fail=1; }
run_example() { # run_example NAME EXE
  local out rc
  out=$("$2" 2>&1); rc=$?
  echo "$out" | sed 's/^/   /'
  case $rc in
  0) echo "ok: $1 ran and matched exact attention" ;;
  77) grep -q '^skipped: ' <<<"$out" && echo "ok: $1 ran (no GPU: skipped)" || bad "$1: exit 77 without saying why" ;;
  *) bad "$1: exit $rc" ;;
  esac
}
step "cmake --install $build --prefix $tmp/prefix"
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; bad "install"; exit 1; }
for f in include/h3block.h lib/libh3block.a lib/cmake/h3block/h3blockConfig.cmake lib/pkgconfig/h3block.pc; do
  [ -f "$tmp/prefix/$f" ] || bad "not installed: $f"
done
compgen -G "$tmp/prefix/lib/libh3block.so*" >/dev/null || bad "not installed: lib/libh3block.so"
nm -D --defined-only "$tmp/prefix/lib/libh3block.so" | awk '{print $3}' | grep -v '^h3b_' | head -5 >"$tmp/extra"
[ -s "$tmp/extra" ] && bad "libh3block.so exports more than h3b_*: $(tr '\n' ' ' <"$tmp/extra")"

step "the example with find_package(h3block)"
if cmake -S "$src/examples" -B "$tmp/ex" -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/ex.log" 2>&1 &&
   cmake --build "$tmp/ex" >>"$tmp/ex.log" 2>&1; then
  run_example "cmake example" "$tmp/ex/attention"
else
  cat "$tmp/ex.log"; bad "the example did not build against the installed package"
fi

step "the example against libh3block.a (h3block::h3block_static)"
sed 's/h3block::h3block /h3block::h3block_static /' "$src/examples/CMakeLists.txt" >"$tmp/CMakeLists.txt"
mkdir -p "$tmp/exs" && cp "$src/examples/attention.c" "$tmp/CMakeLists.txt" "$tmp/exs/"
if cmake -S "$tmp/exs" -B "$tmp/exs/b" -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/exs.log" 2>&1 &&
   cmake --build "$tmp/exs/b" >>"$tmp/exs.log" 2>&1; then
  ldd "$tmp/exs/b/attention" | grep -q libh3block && bad "the static example links libh3block.so"
  run_example "static example" "$tmp/exs/b/attention"
else
  cat "$tmp/exs.log"; bad "the example did not build against libh3block.a"
fi

step "the example with pkg-config"
flags=$(PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig" pkg-config --cflags --libs h3block) || bad "pkg-config h3block"
cuda=()
if grep -q "lcudart" "$tmp/prefix/lib/pkgconfig/h3block.pc"; then
  libdir=$(sed -n 's/.*-L\([^ ]*\) -lcudart.*/\1/p' "$tmp/prefix/lib/pkgconfig/h3block.pc")
  cuda=(-DH3_EXAMPLE_CUDA -I"$libdir/../include" -L"$libdir" -lcudart)
fi
# shellcheck disable=SC2086
if cc "$src/examples/attention.c" $flags "${cuda[@]}" -lm -Wl,-rpath,"$tmp/prefix/lib" -o "$tmp/pc_attention" 2>"$tmp/pc.log"; then
  run_example "pkg-config example" "$tmp/pc_attention"
else
  cat "$tmp/pc.log"; bad "the example did not build with pkg-config's flags"
fi
[ $fail -eq 0 ] && echo "ok: installed package: header, libh3block.so (h3b_* only), libh3block.a, CMake package, pkg-config"
exit $fail
