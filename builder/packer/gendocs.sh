#!/usr/bin/env bash
# gendocs.sh FILE...: run `packer-sdc struct-markdown` on Go files of the package in the current
# directory and put the generated field docs under builder/packer/docs-partials/<package>/,
# replacing what was there (so a struct that lost its required fields loses its -required
# partial): name every documented file of a package in its one go:generate line.
#
# packer-sdc finds a plugin's root by walking up to a directory named packer-plugin-*, and
# gives up silently inside any directory named "packer" (it takes it for Packer's own
# repository), which builder/packer is. So the files are copied into a scratch
# packer-plugin-kpreload/ tree, documented there, and the partials copied back.
# Run through `go generate ./builder/packer/...` with packer-sdc on $PATH
# (scripts/packer.sh --sdc installs it and prints its path).
set -euo pipefail
pkg="$(basename "$PWD")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/packer-plugin-kpreload/$pkg"
for f in "$@"; do
  cp "$f" "$work/packer-plugin-kpreload/$pkg/"
  (cd "$work/packer-plugin-kpreload/$pkg" && GOFILE="$f" packer-sdc struct-markdown)
done
rm -rf "$here/docs-partials/$pkg"
mkdir -p "$here/docs-partials/$pkg"
cp "$work/packer-plugin-kpreload/docs-partials/$pkg/"*.mdx "$here/docs-partials/$pkg/"
