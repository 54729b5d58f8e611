package report

import (
	"strings"
	"testing"
)

// TestScanUp: the up records come back from a report channel's log among
// the report's own line, with a trailing \r or text before them; damaged
// records, other formats and unknown states are skipped, and the first
// intact record of each state wins.
func TestScanUp(t *testing.T) {
	rec := func(u Up) string {
		t.Helper()
		l, err := u.Line()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	booting := rec(Up{Format: UpFormat, State: UpBooting, Unit: "kpreload-boot-ok.service", Time: 3.5})
	up := rec(Up{Format: UpFormat, State: UpUp, Unit: UpUnit, Target: "multi-user.target", Time: 12.25})
	later := rec(Up{Format: UpFormat, State: UpUp, Unit: UpUnit, Target: "graphical.target", Time: 20})
	for _, c := range []struct {
		name, log        string
		booting, up      bool
		target, wantLine string
	}{
		{"nothing", ConsolePrefix + `{"format":1}` + "\n", false, false, "", ""},
		{"booting only", ConsolePrefix + "{}\r\n" + booting + "\r\n", true, false, "", ""},
		{"booting then up", booting + "\r\n" + up + "\r\n", true, true, "multi-user.target", up},
		{"up after other text on its line", "\x00garbage" + up + "\n", false, true, "multi-user.target", up},
		{"the first up wins", up + "\n" + later + "\n", false, true, "multi-user.target", up},
		{"a damaged record is skipped", up[:len(up)-3] + "\n" + later + "\n", false, true, "graphical.target", later},
		{"another format", strings.Replace(up, `"format":1`, `"format":2`, 1) + "\n", false, false, "", ""},
		{"an unknown state", strings.Replace(up, `"state":"up"`, `"state":"down"`, 1) + "\n", false, false, "", ""},
		{"no unit", UpPrefix + `{"format":1,"state":"up","time":1}` + "\n", false, false, "", ""},
		{"no newline after the last", booting + "\n" + up, true, true, "multi-user.target", up},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, u, line := ScanUp([]byte(c.log))
			if (b != nil) != c.booting || (u != nil) != c.up || line != c.wantLine {
				t.Fatalf("ScanUp = %+v, %+v, %q; want booting %v, up %v, line %q", b, u, line, c.booting, c.up, c.wantLine)
			}
			if u != nil && (u.Target != c.target || u.Unit != UpUnit) {
				t.Errorf("up record %+v, want target %s from %s", u, c.target, UpUnit)
			}
		})
	}
}

// TestUpDescribe: what boot --json's "up" says of each record.
func TestUpDescribe(t *testing.T) {
	for _, c := range []struct {
		u    Up
		want string
	}{
		{Up{State: UpUp, Unit: UpUnit, Target: "multi-user.target"}, "kpreload-up.service reported the system up (multi-user.target)"},
		{Up{State: UpUp, Unit: UpUnit}, "kpreload-up.service reported the system up"},
		{Up{State: UpBooting, Unit: "kpreload-boot-ok.service"}, "kpreload-boot-ok.service reported the system booting"},
	} {
		if got := c.u.Describe(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.u, got, c.want)
		}
	}
}
