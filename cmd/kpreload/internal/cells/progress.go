package cells

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/internal/progress"
)

// Progress shows the run on w (internal/progress): on a terminal one
// status line (cells done of all, the cell in progress, elapsed, an
// estimate from the cells' costs) under a line per finished cell; else one
// plain line per state change.
type Progress struct {
	l     *progress.Line
	tty   bool
	show  func(matrix.Event)
	mu    sync.Mutex
	cells []progressCell
	// stopTicks ends the status line's redraws.
	stopTicks func()
}

type progressCell struct {
	recipe, kernel, state string
	since                 time.Time
	res                   *matrix.Result
}

// NewProgress starts showing a matrix build on w; Stop ends it.
func NewProgress(w io.Writer) *Progress {
	p := &Progress{tty: cmdout.IsTerminal(w)}
	p.l = progress.New(w, p.tty, time.Now)
	p.show = matrix.Progress(p.l, p.describe)
	p.stopTicks = cmdout.TickEverySecond(p.l)
	return p
}

// Event records a state change (matrix.Options.Progress).
func (p *Progress) Event(e matrix.Event) { p.show(e) }

// describe is the line printed for an event: every state change off a
// terminal, the final states on one (the status line shows the rest).
func (p *Progress) describe(e matrix.Event) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.cells) <= e.Index {
		p.cells = append(p.cells, progressCell{})
	}
	c := &p.cells[e.Index]
	c.recipe, c.kernel, c.state, c.res = e.Cell.Recipe.Name, e.Cell.Kernel, e.State, e.Result
	if e.State == matrix.StateBuilding || c.since.IsZero() {
		c.since = e.Time
	}
	if p.tty && e.Result == nil {
		return ""
	}
	return p.line(c, e.Time)
}

// line describes one cell.
func (p *Progress) line(c *progressCell, now time.Time) string {
	state := c.state
	switch {
	case c.state == matrix.StateBuilding:
		state = fmt.Sprintf("building (%s)", now.Sub(c.since).Round(time.Second))
	case c.res != nil && c.state == matrix.StateOK:
		state = fmt.Sprintf("ok (%s)", c.res.Duration.Round(100*time.Millisecond))
	case c.res != nil && c.state == matrix.StateFailed:
		state = "failed: " + c.res.FirstError
	}
	if c.res != nil && c.res.Remote != "" && c.res.Remote != "absent" {
		state += " [" + c.res.Remote + "]"
		if c.res.PushErr != nil {
			state += ": " + c.res.PushErr.Error()
		}
	}
	return fmt.Sprintf("%-20s %-30s %s", c.recipe, c.kernel, state)
}

// Stop ends the ticker and clears the status line.
func (p *Progress) Stop() {
	p.stopTicks()
	p.l.Stop()
}
