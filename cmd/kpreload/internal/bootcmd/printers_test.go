package bootcmd

import (
	"errors"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/report"
)

// TestNewBootJSON: boot --json's record of a run that ended on the image
// being up, and of one that failed.
func TestNewBootJSON(t *testing.T) {
	res := &qemu.Result{Accel: "tcg", Duration: 1500 * time.Millisecond, UntilMatched: true, UntilMatch: "login:",
		Up: &report.Up{State: report.UpUp, Target: "multi-user.target"}, Console: "console.log"}
	got := newBootJSON(res, nil)
	if got.WallSeconds != 1.5 || got.Accel != "tcg" || got.UntilMatch != "login:" || got.UpRecord == nil || got.Error != "" || got.Console != "console.log" {
		t.Errorf("newBootJSON(up) = %+v", got)
	}
	got = newBootJSON(&qemu.Result{TimedOut: true}, errors.New("timed out"))
	if !got.TimedOut || got.Error != "timed out" || got.UntilMatch != "" || got.UpRecord != nil {
		t.Errorf("newBootJSON(timed out) = %+v", got)
	}
}
