package qemu

import (
	"regexp"
	"strconv"
	"strings"
)

// KernelLine is one timestamped kernel log line from the console.
type KernelLine struct {
	Time float64 `json:"t"` // seconds since the kernel started (printk clock)
	Text string  `json:"text"`
}

// milestones are the substrings that make a console kernel line worth keeping.
var milestones = []string{
	"Linux version",
	"Run /init as init process",
	"Run /sbin/init as init process",
	"Freeing unused kernel image",
	"kpreload",
	"NVRM",
	"Kernel panic",
	"VFS: ",
	"EXT4-fs (",
	"reboot: ",
	// systemd's start and targets, where it logs to the kernel (systemd.log_target=kmsg).
	"running in system mode",
	"Reached target ",
}

// printkLine matches "[    1.234567] text" (a console line of a kernel built with
// CONFIG_PRINTK_TIME).
var printkLine = regexp.MustCompile(`^\[\s*(\d+\.\d+)\] (.*)$`)

// KernelLines returns the console's kernel log lines of interest (boot milestones,
// kpreload and NVRM messages, panics) with their printk times, in console order. The
// kernel's echo of its command line is left out.
func KernelLines(console []byte) []KernelLine {
	var out []KernelLine
	for _, line := range strings.Split(string(console), "\n") {
		line = strings.TrimRight(line, "\r")
		m := printkLine.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(m[2], "Command line: ") || strings.HasPrefix(m[2], "Kernel command line: ") {
			continue
		}
		for _, s := range milestones {
			if strings.Contains(m[2], s) {
				t, err := strconv.ParseFloat(m[1], 64)
				if err == nil {
					out = append(out, KernelLine{Time: t, Text: m[2]})
				}
				break
			}
		}
	}
	return out
}

// Find returns the first line whose text contains s.
func Find(lines []KernelLine, s string) (KernelLine, bool) {
	for _, l := range lines {
		if strings.Contains(l.Text, s) {
			return l, true
		}
	}
	return KernelLine{}, false
}

// FirstPrintk returns the printk time of the console's first kernel log
// line that contains s, and whether there is one.
func FirstPrintk(console []byte, s string) (float64, bool) {
	for _, line := range strings.Split(string(console), "\n") {
		m := printkLine.FindStringSubmatch(line)
		if m != nil && strings.Contains(line, s) {
			t, err := strconv.ParseFloat(m[1], 64)
			return t, err == nil
		}
	}
	return 0, false
}

// panicLine returns the console's kernel panic line without its timestamp, or "".
func panicLine(console []byte) string {
	for _, line := range strings.Split(string(console), "\n") {
		if i := strings.Index(line, "Kernel panic - not syncing"); i >= 0 {
			return strings.TrimSpace(strings.TrimRight(line[i:], "\r"))
		}
	}
	return ""
}
