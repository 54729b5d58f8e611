package qemu

import (
	"context"
	"strings"
	"testing"
	"time"
)

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

// TestUntilUp: with kpreload's up records watched, kpreload-up.service's
// record ends the run; once kpreload-boot-ok.service announced it, the
// console's marks no longer do; without the announcement (an image without
// kpreload's units) they do, as they do when the records are not watched.
func TestUntilUp(t *testing.T) {
	booting := `kpreload-up: {"format":1,"state":"booting","unit":"kpreload-boot-ok.service","time":3.1}` + "\r\n"
	up := `kpreload-up: {"format":1,"state":"up","unit":"kpreload-up.service","target":"multi-user.target","time":15.2}`
	prompt := "Debian GNU/Linux 12 debian ttyS0\r\n\r\ndebian login: "
	for _, c := range []struct {
		name            string
		withUp          bool
		console, report string
		want, up        string
	}{
		{"console mark, no records", true, prompt, `kpreload-report: {"format":1}` + "\n", "debian login: ", ""},
		{"console mark held back by the announcement", true, prompt, booting, "", ""},
		{"the up record", true, prompt, booting + up + "\r\n", up, "kpreload-up.service reported the system up (multi-user.target)"},
		{"the up record before any console mark", true, "Welcome to Debian\n", booting + up + "\n", up, "kpreload-up.service reported the system up (multi-user.target)"},
		{"records not watched", false, prompt, booting, "debian login: ", ""},
		{"nothing yet", true, "Welcome to Debian\n", booting, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := until(ImageUp, c.withUp, []byte(c.console), []byte(c.report))
			if e.matched != (c.want != "") || e.match != c.want {
				t.Fatalf("until = %+v, want match %q", e, c.want)
			}
			res := &Result{UntilMatched: e.matched, UntilMatch: e.match, Up: e.up}
			want := c.up
			if want == "" && e.matched {
				want = "a getty's login prompt"
			}
			if got := res.EndedBy(); got != want {
				t.Errorf("EndedBy = %q, want %q", got, want)
			}
		})
	}
	if !upAwaited([]byte(booting)) || upAwaited([]byte(booting+up+"\n")) || upAwaited(nil) {
		t.Error("upAwaited: want true only after the announcement and before the up record")
	}
}

// TestRunUntilUp: a hung guest whose report channel carries
// kpreload-up.service's record ends there, the record in the result; one
// whose channel only announced it ends at the timeout even though the
// console showed a login prompt; one that powers off after the
// announcement is an error naming the missing record.
func TestRunUntilUp(t *testing.T) {
	console := "[    9.0] systemd[1]: Started x\r\n\r\ndebian login: "
	booting := `kpreload-up: {"format":1,"state":"booting","unit":"kpreload-boot-ok.service","time":3.1}` + "\r\n"
	up := `kpreload-up: {"format":1,"state":"up","unit":"kpreload-up.service","target":"graphical.target","time":15.2}` + "\r\n"
	status := `kpreload-status: {"booted":true}` + "\r\n"
	drv := &fakeDriver{console: console, report: reportLine + "\r\n" + booting + status + up, hang: true}
	res, err := (&Runner{Driver: drv, WorkDir: t.TempDir()}).Run(context.Background(), Config{Kernel: "/k", Until: ImageUp, UntilUp: true, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Up == nil || res.Up.Target != "graphical.target" || res.TimedOut || res.EndedBy() != "kpreload-up.service reported the system up (graphical.target)" || res.Report == nil {
		t.Errorf("result: up %+v, ended by %q, timed out %v, report %v; want the up record, the report", res.Up, res.EndedBy(), res.TimedOut, res.Report != nil)
	}
	if string(res.Status) != `{"booted":true}` {
		t.Errorf("result status %q, want the status line's JSON", res.Status)
	}

	drv = &fakeDriver{console: console, report: reportLine + "\r\n" + booting, hang: true}
	res, err = (&Runner{Driver: drv, WorkDir: t.TempDir()}).Run(context.Background(), Config{Kernel: "/k", Until: ImageUp, UntilUp: true, Timeout: 2 * time.Second})
	if err == nil || !res.TimedOut || res.UntilMatched {
		t.Errorf("announced, no record: err %v, timed out %v, matched %v; want a timeout", err, res.TimedOut, res.UntilMatched)
	}

	drv = &fakeDriver{console: console, report: reportLine + "\r\n" + booting}
	_, err = (&Runner{Driver: drv, WorkDir: t.TempDir()}).Run(context.Background(), Config{Kernel: "/k", Until: ImageUp, UntilUp: true, Timeout: 30 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "before kpreload-up.service reported the system up") {
		t.Errorf("powered off after the announcement: err %v, want one naming the missing record", err)
	}
}
