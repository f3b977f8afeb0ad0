#!/usr/bin/env bash
# fuzz.sh [SECONDS]: run every Go fuzz target for SECONDS (default 10) each.
# CI runs it briefly; run it longer by hand. New crashers land in
# PKG/testdata/fuzz and become part of the seed corpus that go test replays.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
grep -l '^func Fuzz' $(git ls-files '*_test.go') | while read -r f; do
	pkg=./$(dirname "$f")
	for t in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$f"); do
		echo "== $pkg $t (${secs}s)"
		go test -run '^$' -fuzz "^${t}\$" -fuzztime "${secs}s" "$pkg"
	done
done
