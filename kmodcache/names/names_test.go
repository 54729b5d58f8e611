package names

import (
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name, value string
		// want is "" for a valid name, else a part of the error.
		want string
	}{
		// What the project's recipes, test drivers and kernels use.
		{"driver nvidia", "nvidia", ""},
		{"driver nvidia-current", "nvidia-current", ""},
		{"driver kpreload-edu", "kpreload-edu", ""},
		{"driver nvidia-tesla-535", "nvidia-tesla-535", ""},
		{"version", "535.261.03", ""},
		{"version of the test driver", "1.0.0", ""},
		{"branch", "535", ""},
		{"Debian version", "550.163.01-4~bpo13+1", ""},
		{"flavour open", "open", ""},
		{"flavour proprietary", "proprietary", ""},
		{"kernel release", "6.1.0-56-cloud-amd64", ""},
		{"kernel release with +", "6.12.38+deb13-cloud-amd64", ""},
		{"kernel release with ~", "5.10.0~rc1", ""},
		{"underscore", "a_b", ""},
		{"longest", strings.Repeat("a", MaxLen), ""},

		{"empty", "", "is empty"},
		{"dot dot", "..", `starts with '.'`},
		{"dot", ".", `starts with '.'`},
		{"hidden", ".nvidia", `starts with '.'`},
		{"option", "-rf", `starts with '-'`},
		{"leading tilde", "~1", `starts with '~'`},
		{"up and out", "../../../../etc", `starts with '.'`},
		{"dot dot inside", "535..1", `holds ".."`},
		{"dot dot at the end", "535..", `holds ".."`},
		{"slash", "535/x", `holds '/'`},
		{"absolute", "/etc", `starts with '/'`},
		{"backslash", `535\x`, `holds '\\'`},
		{"space", "6.1 x", `holds ' '`},
		{"quote", "6.1'$(reboot)'", `holds '\''`},
		{"colon", "1:535", `holds ':'`},
		{"newline", "535\ninitrd", `holds '\n'`},
		{"NUL", "535\x00", `holds '\x00'`},
		{"DEL", "535\x7f", `holds '\x7f'`},
		{"non-ASCII", "535é", "holds a non-ASCII byte"},
		{"non-ASCII first", "é535", "starts with a non-ASCII byte"},
		{"too long", strings.Repeat("a", MaxLen+1), "is 65 bytes long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check("driver version", tt.value)
			if got := Valid(tt.value); got != (tt.want == "") {
				t.Errorf("Valid(%q) = %v, want %v", tt.value, got, tt.want == "")
			}
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Check(%q) = %v, want nil", tt.value, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check(%q) = nil, want an error with %s", tt.value, tt.want)
			}
			got := err.Error()
			if !strings.Contains(got, tt.want) {
				t.Errorf("Check(%q) = %q, want it to say %s", tt.value, got, tt.want)
			}
			if !strings.HasPrefix(got, "driver version ") || !strings.HasSuffix(got, "want "+Allowed) {
				t.Errorf("Check(%q) = %q, want it to name the field and say what is allowed", tt.value, got)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Check(%q) does not wrap ErrInvalid", tt.value)
			}
		})
	}
}

func TestCheckQuotesTheValue(t *testing.T) {
	tests := []struct{ value, want string }{
		{"../x", `--version "../x" starts with '.'`},
		{"", `--version "" is empty`},
		{strings.Repeat("a", 2000), `--version "` + strings.Repeat("a", shown) + `"… is 2000 bytes long`},
	}
	for _, tt := range tests {
		got := Check("--version", tt.value).Error()
		if !strings.HasPrefix(got, tt.want) {
			t.Errorf("Check(%.20q) = %q, want it to start with %q", tt.value, got, tt.want)
		}
		if len(got) > 300 {
			t.Errorf("Check(%.20q) is %d bytes long, want a short message", tt.value, len(got))
		}
	}
}

func TestCheckOptional(t *testing.T) {
	tests := []struct {
		value string
		want  bool
	}{
		{"", true},
		{"open", true},
		{"..", false},
		{"a/b", false},
	}
	for _, tt := range tests {
		if got := CheckOptional("flavor", tt.value) == nil; got != tt.want {
			t.Errorf("CheckOptional(%q) ok = %v, want %v", tt.value, got, tt.want)
		}
	}
}
