// Package boottest holds checks shared by the tests that boot an image and read its
// boot report (report.Report); it sits at the report layer, so only tests of the layers
// above report (builder, cmd) import it.
package boottest

import (
	"strings"
	"testing"

	"github.com/kpreload/kpreload/report"
)

// EduModalias is the modalias prefix of QEMU's edu device (PCI 1234:11e8).
const EduModalias = "pci:v00001234d000011E8"

// CheckEduLoaded checks a boot report for the test driver: kpreload_edu
// loaded before switch_root (in phase when phase is not empty) and the edu
// device bound to it.
func CheckEduLoaded(t testing.TB, rep *report.Report, phase string) {
	t.Helper()
	var edu *report.Module
	for i, mod := range rep.Modules {
		if mod.Name == "kpreload_edu" && mod.Result == "loaded" {
			edu = &rep.Modules[i]
		}
	}
	if edu == nil || (phase != "" && edu.Phase != phase) || edu.End <= 0 || edu.End > rep.SwitchRoot {
		t.Errorf("kpreload_edu = %+v, want loaded (phase %q) before switch_root at %.3f; modules %+v", edu, phase, rep.SwitchRoot, rep.Modules)
	}
	for _, d := range rep.Devices {
		if strings.HasPrefix(d.Modalias, EduModalias) && d.Driver == "kpreload_edu" {
			return
		}
	}
	t.Errorf("edu device not bound to kpreload_edu in the report: %+v", rep.Devices)
}
