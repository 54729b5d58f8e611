package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// UpPrefix starts the lines kpreload's units write on the report channel
// after switch_root, each one Up record as JSON: kpreload-boot-ok.service's
// early in boot (UpBooting), kpreload-up.service's once the system is up
// (UpUp). A boot harness ends its run on the second.
const UpPrefix = "kpreload-up: "

// UpFormat is the current format of the Up record.
const UpFormat = 1

// The states an Up record tells.
const (
	// UpBooting: the real init runs kpreload's units, and kpreload-up.service
	// is enabled, so an UpUp record follows once the system is up.
	UpBooting = "booting"
	// UpUp: the system reached its default target.
	UpUp = "up"
)

// UpUnit is the unit that writes the UpUp record.
const UpUnit = "kpreload-up.service"

// Up is one line kpreload's units write on /init's report channel
// (Report.Channel) once the real init runs them.
type Up struct {
	Format int `json:"format"`
	// State is UpBooting or UpUp.
	State string `json:"state"`
	// Unit is the systemd unit that wrote the record.
	Unit string `json:"unit"`
	// Target is the target the system came up to (the default target, or
	// the command line's systemd.unit=), with State UpUp.
	Target string `json:"target,omitempty"`
	// Time is /proc/uptime when the record was written: seconds since the
	// kernel started, the clock of Report's times.
	Time float64 `json:"time"`
}

// Line renders the record as the one line a harness parses back (no newline).
func (u *Up) Line() (string, error) {
	b, err := json.Marshal(u)
	if err != nil {
		return "", fmt.Errorf("up record: %w", err)
	}
	return UpPrefix + string(b), nil
}

// Describe says what the record tells, in words ("kpreload-up.service
// reported the system up (multi-user.target)").
func (u *Up) Describe() string {
	switch u.State {
	case UpUp:
		s := u.Unit + " reported the system up"
		if u.Target != "" {
			s += " (" + u.Target + ")"
		}
		return s
	case UpBooting:
		return u.Unit + " reported the system booting"
	}
	return u.Unit + " reported " + u.State
}

// maxUpLine bounds an up line: a record is a few hundred bytes.
const maxUpLine = 4096

// ScanUp reads a report channel's log and returns the first intact Up
// record of each state found in it (nil when absent), with the line that
// carried the UpUp record. Lines may carry a trailing \r or text before the
// prefix; a line whose JSON is damaged, of another format or of an unknown
// state is skipped.
func ScanUp(log []byte) (booting, up *Up, upLine string) {
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		i := strings.Index(line, UpPrefix)
		if i < 0 || len(line)-i > maxUpLine {
			continue
		}
		var u Up
		if err := json.Unmarshal([]byte(line[i+len(UpPrefix):]), &u); err != nil || u.Format != UpFormat || u.Unit == "" {
			continue
		}
		switch {
		case u.State == UpBooting && booting == nil:
			booting = &u
		case u.State == UpUp && up == nil:
			up, upLine = &u, line[i:]
		}
	}
	return booting, up, upLine
}
