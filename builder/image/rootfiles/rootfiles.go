// Package rootfiles holds the files kpreload puts into every image's root
// filesystem as they are (systemd units under usr/lib/systemd with their preset, the ld.so.conf.d entry that finds the
// loaded driver's userspace through /run/kpreload/driver).
package rootfiles

import "embed"

// FS holds the files, rooted at "files" (files/etc/... becomes /etc/... in the image).
//
//go:embed all:files
var FS embed.FS
