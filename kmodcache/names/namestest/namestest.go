// Package namestest makes values outside the name grammar of kmodcache/names
// (paths, controls, NUL, empty, overlong, a leading dot or dash, look-alike
// Unicode), the same for every run, for the tests of each reader that must
// refuse them.
package namestest

import (
	"math/rand/v2"
	"strings"

	"github.com/kpreload/kpreload/kmodcache/names"
)

// Case is one value outside the grammar and the kind of break it is.
type Case struct {
	// Kind says what breaks the grammar ("traversal", "control", "confusable", ...).
	Kind string
	// Value is the value a reader must refuse.
	Value string
}

// Fixed are the hand-picked cases, one or more of each kind.
var Fixed = []Case{
	{"empty", ""},
	{"traversal", ".."},
	{"traversal", "."},
	{"traversal", "../../etc"},
	{"traversal", "../../../../etc/shadow"},
	{"traversal", "535..1"},
	{"traversal", "535/../.."},
	{"slash", "/"},
	{"slash", "/etc"},
	{"slash", "nvidia/open"},
	{"slash", `535\x`},
	{"nul", "\x00"},
	{"nul", "535\x00.1"},
	{"control", "535\n"},
	{"control", "1\r\nFAKE: line"},
	{"control", "evil\x1b]0;PWNED\a\x1b[2J"},
	{"control", "535\t1"},
	{"control", "535\x7f"},
	{"overlong", strings.Repeat("9", names.MaxLen+1)},
	{"overlong", strings.Repeat("a.", 4096)},
	{"leading", ".nvidia"},
	{"leading", "-rf"},
	{"leading", "--version"},
	{"leading", "~1"},
	{"leading", "_x"},
	{"leading", "+1"},
	{"space", "535 1"},
	{"space", " 535"},
	{"quote", "1'$(reboot)'"},
	{"quote", `1"`},
	{"shell", "1;reboot"},
	{"shell", "$HOME"},
	{"shell", "*"},
	{"confusable", "nvidi\u0430"},  // Cyrillic a
	{"confusable", "535\u2024261"}, // one dot leader
	{"confusable", "\u2025"},       // two dot leader, a look-alike ".."
	{"confusable", "535\u2215etc"}, // division slash
	{"confusable", "535\uff0fetc"}, // fullwidth solidus
	{"confusable", "\uff0e\uff0e"}, // fullwidth full stops
	{"confusable", "535\u200b"},    // zero-width space
	{"confusable", "\u202enepo"},   // right-to-left override
	{"confusable", "\ufeff535"},    // byte-order mark
	{"invalid utf-8", "535\xff"},
	{"invalid utf-8", "\xc0\xae\xc0\xae"}, // overlong UTF-8 ".."
}

// breaks are what a generated case puts into a valid name: one of them
// anywhere makes it invalid.
var breaks = []string{"/", "\\", "..", "\x00", "\n", "\r", "\x1b", "\a", "\t", "\x7f", " ", "'", `"`, ":", ";", "$", "*",
	"\u0430", "\u2024", "\u2215", "\uff0f", "\uff0e", "\u200b", "\u202e", "\xff"}

// leads are what a generated case starts a name with: the grammar wants a
// letter or a digit first.
var leads = []string{".", "-", "~", "_", "+", "/", "../"}

// alnum and inner are the bytes of valid names.
const (
	alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	inner = alnum + ".+~_-"
)

// Generate returns n cases made from the seed, the same for the same seed:
// a valid name with a break put in at a random place, started with a
// character the grammar refuses first, or grown past names.MaxLen.
func Generate(seed uint64, n int) []Case {
	r := rand.New(rand.NewPCG(seed, seed^0x6b70726c6f6164))
	valid := func(max int) string {
		b := []byte{alnum[r.IntN(len(alnum))]}
		for len(b) < max {
			c := inner[r.IntN(len(inner))]
			if c != '.' || b[len(b)-1] != '.' {
				b = append(b, c)
			}
		}
		return string(b)
	}
	out := make([]Case, 0, n)
	for len(out) < n {
		switch r.IntN(3) {
		case 0:
			v := valid(1 + r.IntN(20))
			at := r.IntN(len(v) + 1)
			out = append(out, Case{"generated break", v[:at] + breaks[r.IntN(len(breaks))] + v[at:]})
		case 1:
			out = append(out, Case{"generated leading", leads[r.IntN(len(leads))] + valid(1+r.IntN(20))})
		default:
			out = append(out, Case{"generated overlong", valid(names.MaxLen + 1 + r.IntN(200))})
		}
	}
	return out
}

// Seed is the seed the readers' tests pass to Generate, so each run of each
// reader sees the same cases.
const Seed = 43

// All returns Fixed and n cases of Generate(Seed, n).
func All(n int) []Case {
	return append(append([]Case(nil), Fixed...), Generate(Seed, n)...)
}
