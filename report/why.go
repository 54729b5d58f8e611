package report

import (
	"path"
	"strings"
)

// ModuleNotes returns, for each of r.Modules in order, what the timeline
// says beside it: the phase it loaded in, the devices that asked for it
// ("for 0000:00:02.0") or "dependency" for a loaded module no device asked
// for, its errno and its reason.
func (r *Report) ModuleNotes() [][]string {
	wanted := map[string][]string{}
	for _, d := range r.Devices {
		for _, m := range d.Modules {
			wanted[m] = append(wanted[m], path.Base(d.Path))
		}
	}
	out := make([][]string, len(r.Modules))
	for i, m := range r.Modules {
		var notes []string
		if m.Phase != "" {
			notes = append(notes, m.Phase)
		}
		if devs := wanted[m.Name]; len(devs) > 0 {
			notes = append(notes, "for "+strings.Join(devs, ", "))
		} else if m.Result == "loaded" {
			notes = append(notes, "dependency")
		}
		if m.Errno != "" {
			notes = append(notes, m.Errno)
		}
		if m.Reason != "" {
			notes = append(notes, m.Reason)
		}
		out[i] = notes
	}
	return out
}
