// Package cmdout holds how kpreload's commands print: the JSON every --json
// flag writes, whether the output is a terminal, and the ticking of a
// progress line.
package cmdout

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/internal/progress"
)

// PrintJSON writes v as indented JSON, the format every --json flag uses.
func PrintJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// IsTerminal reports whether w is a terminal device.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// TickEverySecond redraws l's status line every second (the elapsed time
// moves) until the returned function is called.
func TickEverySecond(l *progress.Line) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				l.Tick()
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// Prefixed returns a writer that writes each line to w after prefix: the
// steps a command logs as they happen ("kpreload switch: ...").
func Prefixed(w io.Writer, prefix string) io.Writer { return prefixWriter{w: w, prefix: prefix} }

// prefixWriter writes each line with a prefix.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line == "" {
			continue
		}
		if _, err := fmt.Fprint(p.w, p.prefix+line); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}
