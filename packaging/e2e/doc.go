// Package e2e holds the Debian package's end-to-end test: make deb, lintian,
// and apt-get install of the package into fresh bookworm and trixie roots
// made by mmdebstrap, where the installed commands, man pages, completion,
// kernel hooks and recipes are tried (docs/package.md).
package e2e
