package qemu

import (
	"regexp"
	"strings"
)

// An UpMark is a console line that says a booted image is up, and what it
// means.
type UpMark struct {
	// What says what the line means ("a getty's login prompt").
	What string
	// Pattern matches the line in the console log.
	Pattern *regexp.Regexp
}

// UpMarks are the console lines that say an image is up, whoever owns the
// console: systemd's status line for its default target, which it stops
// printing once a serial getty owns the console (the getty on the console
// the kernel command line names last), systemd reaching getty.target, and
// the getty's own login prompt ("debian login: ", with no newline after it,
// or the kernel's next message right after it).
var UpMarks = []UpMark{
	{"systemd reached its default target", regexp.MustCompile(`Reached target .*(Multi-User System|Graphical Interface)`)},
	{"systemd reached getty.target", regexp.MustCompile(`Reached target .*(Login Prompts|getty\.target)`)},
	// The prompt ends its line, or the kernel's next message follows it on the same line.
	{"a getty's login prompt", regexp.MustCompile(`(?m)^\r?[[:alnum:]][[:alnum:].-]* login: *(?:$|\[ *[0-9]+\.[0-9]+\])`)},
}

// ImageUp matches any of UpMarks: the default end of a booted image's run.
var ImageUp = func() *regexp.Regexp {
	var alts []string
	for _, m := range UpMarks {
		alts = append(alts, "(?:"+m.Pattern.String()+")")
	}
	return regexp.MustCompile(strings.Join(alts, "|"))
}()

// WhatUp says which of UpMarks the text ImageUp matched is ("" when none).
func WhatUp(match string) string {
	for _, m := range UpMarks {
		if m.Pattern.MatchString(match) {
			return m.What
		}
	}
	return ""
}
