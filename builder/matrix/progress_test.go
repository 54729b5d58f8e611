package matrix

import (
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/internal/progress"
)

// TestProgress checks a run's events reach the progress line: cells
// counted when queued, the compiled one's time feeding the estimate at the
// cells' costs, a cached one only shrinking what is left.
func TestProgress(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	l := progress.New(&strings.Builder{}, false, clock)
	local := &recipe.Recipe{Name: "testdriver"}
	packaged := &recipe.Recipe{Name: "nvidia-550"}
	packaged.Source.Package = "nvidia-kernel-dkms=550.1-1"
	cells := []Cell{{Recipe: local, Kernel: "6.1.0-56-cloud-amd64"}, {Recipe: packaged, Kernel: "6.1.0-56-cloud-amd64"}, {Recipe: packaged, Kernel: "6.12.118+deb13-cloud-amd64"}}
	if CellCost(cells[1]) <= CellCost(cells[0]) {
		t.Fatalf("CellCost: a packaged source (%d) should cost more than a local one (%d)", CellCost(cells[1]), CellCost(cells[0]))
	}
	f := Progress(l, func(Event) string { return "" })
	for i, c := range cells {
		f(Event{Cell: c, Index: i, State: StateQueued, Time: now})
	}
	f(Event{Cell: cells[0], Index: 0, State: StateCached, Time: now, Result: &Result{}})
	f(Event{Cell: cells[1], Index: 1, State: StatePreparing, Time: now})
	f(Event{Cell: cells[1], Index: 1, State: StateBuilding, Time: now})
	now = now.Add(8 * time.Minute)
	f(Event{Cell: cells[1], Index: 1, State: StateOK, Time: now, Result: &Result{Duration: 8 * time.Minute}})
	f(Event{Cell: cells[2], Index: 2, State: StatePreparing, Time: now})
	if got, want := l.Status(), "[2/3] nvidia-550 6.12.118+deb13-cloud-amd64 · 8m0s elapsed · about 8m0s left"; got != want {
		t.Errorf("Status() = %q, want %q", got, want)
	}
}
