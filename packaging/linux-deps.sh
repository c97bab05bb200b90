#!/usr/bin/env bash
# System libraries DraftPair needs on Debian/Ubuntu: an optimized BLAS for MLX's CPU backend,
# and what Qt (PySide6) loads for its offscreen and X11 platforms. Installs only what is
# missing, only as root with apt-get; otherwise prints the command to run.
set -u
[ "$(uname -s)" = "Linux" ] || exit 0
command -v dpkg >/dev/null 2>&1 || { echo "linux-deps: not a Debian system, skipping"; exit 0; }
PKGS="libopenblas0-pthread libegl1 libgl1 libfontconfig1 libfreetype6 libdbus-1-3 libglib2.0-0
libxkbcommon0 libxkbcommon-x11-0 libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-image0
libxcb-render-util0 libxcb-shape0 libxcb-xinerama0 libxcb-randr0 libxcb-xkb1 libx11-xcb1
libxcb-xfixes0 libxcb-sync1 libxcb-shm0"
missing=""
for p in $PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "linux-deps: installing$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q $missing >/dev/null 2>&1 || {
    apt-get update -q >/dev/null 2>&1
    apt-get install -y -q $missing >/dev/null || echo "linux-deps: could not install$missing" >&2
  }
else
  echo "linux-deps: missing system packages:$missing" >&2
  echo "  install them with: sudo apt-get install$missing" >&2
fi
exit 0
