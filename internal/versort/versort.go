// Package versort is kpreload's one "sort -V" order, the order GRUB's
// version_sort gives kernels: the install side picks the default kernel by
// it, and the archive lists kernels by it. (Debian package versions have
// their own order, dpkg's, in builder/recipe.)
package versort

import "strings"

// Compare orders strings such as kernel releases as sort -V (and GRUB's
// version_sort) does: runs of digits compare as numbers, everything else
// byte by byte, '~' before anything. It returns a negative number, zero or
// a positive number.
func Compare(a, b string) int {
	for a != "" || b != "" {
		da, ra := leadingDigits(a)
		db, rb := leadingDigits(b)
		if da != "" || db != "" {
			if c := compareNumbers(da, db); c != 0 {
				return c
			}
			a, b = ra, rb
			continue
		}
		ca, cb := byteOf(a), byteOf(b)
		if ca != cb {
			return ca - cb
		}
		a, b = a[1:], b[1:]
	}
	return 0
}

func leadingDigits(s string) (digits, rest string) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i], s[i:]
}

func compareNumbers(a, b string) int {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

// byteOf weighs the first byte of s as Debian versions do: '~' before
// everything (the end of the string included), then the end, then letters,
// then other characters.
func byteOf(s string) int {
	if s == "" {
		return 0
	}
	c := int(s[0])
	switch {
	case c == '~':
		return -1
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		return c
	default:
		return c + 256
	}
}
