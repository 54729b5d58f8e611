// Package mountinfo reads the fields of /proc/mounts and
// /proc/self/mountinfo, which the kernel writes with octal escapes.
package mountinfo

import (
	"strconv"
	"strings"
)

// Unescape undoes the kernel's octal escapes in a field of /proc/mounts or
// mountinfo (\040 for a space, \011 a tab, \012 a newline, \134 a
// backslash); a backslash not followed by three octal digits stays.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
