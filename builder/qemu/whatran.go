package qemu

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// summaryLine matches the summary line kpreload's /init prints on the console
// (report.Report.Summary).
var summaryLine = regexp.MustCompile(`kpreload: \d+ devices, \d+ modules loaded, [^\n]*switch_root at [0-9.]+s`)

// ConsoleSummary returns the last boot summary kpreload's /init printed on
// the console, and whether there was one: what a boot whose report line came
// back on no channel still shows.
func ConsoleSummary(console []byte) (string, bool) {
	all := summaryLine.FindAll(console, -1)
	if len(all) == 0 {
		return "", false
	}
	return strings.TrimSpace(string(all[len(all)-1])), true
}

// WhatRan says, from a console log holding neither a boot report nor
// kpreload's summary, what booted instead of kpreload's /init.
func WhatRan(console []byte) string {
	has := func(s string) bool { return bytes.Contains(console, []byte(s)) }
	switch {
	case !has("Linux version "):
		return "no Linux kernel started: the firmware or the boot loader stopped first"
	case has("kpreload: "):
		if l := panicLine(console); l != "" {
			return "kpreload's /init started but the kernel panicked before it wrote its report: " + l
		}
		return "kpreload's /init started but stopped before it wrote its report"
	case has("dracut:") || has("dracut-"):
		return "dracut's initramfs ran instead of kpreload's /init"
	case has("Loading, please wait...") || has("Begin: Loading essential drivers"):
		return "Debian's initramfs (initramfs-tools) ran instead of kpreload's /init"
	case has("Run /init as init process"):
		return "an initramfs that is not kpreload's ran its /init"
	case has("VFS: Mounted root") || has("as init process"):
		return "the kernel booted without an initramfs and started the root's init directly"
	}
	if l := panicLine(console); l != "" {
		return "the kernel panicked before any init ran: " + l
	}
	return "the kernel started, but no init's output reached the console"
}

// NoReport judges a boot whose report came back on no channel: kpreload's
// /init ran when its summary is on the console (returned, with no error);
// otherwise the error says what ran instead.
func NoReport(res *Result) (summary string, err error) {
	console, err := os.ReadFile(res.Console)
	if err != nil {
		return "", fmt.Errorf("no boot report came back, and the console log cannot be read: %w", err)
	}
	if s, ok := ConsoleSummary(console); ok {
		return s, nil
	}
	return "", fmt.Errorf("no boot report came back: kpreload's /init did not run: %s (console log %s)", WhatRan(console), res.Console)
}
