#!/usr/bin/env bash
# Build a real toxiproxy-server from a checkout of its source, on a box that reaches Debian's packages but not Go's
# module proxy: Debian's Go (1.19) and Debian's packages of its libraries, in GOPATH mode. The bundled server's
# side-by-side tests and benches use it from PATH (tests/proxy/toxiproxy, bench/l4_proxy.py,
# bench/relay_overhead.py).
#
# Usage: scripts/build-toxiproxy.sh SRC [OUT]    SRC: a checkout of github.com/Shopify/toxiproxy (a git repository
#        is read at the tag in TAG, default v2.12.0; a plain folder as it is); OUT: where toxiproxy-server goes
#        (default /tmp/toxbin). Then: PATH=/tmp/toxbin:$PATH python -m pytest tests/proxy/toxiproxy
#
# The libraries are Debian's, older than the release's (zerolog 1.26, prometheus client 1.14, urfave/cli 2.3):
# one call differs, zerolog's CallerMarshalFunc, which lost its pc argument later; the copy built here is edited
# for it. It is the server's code at that tag, not its release binary: BENCHMARKS.md says which figures it gave.
set -euo pipefail
src=${1:?usage: scripts/build-toxiproxy.sh SRC [OUT]}
out=${2:-/tmp/toxbin}
tag=${TAG:-v2.12.0}
apt-get install -y -q golang-go golang-github-gorilla-mux-dev golang-github-prometheus-client-golang-dev \
  golang-github-rs-zerolog-dev golang-github-urfave-cli-v2-dev golang-golang-x-term-dev golang-gopkg-tomb.v1-dev \
  >/dev/null
gopath=$(mktemp -d)
trap 'rm -rf "$gopath"' EXIT
pkg=$gopath/src/github.com/Shopify/toxiproxy/v2  # the module path, /v2 included, as GOPATH mode resolves imports
mkdir -p "$pkg"
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$src" archive "$tag" | tar -x -C "$pkg"
else
  cp -r "$src"/. "$pkg"
fi
old='CallerMarshalFunc = func(pc uintptr, file string, line int) string {'
new='CallerMarshalFunc = func(file string, line int) string {'
sed -i "s/$old/$new/" "$pkg/cmd/server/server.go"
mkdir -p "$out"
(cd "$pkg" && GOPATH="$gopath:/usr/share/gocode" GO111MODULE=off GOFLAGS= go build \
  -ldflags "-X github.com/Shopify/toxiproxy/v2.Version=${tag#v}" -o "$out/toxiproxy-server" ./cmd/server)
"$out/toxiproxy-server" --version
