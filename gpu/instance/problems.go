package instance

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Bounds on an invalid instance's error: hostile YAML (a mebibyte of
// unknown keys) must not become megabytes of error text on a console.
const (
	// MaxProblems is how many problems an error shows; it counts the rest.
	MaxProblems = 5
	// MaxProblemBytes bounds the text of each problem shown.
	MaxProblemBytes = 512
)

// joinProblems joins the first MaxProblems of errs, each cut to
// MaxProblemBytes, one per line, and ends with how many more there are.
func joinProblems(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	shown := make([]error, 0, min(len(errs), MaxProblems)+1)
	for _, err := range errs[:min(len(errs), MaxProblems)] {
		if msg := err.Error(); len(msg) > MaxProblemBytes {
			err = fmt.Errorf("%s… (%d bytes cut)", cutUTF8(msg, MaxProblemBytes), len(msg)-MaxProblemBytes)
		}
		shown = append(shown, err)
	}
	if rest := len(errs) - len(shown); rest > 0 {
		shown = append(shown, fmt.Errorf("and %d more problem(s)", rest))
	}
	return errors.Join(shown...)
}

// cutUTF8 returns s cut to at most n bytes, not inside a UTF-8 sequence.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
