#!/usr/bin/env bash
# Installs what weft builds against, into the system (apt) and into ./.deps (CUTLASS headers; the
# Python binding library, build backend and pytest).
# Safe to run again: every step checks first and does nothing when its result is already there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# The one pinned CUTLASS release; its PyPI wheel ships the C++ headers under cutlass_library/source/include.
cutlass_version=4.2.0.0
cutlass_dir="$root/.deps/cutlass-$cutlass_version"

need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v ninja >/dev/null || need_apt+=(ninja-build)
command -v g++ >/dev/null || need_apt+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing ${need_apt[*]} with apt" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "setup: missing ${need_apt[*]}; install them with your package manager" >&2
    exit 1
  fi
fi

# Python: the binding library, the build backend and pytest, pinned, into .deps/python (the CMake
# build and the tests find them there; nothing is installed into the interpreter).
python=${PYTHON:-python3}
python_deps="$root/.deps/python"
python_pins="nanobind==3.1.0 scikit-build-core==1.1.2 pytest==9.2.0"
if [ -f "$python_deps/.pins" ] && [ "$(cat "$python_deps/.pins")" = "$python_pins" ]; then
  echo "setup: $python_pins already in $python_deps" >&2
elif [ -n "${WEFT_SKIP_PYTHON:-}" ]; then
  echo "setup: WEFT_SKIP_PYTHON set; not fetching the Python build and test packages" >&2
else
  echo "setup: installing $python_pins into $python_deps" >&2
  rm -rf "$python_deps"
  "$python" -m pip install -q --disable-pip-version-check --target "$python_deps" $python_pins
  echo "$python_pins" > "$python_deps/.pins"
fi

if [ -f "$cutlass_dir/include/cutlass/version.h" ]; then
  echo "setup: CUTLASS $cutlass_version headers already in $cutlass_dir" >&2
elif [ -n "${WEFT_SKIP_CUTLASS:-}" ]; then
  echo "setup: WEFT_SKIP_CUTLASS set; not fetching CUTLASS" >&2
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "setup: fetching nvidia-cutlass==$cutlass_version headers from PyPI" >&2
  "$python" -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cutlass==$cutlass_version"
  "$python" - "$tmp" "$cutlass_dir" <<'PY'
import pathlib, sys, zipfile
src, dst = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheel = next(src.glob("nvidia_cutlass-*.whl"))
prefix = "cutlass_library/source/include/"
staging = dst.with_name(dst.name + ".partial")
import shutil; shutil.rmtree(staging, ignore_errors=True)  # left by an interrupted run
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            out = staging / "include" / name[len(prefix):]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(z.read(name))
staging.rename(dst)
PY
  echo "setup: CUTLASS headers in $cutlass_dir/include" >&2
fi
