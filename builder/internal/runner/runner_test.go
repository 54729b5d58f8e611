package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestExecRun(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name     string
		cmd      Cmd
		wantOut  string
		wantErr  string // substring; "" for success
		wantTail int
	}{
		{"stdout", Cmd{Name: "sh", Args: []string{"-c", "echo out; echo err >&2"}}, "out\n", "", 0},
		{"env and dir", Cmd{Name: "sh", Args: []string{"-c", "echo $X; pwd"}, Env: []string{"X=1"}, Dir: "/"}, "1\n/\n", "", 0},
		{"combined", Cmd{Name: "sh", Args: []string{"-c", "echo out; echo err >&2"}, Combined: true}, "out\nerr\n", "", 0},
		{"stdin", Cmd{Name: "cat", Stdin: strings.NewReader("in")}, "in", "", 0},
		{"one line", Cmd{Name: "sh", Args: []string{"-c", "echo bad >&2; exit 3"}}, "", "sh -c echo bad >&2; exit 3: exit status 3: bad", 1},
		{"tail", Cmd{Name: "sh", Args: []string{"-c", "seq 1 40; exit 1"}}, "", "last lines:\n  26\n", TailLines},
		{"missing", Cmd{Name: "kpreload-no-such-program"}, "", "kpreload-no-such-program: exec:", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := Exec{}.Run(ctx, tt.cmd)
			if tt.wantErr == "" {
				if err != nil || string(out) != tt.wantOut {
					t.Fatalf("Run = %q, %v; want %q, nil", out, err, tt.wantOut)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Run error = %v, want an *Error containing %q", err, tt.wantErr)
			}
			if got := len(e.Tail); got != tt.wantTail {
				t.Errorf("tail has %d lines, want %d", got, tt.wantTail)
			}
		})
	}
}

func TestExecRunCancelled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Exec{}.Run(ctx, Cmd{Name: "sleep", Args: []string{"30"}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want it to wrap context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Run returned after %v, want the program killed at once", d)
	}
}

func TestExecRunExitError(t *testing.T) {
	_, err := Exec{}.Run(context.Background(), Cmd{Name: "false"})
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("Run(false) = %v, want it to wrap an *exec.ExitError with code 1", err)
	}
}

func TestOr(t *testing.T) {
	if got := Or(nil); got != Default {
		t.Errorf("Or(nil) = %v, want Default", got)
	}
	r := Exec{}
	if got := Or(r); got != r {
		t.Errorf("Or(r) = %v, want r", got)
	}
}

func TestExecRunLog(t *testing.T) {
	var log strings.Builder
	out, err := Exec{}.Run(context.Background(), Cmd{Name: "sh", Args: []string{"-c", "echo out; echo err >&2"}, Log: &log})
	if err != nil || string(out) != "out\n" {
		t.Fatalf("Run = %q, %v; want %q", out, err, "out\n")
	}
	// Standard output and error reach the log in either order.
	if got := log.String(); got != "out\nerr\n" && got != "err\nout\n" {
		t.Errorf("log = %q, want both lines", got)
	}
}

// TestExecRunCancelledGrandchild: a program whose child keeps the output
// pipe open (apt's methods, make's compilers) is stopped with its whole
// process group when the context ends; Run does not wait for the child.
func TestExecRunCancelledGrandchild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	var log bytes.Buffer
	_, err := Exec{}.Run(ctx, Cmd{Name: "sh", Args: []string{"-c", "sleep 299 & echo $!; wait"}, Log: &log})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v, want the context's error", err)
	}
	if took := time.Since(start); took >= 300*time.Second {
		t.Fatalf("Run returned after %s: it waited for the grandchild", took)
	}
	waitGone(t, log.String())
}

// waitGone fails t unless the process whose pid out holds (a shell's $!)
// is gone, or a zombie, within 5 s: its process group was killed.
func waitGone(t *testing.T, out string) {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || pid <= 0 {
		t.Fatalf("the script printed %q, want its background job's pid", out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ESRCH) {
				t.Fatal(err)
			}
			return
		}
		// The state follows the command's closing parenthesis.
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the background job (pid %d) still runs: the process group was not killed", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestExecRunOnlyEnv: with OnlyEnv the program sees Env and nothing of the
// caller's environment.
func TestExecRunOnlyEnv(t *testing.T) {
	t.Setenv("KPRELOAD_RUNNER_LEAK", "1")
	for _, tt := range []struct {
		name    string
		onlyEnv bool
		want    string
	}{
		{"inherited", false, "KPRELOAD_RUNNER_LEAK=1\nX=1\n"},
		{"only Env", true, "X=1\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Cmd{Name: "/usr/bin/env", Env: []string{"X=1"}, OnlyEnv: tt.onlyEnv}
			out, err := Exec{}.Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(l, "X=") || strings.HasPrefix(l, "KPRELOAD_RUNNER_LEAK=") {
					got = append(got, l)
				}
			}
			if g := strings.Join(got, "\n") + "\n"; g != tt.want {
				t.Errorf("environment = %q, want %q", g, tt.want)
			}
		})
	}
}

// TestExecRunKillsLeftovers: a program's background job that outlives it
// (and does not hold its output open) is killed when the program ends.
func TestExecRunKillsLeftovers(t *testing.T) {
	var log bytes.Buffer
	c := Cmd{Name: "sh", Args: []string{"-c", "sleep 298 >/dev/null 2>&1 & echo $!; exit 1"}, Log: &log}
	if _, err := (Exec{}).Run(context.Background(), c); err == nil {
		t.Fatal("Run of a failing script: no error")
	}
	waitGone(t, log.String())
}
