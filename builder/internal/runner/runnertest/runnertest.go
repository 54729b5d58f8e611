// Package runnertest is a fake of runner.Runner for unit tests: it records
// the command lines it is given and makes the files a test asks for,
// running nothing.
package runnertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/kpreload/kpreload/builder/internal/runner"
)

// Recorder records each command line it runs, fails the ones Fail names and
// lets Make stand in for what the real program would have made.
type Recorder struct {
	// Fail, when set, makes every command fail whose line begins or ends
	// with it, with a runner.Error whose tail is "fake failure".
	Fail string
	// Missing are programs LookPath does not find.
	Missing []string
	// Make, when set, is called for each command that does not fail: it
	// makes the files the real program would and returns its output.
	Make func(c runner.Cmd) ([]byte, error)

	mu   sync.Mutex
	cmds []string
}

// LookPath implements runner.Runner: every program but Missing is found.
func (r *Recorder) LookPath(name string) (string, error) {
	if slices.Contains(r.Missing, name) {
		return "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
	}
	return "/fake/bin/" + name, nil
}

// Run implements runner.Runner.
func (r *Recorder) Run(ctx context.Context, c runner.Cmd) ([]byte, error) {
	line := c.String()
	r.mu.Lock()
	r.cmds = append(r.cmds, line)
	r.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", c.Name, err)
	}
	if r.Fail != "" && (strings.HasPrefix(line, r.Fail) || strings.HasSuffix(line, r.Fail)) {
		return nil, &runner.Error{Cmd: c, Err: errors.New("exit status 1"), Tail: []string{"fake failure"}}
	}
	if r.Make == nil {
		return nil, nil
	}
	return r.Make(c)
}

// Ran returns the recorded command lines that begin with prefix.
func (r *Recorder) Ran(prefix string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.cmds {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}
