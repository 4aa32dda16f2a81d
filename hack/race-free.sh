#!/usr/bin/env bash
# race-free.sh PKG...: fails, naming the line, when a package that the
# Makefile tests without the race detector (RACE_FREE) starts a goroutine:
# in its own files, its tests included, or in a package of this module it
# runs. The race detector finds nothing where one goroutine runs, and it
# makes these packages' CEL compiles four times slower (webhook/render/manifests:
# 141 s with it, 32 s without, alone on two cores); a package that starts
# one goes back under -race.
set -euo pipefail
cd "$(dirname "$0")/.."
module=$(go list -m)
[ "$#" -gt 0 ] || { echo "usage: $0 PKG..." >&2; exit 2; }
# A go statement: `go func`, `go f(`, `go x.f(`; comments are skipped.
goroutine='(^|[;{[:space:]])go[[:space:]]+(func[[:space:](]|[A-Za-z_][A-Za-z0-9_.]*\()'
status=0
for pkg in "$@"; do
	files=$(
		# The package's own files and tests.
		go list -f '{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .TestGoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .XTestGoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}' "$pkg"
		# The module's packages its test binary links (their non-test files).
		# (The generated main package of the test binary is not one.)
		go list -deps -test -f '{{if .Module}}{{if and (eq .Module.Path "'"$module"'") (ne .Name "main")}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}{{end}}' "$pkg"
	)
	# grep: 0 found, 1 none, 2 an error (a file that is not there).
	set +e
	mapfile -t list < <(echo "$files" | sort -u | grep -v '^$')
	found=$(grep -nE "$goroutine" /dev/null "${list[@]}")
	rc=$?
	set -e
	[ "$rc" -le 1 ] || { echo "race-free.sh: could not read the files of $pkg" >&2; exit 2; }
	found=$(echo "$found" | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//' || true)
	if [ -n "$found" ]; then
		echo "race-free.sh: $pkg is tested without the race detector (Makefile RACE_FREE) but starts a goroutine; move it back under -race:" >&2
		echo "$found" | sed 's|^'"$PWD"'/|  |' >&2
		status=1
	fi
done
exit "$status"
