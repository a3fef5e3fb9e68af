#!/bin/sh
# The Debian package on a clean Debian 12: debootstrap a minimal bookworm
# into a scratch directory, install the package there with apt (so its
# dependencies resolve from Debian's mirror, as a user's would), then run
# `moestream version` and `moestream run` on the installed demo model and
# check the man page and docs are where the package says. Needs root and
# network access to the mirror. Usage: scripts/deb-test.sh PACKAGE.deb [MIRROR]
set -eu
deb=${1:?usage: scripts/deb-test.sh PACKAGE.deb [MIRROR]}
mirror=${2:-http://deb.debian.org/debian}
[ -f "$deb" ] || { echo "deb-test: $deb: no such file" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "deb-test: needs root (debootstrap, chroot)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "deb-test: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }

start=$(date +%s)
root=$(mktemp -d /tmp/moestream-deb-test.XXXXXX)
cleanup() {
    umount "$root/proc" 2>/dev/null || true
    rm -rf "$root"
}
trap cleanup EXIT INT TERM

echo "deb-test: debootstrap bookworm (minbase) from $mirror into $root"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 || {
    tail -20 "$root.log" >&2; rm -f "$root.log"; echo "deb-test: debootstrap failed" >&2; exit 1; }
rm -f "$root.log"
mount -t proc proc "$root/proc"
cp "$deb" "$root/tmp/"
name=$(basename "$deb")
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }

echo "deb-test: apt-get install ./$name"
in_root sh -c "apt-get update -qq && cd /tmp && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ./$name" \
    >"$root/tmp/apt.log" 2>&1 || { cat "$root/tmp/apt.log" >&2; echo "deb-test: apt-get install failed" >&2; exit 1; }
in_root dpkg-query -W -f='deb-test: installed ${Package} ${Version}, depends on ${Depends}\n' moestream

in_root dpkg -L moestream | grep -q '^/usr/bin/moestream$'
for f in /usr/share/man/man1/moestream.1.gz /usr/share/doc/moestream/README.md /usr/share/moestream/demo-Q8_0.gguf; do
    in_root test -s "$f" || { echo "deb-test: $f is not installed" >&2; exit 1; }
done
in_root sh -c 'zcat /usr/share/man/man1/moestream.1.gz | grep -q "^\.SS run"' ||
    { echo "deb-test: the man page has no run section" >&2; exit 1; }

in_root moestream --version
out=$(in_root moestream run -m /usr/share/moestream/demo-Q8_0.gguf -p "It is my duty to" -n 24 --mem 28M -c 512 --seed 2 2>"$root/tmp/stderr") || {
    cat "$root/tmp/stderr" >&2; echo "deb-test: moestream run failed" >&2; exit 1; }
echo "$out"
grep -q '^backend: CPU' "$root/tmp/stderr" || { cat "$root/tmp/stderr" >&2; echo "deb-test: no backend line" >&2; exit 1; }
grep '^backend:' "$root/tmp/stderr"
# The prompt and at least a few generated words.
[ "$(printf '%s' "$out" | wc -w)" -gt 8 ] || { echo "deb-test: too little text generated" >&2; exit 1; }
# Nothing installed may point back at the machine it was built on: the
# source tree (and its build folder) or the ../shared beside it.
src=$(cd "$(dirname "$0")/.." && pwd)
for tree in "$src" "$(dirname "$src")/shared"; do
    if grep -rqaF "$tree/" "$root/usr/bin/moestream" "$root/usr/share/moestream"; then
        echo "deb-test: the installed files refer to $tree/ on the build machine" >&2
        exit 1
    fi
done
echo "deb-test: passed in $(( $(date +%s) - start )) s"
