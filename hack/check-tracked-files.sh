#!/usr/bin/env bash
# Fails when the repository tracks a build output: an executable binary
# (ELF, Mach-O, PE, wasm or ar magic, or any file with the executable bit
# that is not a script), or any file larger than 1 MiB. Images under docs/
# (PNG, JPEG, SVG) are binary by nature and allowed, but only up to the same
# 1 MiB: a plot that grows past it should be made smaller, not committed.
set -euo pipefail
cd "$(dirname "$0")/.."

limit=$((1024 * 1024))
status=0
complain() { echo "check-tracked-files: $1"; status=1; }

while IFS= read -r -d '' path; do
	[ -f "$path" ] || continue # deleted in the work tree
	size=$(stat -c %s "$path")
	if [ "$size" -gt "$limit" ]; then
		complain "$path is $size bytes, more than 1 MiB: keep build outputs and data out of git"
	fi
	magic=$(head -c 4 "$path" | od -An -tx1 | tr -d ' \n')
	case "$magic" in
	7f454c46) complain "$path is an ELF binary" ;;
	cffaedfe | cefaedfe | feedface | feedfacf | cafebabe) complain "$path is a Mach-O binary" ;;
	0061736d) complain "$path is a WebAssembly binary" ;;
	213c6172) complain "$path is an ar archive" ;;
	4d5a*) complain "$path is a PE (Windows) binary" ;;
	esac
	mode=$(git ls-files -s -- "$path" | awk '{print $1}')
	if [ "$mode" = "100755" ] && [ "$(head -c 2 "$path")" != "#!" ]; then
		complain "$path is executable but not a script"
	fi
	case "$path" in
	docs/*.png | docs/*.jpg | docs/*.svg) continue ;;
	esac
	if [ "$size" -gt 0 ] && tr -d '\000' <"$path" | cmp -s - "$path"; then
		: # no NUL byte: text
	elif [ "$size" -gt 0 ]; then
		complain "$path holds binary data (NUL bytes); only images under docs/ may"
	fi
done < <(git ls-files -z)

if [ "$status" -eq 0 ]; then
	echo "check-tracked-files: $(git ls-files | wc -l) tracked files, no binaries, none over 1 MiB"
fi
exit "$status"
