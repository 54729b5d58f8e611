package none

import "testing"

func TestOr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "none"},
		{"6.1.0-56-cloud-amd64", "6.1.0-56-cloud-amd64"},
		{" ", " "},
	} {
		if got := Or(tc.in); got != tc.want {
			t.Errorf("Or(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestList(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{nil, "none"},
		{[]string{}, "none"},
		{[]string{""}, "none"},
		{[]string{"a"}, "a"},
		{[]string{"6.1.0-56-cloud-amd64", "6.12.48+deb13-cloud-amd64"}, "6.1.0-56-cloud-amd64, 6.12.48+deb13-cloud-amd64"},
	} {
		if got := List(tc.in); got != tc.want {
			t.Errorf("List(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
