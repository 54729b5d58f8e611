// Package tail takes the end of a command's output for an error message.
package tail

import "strings"

// Lines returns the last n lines of s that are not blank, as they are (without
// their newlines).
func Lines(s string, n int) []string {
	var lines []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}
