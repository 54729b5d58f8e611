// Package progress shows how far long work (a build matrix, an image build)
// has come: on a terminal one status line redrawn in place (units done of
// the total, the unit in progress, elapsed time and, once a unit has cost
// something, an estimate of what is left), and finished units as lines
// above it; elsewhere plain lines only, one per event, never redrawn.
package progress

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Say tells report, when set, one line made from format and a as by
// fmt.Sprintf.
func Say(report func(string), format string, a ...any) {
	if report != nil {
		report(fmt.Sprintf(format, a...))
	}
}

// Line is the progress display of one piece of long work. Its methods may
// be called from several goroutines.
type Line struct {
	w   io.Writer
	tty bool
	now func() time.Time

	mu        sync.Mutex
	start     time.Time
	total     int
	done      int
	totalCost float64 // of every unit added
	leftCost  float64 // of the units not finished
	spentCost float64 // of the finished units that did their work here
	spent     time.Duration
	costs     map[string]float64 // of every unit added
	finished  map[string]bool
	current   []string // units in progress, in the order they began
	drawn     bool
}

// New returns a Line writing to w, redrawn in place when tty is set; now is
// the clock (time.Now outside tests).
func New(w io.Writer, tty bool, now func() time.Time) *Line {
	return &Line{w: w, tty: tty, now: now, start: now(), costs: map[string]float64{}, finished: map[string]bool{}}
}

// Add counts a unit of work of the given expected cost (any unit: only
// ratios matter), once per name.
func (l *Line) Add(name string, cost float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.costs[name]; ok {
		return
	}
	l.costs[name] = cost
	l.total++
	l.totalCost += cost
	l.leftCost += cost
	l.redraw()
}

// Begin says unit name is in progress; msg, when not empty, is printed as
// a plain line (on a terminal, above the status line).
func (l *Line) Begin(name, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !contains(l.current, name) {
		l.current = append(l.current, name)
	}
	l.print(msg)
}

// Note prints msg as a plain line without changing the counts.
func (l *Line) Note(msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.print(msg)
}

// End says unit name is finished and prints msg. worked says it did its
// work here (compiled, not found in a cache): its cost and the time it took
// since the work started then feed the estimate; a unit that cost nothing
// only leaves the work that is left.
func (l *Line) End(name, msg string, worked bool, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i := index(l.current, name); i >= 0 {
		l.current = append(l.current[:i], l.current[i+1:]...)
	}
	if cost, ok := l.costs[name]; ok && !l.finished[name] {
		l.finished[name] = true
		l.done++
		l.leftCost -= cost
		if worked {
			l.spentCost += cost
			l.spent += took
		}
	}
	l.print(msg)
}

// Tick redraws the status line on a terminal (the elapsed time moves).
func (l *Line) Tick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.redraw()
}

// Stop clears the status line on a terminal.
func (l *Line) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tty && l.drawn {
		io.WriteString(l.w, "\r\033[K")
		l.drawn = false
	}
}

// Status is the status line: "[done/total] current · elapsed · estimate".
func (l *Line) Status() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.status()
}

func (l *Line) status() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%d/%d]", l.done, l.total)
	if len(l.current) > 0 {
		b.WriteString(" " + l.current[0])
		if n := len(l.current) - 1; n > 0 {
			fmt.Fprintf(&b, " (+%d more)", n)
		}
	}
	fmt.Fprintf(&b, " · %s elapsed", round(l.now().Sub(l.start)))
	if est, ok := l.estimate(); ok {
		fmt.Fprintf(&b, " · about %s left", round(est))
	}
	return b.String()
}

// estimate is the time the work left should take at the rate the finished
// units that did their work took (time per unit of cost), and false before
// any did. Units run at once make it pessimistic.
func (l *Line) estimate() (time.Duration, bool) {
	if l.spentCost <= 0 || l.spent <= 0 {
		return 0, false
	}
	left := l.leftCost
	if left < 0 {
		left = 0
	}
	return time.Duration(float64(l.spent) / l.spentCost * left), true
}

// print writes msg as a plain line and, on a terminal, the status line
// below it; call with l.mu held.
func (l *Line) print(msg string) {
	if !l.tty {
		if msg != "" {
			fmt.Fprintln(l.w, msg)
		}
		return
	}
	var b strings.Builder
	b.WriteString("\r\033[K")
	if msg != "" {
		b.WriteString(msg + "\n")
	}
	b.WriteString(l.status())
	io.WriteString(l.w, b.String())
	l.drawn = true
}

// redraw rewrites the status line on a terminal; call with l.mu held.
func (l *Line) redraw() {
	if l.tty {
		l.print("")
	}
}

// round shows a duration to the second (to the minute past an hour).
func round(d time.Duration) time.Duration {
	if d >= time.Hour {
		return d.Round(time.Minute)
	}
	return d.Round(time.Second)
}

func contains(s []string, v string) bool { return index(s, v) >= 0 }

func index(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
