package cmdout

import (
	"bytes"
	"testing"
)

// TestPrefixed: each line written, whole or in pieces, reaches the writer
// after the prefix; the byte count is what was written.
func TestPrefixed(t *testing.T) {
	for _, tt := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"one line", []string{"loading nvidia\n"}, "kpreload switch: loading nvidia\n"},
		{"two lines at once", []string{"a\nb\n"}, "kpreload switch: a\nkpreload switch: b\n"},
		{"no newline", []string{"done"}, "kpreload switch: done"},
		{"empty", []string{""}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			w := Prefixed(&b, "kpreload switch: ")
			for _, s := range tt.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Errorf("Write(%q) = %d, %v; want %d, nil", s, n, err, len(s))
				}
			}
			if got := b.String(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestPrintJSON: the --json format is indented by two spaces, one value a
// line's end.
func TestPrintJSON(t *testing.T) {
	var b bytes.Buffer
	if err := PrintJSON(&b, map[string]any{"driver": "nvidia", "sets": []int{1}}); err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"driver\": \"nvidia\",\n  \"sets\": [\n    1\n  ]\n}\n"
	if got := b.String(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestIsTerminal: a buffer is no terminal.
func TestIsTerminal(t *testing.T) {
	if IsTerminal(&bytes.Buffer{}) {
		t.Error("IsTerminal(a buffer) = true")
	}
}
