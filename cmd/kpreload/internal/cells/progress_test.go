package cells

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
)

// TestBuildProgressLines: the lines build prints off a terminal as cells
// change state.
func TestBuildProgressLines(t *testing.T) {
	var b bytes.Buffer
	p := NewProgress(&b)
	r := &recipe.Recipe{Name: "testdriver"}
	start := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	cell := matrix.Cell{Recipe: r, Kernel: "6.1.0-56-cloud-amd64"}
	p.Event(matrix.Event{Cell: cell, Index: 0, State: matrix.StateBuilding, Time: start})
	p.Event(matrix.Event{Cell: cell, Index: 0, State: matrix.StateOK, Time: start.Add(3 * time.Second),
		Result: &matrix.Result{State: matrix.StateOK, Duration: 3 * time.Second, Remote: "pushed"}})
	other := matrix.Cell{Recipe: r, Kernel: "6.12.0-1-cloud-amd64"}
	p.Event(matrix.Event{Cell: other, Index: 1, State: matrix.StateFailed, Time: start,
		Result: &matrix.Result{State: matrix.StateFailed, FirstError: "error: x.c:1", Remote: "push failed", PushErr: errors.New("denied")}})
	p.Stop()
	clitest.WantIn(t, "build progress", b.String(), "building (0s)", "ok (3s) [pushed]", "failed: error: x.c:1 [push failed]: denied")
}
