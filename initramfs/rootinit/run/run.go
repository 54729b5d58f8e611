// Package run lets the test root's /sbin/init run a list of commands before it
// reports: the kernel command line names a file on the root disk
// (kpreload.rootinit.run=/etc/kpreload-test/run), one command per line, arguments
// separated by blanks, no shell; "#" starts a comment line. Each command's exit
// status and output are printed as one "kpreload-rootinit-run: {json}" line, which
// Scan reads back from a console log.
package run

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Param is the kernel command line parameter naming the command file.
const Param = "kpreload.rootinit.run"

// Prefix starts the console line of each command's record.
const Prefix = "kpreload-rootinit-run: "

// Timeout bounds one command.
const Timeout = 3 * time.Minute

// maxOutput caps the output kept per command.
const maxOutput = 64 << 10

// Record is what one command did.
type Record struct {
	// Line is the command's line number in the file.
	Line int      `json:"line"`
	Argv []string `json:"argv"`
	// Exit is the exit status; -1 when the command did not run or was killed.
	Exit int `json:"exit"`
	// Output is stdout and stderr together (the last 64 KiB).
	Output string `json:"output"`
	// Start and End are seconds since the kernel started.
	Start float64 `json:"start"`
	End   float64 `json:"end"`
	// Error says why the command could not run or finish.
	Error string `json:"error,omitempty"`
}

// Command is one line of the file.
type Command struct {
	Line int
	Argv []string
}

// ParseFile reads a command file.
func ParseFile(path string) ([]Command, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("command file: %w", err)
	}
	var cmds []Command
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cmds = append(cmds, Command{Line: i + 1, Argv: strings.Fields(line)})
	}
	return cmds, nil
}

// Run runs one command with Timeout and PATH set; now gives the times.
func Run(c Command, now func() float64) Record {
	rec := Record{Line: c.Line, Argv: c.Argv, Exit: -1, Start: now()}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "TERM=dumb"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	rec.End = now()
	o := out.Bytes()
	if len(o) > maxOutput {
		o = o[len(o)-maxOutput:]
	}
	rec.Output = string(o)
	var exit *exec.ExitError
	switch {
	case err == nil:
		rec.Exit = 0
	case errors.As(err, &exit) && exit.Exited():
		rec.Exit = exit.ExitCode()
	default:
		rec.Error = err.Error()
		if ctx.Err() != nil {
			rec.Error = fmt.Sprintf("killed after %s: %v", Timeout, err)
		}
	}
	return rec
}

// ConsoleLine renders the record as its console line.
func (r Record) ConsoleLine() string {
	b, err := json.Marshal(r)
	if err != nil {
		return Prefix + fmt.Sprintf(`{"line":%d,"exit":-1,"error":%q}`, r.Line, err.Error())
	}
	return Prefix + string(b)
}

// Scan returns every intact record line in a console log, in order. Lines may
// carry a trailing \r; damaged lines are skipped.
func Scan(r io.Reader) ([]Record, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	var recs []Record
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		i := strings.Index(line, Prefix)
		if i < 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal([]byte(line[i+len(Prefix):]), &rec); err == nil {
			recs = append(recs, rec)
		}
	}
	return recs, sc.Err()
}
