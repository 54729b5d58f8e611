// Package modalias resolves device modaliases to kernel modules the way kmod does:
// glob matching with glibc fnmatch semantics, the lookup order and result order of
// `modprobe -R`, and the insertion order of `modprobe --show-depends`. It reads the
// text files depmod writes (modules.dep, modules.alias, modules.softdep,
// modules.builtin, modules.builtin.modinfo) and uses only the standard library, so
// both the boot-time /init and the build-side tools can import it.
package modalias

import "strings"

// Match reports whether s matches the shell pattern, exactly as glibc's
// fnmatch(pattern, s, 0) decides in the C locale (the locale modprobe runs in):
// '*' matches any run of bytes, '?' any one byte, '[...]' a bracket expression with
// ranges, '!' or '^' negation, character classes such as [:digit:], one-byte
// collating symbols [.x.] and equivalence classes [=x=], and '\' escapes the next
// byte. No byte is special otherwise ('/' and a leading '.' included). A bracket
// without its closing ']' stands for a literal '['. Both strings end at their first
// NUL byte, as C strings do. Unlike path.Match, Match never returns an error: a
// malformed pattern simply does not match.
func Match(pattern, s string) bool {
	if i := strings.IndexByte(pattern, 0); i >= 0 {
		pattern = pattern[:i]
	}
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return match(pattern, s)
}

// match is Match without the NUL handling. Every element other than '*' consumes
// exactly one byte of s, so remembering only the last '*' (and retrying it one byte
// further on a mismatch) finds a match whenever glibc's recursive search does.
func match(p, s string) bool {
	pi, si := 0, 0
	starP, starS := -1, 0
	for {
		if pi < len(p) && p[pi] == '*' {
			pi++
			if pi == len(p) {
				return true
			}
			starP, starS = pi, si
			continue
		}
		if pi == len(p) && si == len(s) {
			return true
		}
		if pi < len(p) && si < len(s) {
			if next, ok := matchOne(p, pi, s[si]); ok {
				pi, si = next, si+1
				continue
			}
		}
		if starP < 0 || starS >= len(s) {
			return false
		}
		starS++
		pi, si = starP, starS
	}
}

// matchOne matches the single-byte element of p that starts at pi against c and
// returns the index just after that element.
func matchOne(p string, pi int, c byte) (int, bool) {
	switch p[pi] {
	case '?':
		return pi + 1, true
	case '\\':
		if pi+1 == len(p) {
			return 0, false // a trailing backslash never matches
		}
		return pi + 2, p[pi+1] == c
	case '[':
		return matchBracket(p, pi, c)
	default:
		return pi + 1, p[pi] == c
	}
}

// charClassMax is glibc's CHAR_CLASS_MAX_LENGTH: longer class names are ill-formed.
const charClassMax = 256

// bracket scan outcomes.
const (
	bracketFail    = iota // ill-formed where glibc gives up: no match at all
	bracketMatched        // c is in the set; the rest of the set is still to skip
	bracketMissed         // c is not in the set; j is just after the closing ']'
	bracketLiteral        // the '[' has no closing ']' and stands for itself
)

// matchBracket matches the bracket expression at p[i] == '[' against c, following
// glibc's fnmatch_loop.c step by step, quirks included.
func matchBracket(p string, i int, c byte) (int, bool) {
	j := i + 1
	not := j < len(p) && (p[j] == '!' || p[j] == '^')
	if not {
		j++
	}
	j, outcome := scanBracket(p, j, c)
	switch outcome {
	case bracketMissed:
		return j, not
	case bracketLiteral:
		return i + 1, c == '['
	case bracketMatched:
		j, ok := skipBracket(p, j)
		return j, ok && !not
	}
	return 0, false
}

