package progress

import "testing"

// TestSay: a set report gets the formatted line; a nil one is passed over.
func TestSay(t *testing.T) {
	var got []string
	Say(func(s string) { got = append(got, s) }, "cell %s: %d", "a", 1)
	Say(nil, "nobody hears %s", "this")
	if want := "cell a: 1"; len(got) != 1 || got[0] != want {
		t.Errorf("got %q, want [%q]", got, want)
	}
}
