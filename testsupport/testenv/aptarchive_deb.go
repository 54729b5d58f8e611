package testenv

import "time"

// IncludeDeb adds the real package file deb (a Debian kernel's .deb, say)
// to suite as it is, re-signing the suite's Release files, and returns
// when it was published: the moment the archive offers it.
func (a *AptArchive) IncludeDeb(suite, deb string) time.Time {
	a.t.Helper()
	a.reprepro("includedeb", suite, deb)
	return time.Now()
}