// scanBracket walks the set from p[j] (just after '[' and any negation) until c is
// found or the closing ']' is reached.
func scanBracket(p string, j int, fn byte) (int, int) {
	at := func(k int) byte {
		if k < len(p) {
			return p[k]
		}
		return 0
	}
	c := at(j)
	j++
	for {
		normal := false // c is an ordinary set member (glibc's normal_bracket)
		ranged := false // cold may start a range (the range test follows)
		var cold byte
		switch {
		case c == '\\':
			if at(j) == 0 {
				return j, bracketFail
			}
			c = at(j)
			j++
			normal = true
		case c == '[' && at(j) == ':':
			start := j
			var name []byte
			valid := true
			for {
				if len(name) == charClassMax {
					return j, bracketFail
				}
				j++
				c = at(j)
				if c == ':' && at(j+1) == ']' {
					j += 2
					break
				}
				if c < 'a' || c >= 'z' {
					valid = false
					break
				}
				name = append(name, c)
			}
			if !valid {
				// Not a class name after all: the '[' is an ordinary member.
				j = start
				c = '['
				normal = true
				break
			}
			in, known := inClass(string(name), fn)
			if !known {
				return j, bracketFail
			}
			if in {
				return j, bracketMatched
			}
			c = at(j)
			j++
		case c == '[' && at(j) == '=':
			start := j
			j++
			eq := at(j)
			if eq == 0 || at(j+1) != '=' || at(j+2) != ']' {
				j = start
				c = '['
				normal = true
				break
			}
			j += 3
			if fn == eq {
				return j, bracketMatched
			}
			c = at(j)
			j++
		case c == 0:
			return j, bracketLiteral
		case c == '[' && at(j) == '.':
			start := j
			n := 0
			for {
				j++
				c = at(j)
				if c == '.' && at(j+1) == ']' {
					j += 2
					break
				}
				if c == 0 {
					return j, bracketFail
				}
				n++
			}
			isRange := at(j) == '-' && at(j+1) != 0
			if n != 1 {
				return j, bracketFail
			}
			if !isRange && fn == p[start+1] {
				return j, bracketMatched
			}
			cold = p[start+1]
			c = at(j)
			j++
			ranged = true
		default:
			normal = true
		}
		if normal {
			isRange := at(j) == '-' && at(j+1) != 0 && at(j+1) != ']'
			if !isRange && c == fn {
				return j, bracketMatched
			}
			cold = c
			c = at(j)
			j++
			ranged = true
		}
		if ranged && c == '-' && at(j) != ']' {
			cend := at(j)
			j++
			if cend == '[' && at(j) == '.' {
				start := j
				n := 0
				for {
					j++
					c = at(j)
					if c == '.' && at(j+1) == ']' {
						j += 2
						break
					}
					if c == 0 {
						return j, bracketFail
					}
					n++
				}
				if n != 1 {
					return j, bracketFail
				}
				cend = p[start+1]
			} else {
				if cend == '\\' {
					cend = at(j)
					j++
				}
				if cend == 0 {
					return j, bracketFail
				}
			}
			if cold <= fn && fn <= cend {
				return j, bracketMatched
			}
			c = at(j)
			j++
		}
		if c == ']' {
			return j, bracketMissed
		}
	}
}

// skipBracket skips the rest of a set that already matched and returns the index
// after its closing ']'; false where glibc gives up (an unterminated set loses).
func skipBracket(p string, j int) (int, bool) {
	at := func(k int) byte {
		if k < len(p) {
			return p[k]
		}
		return 0
	}
	for {
		c := at(j)
		j++
		switch {
		case c == ']':
			return j, true
		case c == 0:
			return j, false
		case c == '\\':
			if at(j) == 0 {
				return j, false
			}
			j++
		case c == '[' && at(j) == ':':
			start := j
			n := 0
			for {
				j++
				c = at(j)
				n++
				if n == charClassMax {
					return j, false
				}
				if c == ':' && at(j+1) == ']' {
					break
				}
				if c < 'a' || c >= 'z' {
					j = start - 2
					break
				}
			}
			j += 2
		case c == '[' && at(j) == '=':
			j++
			if at(j) == 0 {
				return j, false
			}
			j++
			if at(j) != '=' || at(j+1) != ']' {
				return j, false
			}
			j += 2
		case c == '[' && at(j) == '.':
			for {
				j++
				c = at(j)
				if c == 0 {
					return j, false
				}
				if c == '.' && at(j+1) == ']' {
					break
				}
			}
			j += 2
		}
	}
}

// inClass reports whether c belongs to the named character class of the C locale;
// known is false for a name glibc's wctype does not know.
func inClass(name string, c byte) (in, known bool) {
	upper := 'A' <= c && c <= 'Z'
	lower := 'a' <= c && c <= 'z'
	digit := '0' <= c && c <= '9'
	graph := 0x21 <= c && c <= 0x7e
	switch name {
	case "alnum":
		return upper || lower || digit, true
	case "alpha":
		return upper || lower, true
	case "blank":
		return c == ' ' || c == '\t', true
	case "cntrl":
		return c < 0x20 || c == 0x7f, true
	case "digit":
		return digit, true
	case "graph":
		return graph, true
	case "lower":
		return lower, true
	case "print":
		return graph || c == ' ', true
	case "punct":
		return graph && !upper && !lower && !digit, true
	case "space":
		return c == ' ' || ('\t' <= c && c <= '\r'), true
	case "upper":
		return upper, true
	case "xdigit":
		return digit || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F'), true
	}
	return false, false
}
