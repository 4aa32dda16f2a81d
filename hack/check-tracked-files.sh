#!/usr/bin/env bash
# Fails when the repository tracks a build output: an executable binary
# (ELF, Mach-O, PE, wasm or ar magic, or any file with the executable bit
# that is not a script), or any file larger than 1 MiB. Images under docs/
# (PNG, JPEG, SVG) are binary by nature and allowed, but only up to the same
# 1 MiB: a plot that grows past it should be made smaller, not committed.
#
# A few processes for the whole tree, not a few per file: per file, the
# check took over half a minute on a loaded machine.
set -euo pipefail
cd "$(dirname "$0")/.."

limit=$((1024 * 1024))
status=0
complain() { echo "check-tracked-files: $1"; status=1; }

# Files tracked and present in the work tree (a deleted one is not checked).
files=()
while IFS= read -r -d '' path; do
	[ -f "$path" ] && files+=("$path")
done < <(git ls-files -z)
[ "${#files[@]}" -gt 0 ] || { echo "check-tracked-files: git tracks no file here"; exit 1; }

# Sizes, one stat for all.
while read -r size path; do
	[ "$size" -gt "$limit" ] && complain "$path is $size bytes, more than 1 MiB: keep build outputs and data out of git"
done < <(printf '%s\0' "${files[@]}" | xargs -0 stat -c '%s %n' --)

# The executable bit on something that is not a script.
while read -r mode _ _ path; do
	[ "$mode" = 100755 ] || continue
	[ -f "$path" ] || continue
	[ "$(head -c 2 "$path")" = "#!" ] || complain "$path is executable but not a script"
done < <(git ls-files -s)

# Binary data: every binary format named above has a NUL byte in its first
# bytes, so only files with a NUL byte get the magic check.
mapfile -d '' binary < <(printf '%s\0' "${files[@]}" | xargs -0 grep -lZaP '\x00' -- || true)
for path in "${binary[@]}"; do
	magic=$(head -c 4 "$path" | od -An -tx1 | tr -d ' \n')
	case "$magic" in
	7f454c46) complain "$path is an ELF binary" ; continue ;;
	cffaedfe | cefaedfe | feedface | feedfacf | cafebabe) complain "$path is a Mach-O binary" ; continue ;;
	0061736d) complain "$path is a WebAssembly binary" ; continue ;;
	213c6172) complain "$path is an ar archive" ; continue ;;
	4d5a*) complain "$path is a PE (Windows) binary" ; continue ;;
	esac
	case "$path" in
	docs/*.png | docs/*.jpg | docs/*.svg) continue ;;
	esac
	complain "$path holds binary data (NUL bytes); only images under docs/ may"
done

if [ "$status" -eq 0 ]; then
	echo "check-tracked-files: ${#files[@]} tracked files, no binaries, none over 1 MiB"
fi
exit "$status"
