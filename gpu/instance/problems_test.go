package instance

import (
	"fmt"
	"strings"
	"testing"
)

// TestErrorsStaySmall: a mebibyte of unknown keys (in user-data, or in an
// instance YAML), or one huge key, gives an error of a few problems and a
// count of the rest, a few KiB at most, instead of one line per key.
func TestErrorsStaySmall(t *testing.T) {
	keys := func(prefix, indent string) (string, int) {
		var b strings.Builder
		b.WriteString(prefix)
		n := 0
		for b.Len() < MaxUserData-64 {
			fmt.Fprintf(&b, "%sk%d: 1\n", indent, n)
			n++
		}
		return b.String(), n
	}
	userData, udKeys := keys("#cloud-config\nkpreload:\n", "  ")
	instanceYAML, inKeys := keys("", "")
	hugeKey := "resources:\n  ? " + strings.Repeat("x", 512<<10) + "\n  : 1\n"
	for _, tc := range []struct {
		name  string
		parse func() error
		// problems is how many problems the input has; first is the
		// start of the first one shown.
		problems int
		first    string
	}{
		{"user-data", func() error { _, _, err := ParseUserData("user-data", []byte(userData)); return err }, udKeys, "user-data:3: kpreload.k0: unknown field"},
		{"instance YAML", func() error { _, err := Parse("instance.yaml", []byte(instanceYAML)); return err }, inKeys, "instance.yaml:1: k0: unknown field"},
		{"one huge key", func() error { _, err := Parse("instance.yaml", []byte(hugeKey)); return err }, 1, "instance.yaml:2: resources.xxxx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.parse()
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			lines := strings.Split(msg, "\n")
			wantLines := min(tc.problems, MaxProblems)
			if tc.problems > MaxProblems {
				wantLines++
			}
			if got, max := len(msg), (MaxProblems+1)*(MaxProblemBytes+32); got > max || len(lines) != wantLines {
				t.Errorf("error of %d bytes, %d lines; want at most %d bytes, %d lines:\n%.2000s", got, len(lines), max, wantLines, msg)
			}
			if !strings.HasPrefix(msg, tc.first) {
				t.Errorf("error starts %.200q, want %q", msg, tc.first)
			}
			if tc.problems > MaxProblems {
				if got, want := lines[len(lines)-1], fmt.Sprintf("and %d more problem(s)", tc.problems-MaxProblems); got != want {
					t.Errorf("last line %q, want %q", got, want)
				}
			}
		})
	}
}
