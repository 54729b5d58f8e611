package matrix

import (
	"fmt"
	"time"

	"github.com/kpreload/kpreload/internal/progress"
)

// Progress returns an Options.Progress function that shows a run on l:
// each cell counted at its expected cost (CellCost) when queued, in
// progress from the time it prepares, finished in a final state (its time
// feeding the estimate when it compiled: ok, or failed while building).
// describe(e) is the line printed for an event; "" prints none.
func Progress(l *progress.Line, describe func(Event) string) func(Event) {
	building := map[int]bool{}
	return func(e Event) {
		name := fmt.Sprintf("%s %s", e.Cell.Recipe.Name, e.Cell.Kernel)
		msg := describe(e)
		switch e.State {
		case StateQueued:
			l.Add(name, float64(CellCost(e.Cell)))
			l.Note(msg)
		case StatePreparing:
			l.Begin(name, msg)
		case StateBuilding:
			building[e.Index] = true
			l.Begin(name, msg)
		default:
			worked := e.State == StateOK || (e.State == StateFailed && building[e.Index])
			var took time.Duration
			if e.Result != nil {
				took = e.Result.Duration
			}
			l.End(name, msg, worked, took)
		}
	}
}
