package qemu

import "testing"

// TestImageUp: a booted image is up when systemd reaches its default
// target, when it reaches getty.target, or when a getty prints its login
// prompt on a console systemd no longer writes unit status to; the match
// says which. Lines that only mention them are not the end.
func TestImageUp(t *testing.T) {
	for _, c := range []struct {
		name, console, want string
	}{
		{"multi-user", "[  OK  ] Reached target \x1b[0;1;39mmulti-user.target\x1b[0m - Multi-User System.\n", "systemd reached its default target"},
		{"graphical", "[  OK  ] Reached target Graphical Interface.\n", "systemd reached its default target"},
		{"getty.target", "[  OK  ] Reached target getty.target - Login Prompts.\n", "systemd reached getty.target"},
		{"getty.target, old systemd", "[  OK  ] Reached target Login Prompts.\n", "systemd reached getty.target"},
		{"serial getty prompt", "Debian GNU/Linux 12 debian ttyS0\r\n\r\ndebian login: ", "a getty's login prompt"},
		{"prompt with a domain", "\r\nnode-1.example.com login: ", "a getty's login prompt"},
		{"prompt, then a kernel message", "\r\ndebian login: [   89.742048] kvm: Nested Virtualization enabled\n", "a getty's login prompt"},
		{"nothing yet", "[    3.1] kpreload: switch_root\n         Starting systemd-journald.service...\n", ""},
		{"a login message is no prompt", "Last login: Mon Dec  7 01:00:00 on ttyS0\n", ""},
		{"a unit named login", "[  OK  ] Started systemd-logind.service - User Login Management.\n", ""},
		{"getty started, not reached", "[  OK  ] Started serial-getty@ttyS0.service - Serial Getty on ttyS0.\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := ImageUp.FindString(c.console)
			if got := WhatUp(m); got != c.want || (c.want == "") != (m == "") {
				t.Errorf("ImageUp matched %q (%q), want %q", m, got, c.want)
			}
		})
	}
}
