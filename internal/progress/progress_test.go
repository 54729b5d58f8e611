package progress

import (
	"strings"
	"testing"
	"time"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *fakeClock               { return &fakeClock{t: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)} }

// TestPlain checks that off a terminal only the messages come out, one
// plain line each, with no control characters and no status line.
func TestPlain(t *testing.T) {
	var b strings.Builder
	c := newClock()
	l := New(&b, false, c.now)
	l.Add("a", 100)
	l.Add("b", 1)
	l.Begin("a", "a: building")
	c.add(time.Minute)
	l.Tick()
	l.End("a", "a: ok", true, time.Minute)
	l.Begin("b", "")
	l.End("b", "b: cached", false, 0)
	l.Stop()
	if got, want := b.String(), "a: building\na: ok\nb: cached\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

// TestTerminal checks the one status line redrawn in place, with the
// messages printed above it and the line cleared at the end.
func TestTerminal(t *testing.T) {
	var b strings.Builder
	c := newClock()
	l := New(&b, true, c.now)
	l.Add("testdriver 6.1", 1)
	l.Begin("testdriver 6.1", "testdriver 6.1: building")
	c.add(5 * time.Second)
	l.Tick()
	l.End("testdriver 6.1", "testdriver 6.1: ok", true, 5*time.Second)
	l.Stop()
	want := "\r\033[K[0/1] · 0s elapsed" +
		"\r\033[Ktestdriver 6.1: building\n[0/1] testdriver 6.1 · 0s elapsed" +
		"\r\033[K[0/1] testdriver 6.1 · 5s elapsed" +
		"\r\033[Ktestdriver 6.1: ok\n[1/1] · 5s elapsed · about 0s left" +
		"\r\033[K"
	if got := b.String(); got != want {
		t.Errorf("output\n%q\nwant\n%q", got, want)
	}
}

// TestEstimate checks the estimate: none before a unit did its work, then
// the time per unit of cost of the units that did, times the cost left;
// cached units only shrink what is left.
func TestEstimate(t *testing.T) {
	c := newClock()
	l := New(&strings.Builder{}, false, c.now)
	for _, u := range []struct {
		name string
		cost float64
	}{{"nvidia-550 6.1", 100}, {"nvidia-550 6.12", 100}, {"nvidia-550 6.12-rt", 100}, {"testdriver 6.1", 1}} {
		l.Add(u.name, u.cost)
	}
	l.Add("testdriver 6.1", 1) // counted once
	for _, step := range []struct {
		do   func()
		want string
	}{
		{func() { l.Begin("testdriver 6.1", "") }, "[0/4] testdriver 6.1 · 0s elapsed"},
		{func() {
			l.End("testdriver 6.1", "", false, 0)
			l.Begin("nvidia-550 6.1", "")
			l.Begin("nvidia-550 6.12", "")
		},
			"[1/4] nvidia-550 6.1 (+1 more) · 0s elapsed"},
		{func() { c.add(10 * time.Minute); l.End("nvidia-550 6.1", "", true, 10*time.Minute) },
			"[2/4] nvidia-550 6.12 · 10m0s elapsed · about 20m0s left"},
		{func() {
			c.add(2 * time.Minute)
			l.End("nvidia-550 6.12", "", false, 0)
			l.End("nvidia-550 6.12", "", false, 0)
		},
			"[3/4] · 12m0s elapsed · about 10m0s left"},
		{func() { c.add(time.Hour) }, "[3/4] · 1h12m0s elapsed · about 10m0s left"},
	} {
		step.do()
		if got := l.Status(); got != step.want {
			t.Errorf("Status() = %q, want %q", got, step.want)
		}
	}
}
