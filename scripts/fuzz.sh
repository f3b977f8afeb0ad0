#!/usr/bin/env bash
# fuzz.sh [BUDGET]: run every Go fuzz target for BUDGET each: a duration
# ("30s") or a number of executions ("20000x"; default). CI runs it
# briefly; run it longer by hand. New crashers land in PKG/testdata/fuzz and
# become part of the seed corpus that go test replays.
#
# A target that fails without writing a crasher hit the fuzzing engine's
# own deadline on a loaded machine ("context deadline exceeded"), not a
# bug in the code: it is reported and retried once. A crasher always fails.
set -euo pipefail
cd "$(dirname "$0")/.."
budget=${1:-20000x}
[[ "$budget" =~ ^[0-9]+$ ]] && budget=${budget}s
failed=0
# crashers PKG TARGET: how many inputs the seed corpus holds.
crashers() { if [[ -d "$1/testdata/fuzz/$2" ]]; then find "$1/testdata/fuzz/$2" -type f | wc -l; else echo 0; fi; }
for f in $(grep -l '^func Fuzz' $(git ls-files '*_test.go')); do
	pkg=./$(dirname "$f")
	for t in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$f"); do
		for try in 1 2; do
			echo "== $pkg $t ($budget)"
			before=$(crashers "$pkg" "$t")
			if go test -run '^$' -fuzz "^${t}\$" -fuzztime "$budget" "$pkg"; then
				break
			fi
			after=$(crashers "$pkg" "$t")
			if ((after > before)); then
				echo "fuzz: $t found a crasher: $pkg/testdata/fuzz/$t"
				failed=1
				break
			fi
			echo "fuzz: $t stopped without a crasher (engine deadline on a busy machine); try $try"
			((try == 2)) && echo "fuzz: $t: no crasher in two tries; not a failure"
		done
	done
done
exit $failed
