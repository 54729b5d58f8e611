package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Environment of the child process the crash tests run and kill: the test
// binary itself, re-executed, runs one AddFiles and nothing else.
const (
	envChild  = "KPRELOAD_STORE_TEST_CHILD" // set: be the child
	envCache  = "KPRELOAD_STORE_TEST_CACHE"
	envFiles  = "KPRELOAD_STORE_TEST_FILES"  // newline-separated module files
	envStage  = "KPRELOAD_STORE_TEST_STAGE"  // hook stage to stop at ("" for none)
	envMarker = "KPRELOAD_STORE_TEST_MARKER" // file created when stopped (or when starting, without a stage)
)

// crashKey is the cache key every child adds its set under.
var crashKey = map[string]string{"source": "crash-test", "compiler": "gcc-12"}

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// childMain adds the set described by the environment, stopping for good at
// the named hook stage after creating the marker file, so the parent can
// SIGKILL it there.
func childMain() int {
	stage, marker := os.Getenv(envStage), os.Getenv(envMarker)
	if stage != "" {
		hook = func(s string) {
			if s != stage {
				return
			}
			if err := os.WriteFile(marker, []byte(s), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, "child:", err)
				os.Exit(3)
			}
			for {
				time.Sleep(time.Hour) // wait for SIGKILL
			}
		}
	}
	s, err := Open(os.Getenv(envCache))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	if stage == "" && marker != "" {
		if err := os.WriteFile(marker, []byte("start"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 3
		}
	}
	_, id, err := s.AddFiles(context.Background(), AddRequest{
		Driver: "virtio-test", Version: "1",
		Files:    strings.Split(os.Getenv(envFiles), "\n"),
		CacheKey: crashKey,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	fmt.Println(id)
	return 0
}

// childSpec describes one child run.
type childSpec struct {
	cache  string
	files  []string
	stage  string
	marker string
}

func (c childSpec) command() *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		envChild+"=1",
		envCache+"="+c.cache,
		envFiles+"="+strings.Join(c.files, "\n"),
		envStage+"="+c.stage,
		envMarker+"="+c.marker,
	)
	return cmd
}

// runChild runs a child to completion and returns its standard output.
func runChild(t *testing.T, c childSpec) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := c.command()
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child add: %v: %s", err, stderr.String())
	}
	return string(out)
}

// startChild starts a child and waits until it creates its marker file: it
// has reached its stage (and blocks there) or, without a stage, is about to
// add. It returns the running command.
func startChild(t *testing.T, c childSpec) (*exec.Cmd, chan error) {
	t.Helper()
	var stderr bytes.Buffer
	cmd := c.command()
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(60 * time.Second)
	for {
		if _, err := os.Stat(c.marker); err == nil {
			return cmd, done
		}
		select {
		case err := <-done:
			t.Fatalf("child exited before reaching stage %q: %v: %s", c.stage, err, stderr.String())
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("child did not reach stage %q within 60s", c.stage)
		case <-time.After(100 * time.Microsecond):
		}
	}
}

// sigkill kills the child with SIGKILL and checks that SIGKILL is what ended
// it (or, when mayFinish, that it had already finished cleanly). It reports
// whether the kill interrupted the child.
func sigkill(t *testing.T, cmd *exec.Cmd, done chan error, mayFinish bool) bool {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("SIGKILL child: %v", err)
	}
	err := <-done
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok {
		t.Fatalf("child wait status %T, want syscall.WaitStatus", cmd.ProcessState.Sys())
	}
	if ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		return true
	}
	if mayFinish && ws.Exited() && ws.ExitStatus() == 0 {
		return false
	}
	t.Fatalf("child ended with %v (%v), want killed by SIGKILL", cmd.ProcessState, err)
	return false
}

// tempFiles lists the writer temporary files anywhere in the cache.
func tempFiles(t *testing.T, s *Store) []string {
	t.Helper()
	var found []string
	filepath.WalkDir(s.Dir(), func(p string, d os.DirEntry, err error) error {
		if err == nil && isTemp(d.Name()) {
			found = append(found, p)
		}
		return nil
	})
	return found
}

// checkConsistent checks what a reader sees after a writer died: the listing
// holds no set or the complete one, every object a manifest references is
// there and intact, and the only problem Verify may report is a stale boot
// index (when allowed). It returns the sets listed and the problems.
func checkConsistent(t *testing.T, s *Store, nfiles int, staleOK bool) (int, []Problem) {
	t.Helper()
	ents, err := s.List()
	if err != nil {
		t.Fatalf("List() after kill: %v", err)
	}
	if len(ents) > 1 {
		t.Fatalf("List() after kill = %+v, want at most one set", ents)
	}
	if len(ents) == 1 {
		m, err := s.Get(ents[0].ID)
		if err != nil {
			t.Fatalf("Get(%s) after kill: %v", ents[0].ID, err)
		}
		if len(m.Modules) != nfiles {
			t.Errorf("set after kill has %d modules, want %d (a half set)", len(m.Modules), nfiles)
		}
	}
	probs, err := s.Verify(context.Background())
	if err != nil {
		t.Fatalf("Verify() after kill: %v", err)
	}
	for _, p := range probs {
		if p.Kind != ProblemStaleIndex || !staleOK {
			t.Errorf("Verify() after kill: %s", p)
		}
	}
	return len(ents), probs
}

func TestCrashAtEachStage(t *testing.T) {
	files := moduleFiles(t, k61)
	// The id a clean add gives.
	clean := openStore(t)
	_, wantID := addSet(t, clean, AddRequest{Driver: "virtio-test", Version: "1", Files: files, CacheKey: crashKey})

	tests := []struct {
		stage     string
		tempIn    string // directory that must hold the killed writer's temp file
		wantSet   bool   // the set is listed after the kill
		wantKey   bool   // Lookup finds it
		wantStale bool   // Verify reports the boot index as stale
	}{
		{stage: "object-partial", tempIn: "objects/sha256/*"},
		{stage: "objects"},
		{stage: "manifest-temp", tempIn: "sets"},
		{stage: "manifest", wantSet: true, wantStale: true},
		{stage: "key-temp", tempIn: "keys", wantSet: true, wantStale: true},
		{stage: "key", wantSet: true, wantKey: true, wantStale: true},
		{stage: "index-temp", tempIn: "index", wantSet: true, wantKey: true, wantStale: true},
		{stage: "done", wantSet: true, wantKey: true},
	}
	for _, tt := range tests {
		t.Run(tt.stage, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(filepath.Join(dir, "cache"))
			if err != nil {
				t.Fatal(err)
			}
			c := childSpec{cache: s.Dir(), files: files, stage: tt.stage, marker: filepath.Join(dir, "marker")}
			cmd, done := startChild(t, c)
			sigkill(t, cmd, done, false)

			temps := tempFiles(t, s)
			if tt.tempIn != "" {
				matched := false
				for _, p := range temps {
					rel, _ := filepath.Rel(s.Dir(), filepath.Dir(p))
					if ok, _ := filepath.Match(tt.tempIn, rel); ok {
						matched = true
					}
				}
				if !matched {
					t.Errorf("after kill at %s: temp files %q, want one in %s (killed mid-write)", tt.stage, temps, tt.tempIn)
				}
			} else if len(temps) != 0 {
				t.Errorf("after kill at %s: temp files %q, want none", tt.stage, temps)
			}

			n, probs := checkConsistent(t, s, len(files), tt.wantStale)
			if got := n == 1; got != tt.wantSet {
				t.Errorf("after kill at %s: set listed = %v, want %v", tt.stage, got, tt.wantSet)
			}
			if stale := len(probs) > 0; stale != tt.wantStale {
				t.Errorf("after kill at %s: Verify problems %v, want stale index %v", tt.stage, probs, tt.wantStale)
			}
			if id, ok, err := s.Lookup(crashKey); err != nil || ok != tt.wantKey || (ok && id != wantID) {
				t.Errorf("after kill at %s: Lookup = %s, %v, %v, want found %v (%s)", tt.stage, id, ok, err, tt.wantKey, wantID)
			}

			// The next writer cleans up: temp files gone, index rewritten.
			rep, err := s.Repair(context.Background())
			if err != nil {
				t.Fatalf("Repair() after kill at %s: %v", tt.stage, err)
			}
			t.Logf("kill at %s: temps %d, indexes rewritten %d, orphan objects %d", tt.stage, len(rep.TempFiles), len(rep.Indexes), len(rep.Objects))
			if left := tempFiles(t, s); len(left) != 0 {
				t.Errorf("temp files after Repair: %q", left)
			}
			mustVerifyClean(t, s)
			if !tt.wantSet && countObjects(t, s) != 0 {
				t.Errorf("objects after Repair with no set = %d, want 0", countObjects(t, s))
			}
			// Adding again completes the set, with the same id.
			_, id := addSet(t, s, AddRequest{Driver: "virtio-test", Version: "1", Files: files, CacheKey: crashKey})
			if id != wantID {
				t.Errorf("add after kill at %s: id %s, want %s", tt.stage, id, wantID)
			}
			ix, err := s.Index(k61)
			if err != nil || len(ix.Sets) != 1 || ix.Sets[0].ID != wantID {
				t.Errorf("Index after re-add = %+v, %v, want the set %s", ix, err, wantID)
			}
			mustVerifyClean(t, s)
		})
	}
}

// TestCrashAtRandomTimes kills real writers, without any hook, at delays spread
// over how long an add takes, and checks the invariants after every kill.
func TestCrashAtRandomTimes(t *testing.T) {
	files := moduleFiles(t, k61)
	// Calibrate: how long does a child take from its start marker to exit?
	dir := t.TempDir()
	_, done := startChild(t, childSpec{cache: filepath.Join(dir, "cache"), files: files, marker: filepath.Join(dir, "marker")})
	start := time.Now()
	if err := <-done; err != nil {
		t.Fatalf("calibration child: %v", err)
	}
	span := time.Since(start)
	const steps = 16
	var before, after, finished int
	for i := 0; i <= steps+2; i++ {
		d := span * time.Duration(i) / steps
		dir := t.TempDir()
		s, err := Open(filepath.Join(dir, "cache"))
		if err != nil {
			t.Fatal(err)
		}
		cmd, done := startChild(t, childSpec{cache: s.Dir(), files: files, marker: filepath.Join(dir, "marker")})
		time.Sleep(d)
		killed := sigkill(t, cmd, done, true)
		n, _ := checkConsistent(t, s, len(files), true)
		switch {
		case !killed:
			finished++
		case n == 0:
			before++
		default:
			after++
		}
		if _, err := s.Repair(context.Background()); err != nil {
			t.Fatalf("Repair() after kill at +%v: %v", d, err)
		}
		mustVerifyClean(t, s)
	}
	t.Logf("an add takes %v; %d kills before the manifest, %d after it, %d writers finished first", span, before, after, finished)
}

// TestLockExcludesWriters holds the writer lock in a child stopped mid-add and
// checks that another writer waits for it, and gets it once the child is
// SIGKILLed (the kernel drops a dead process's flock).
func TestLockExcludesWriters(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(filepath.Join(dir, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	c := childSpec{cache: s.Dir(), files: moduleFiles(t, k61), stage: "objects", marker: filepath.Join(dir, "marker")}
	cmd, done := startChild(t, c)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err = s.AddFiles(ctx, AddRequest{Driver: "virtio-test", Version: "1", Files: moduleFiles(t, k612)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AddFiles while another writer holds the lock = %v, want it to wait and time out", err)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Errorf("AddFiles gave up after %v, want it to wait for the lock", waited)
	}

	sigkill(t, cmd, done, false)
	_, id, err := s.AddFiles(context.Background(), AddRequest{Driver: "virtio-test", Version: "1", Files: moduleFiles(t, k612)})
	if err != nil {
		t.Fatalf("AddFiles after the lock holder was killed: %v", err)
	}
	ents, _ := s.List()
	if len(ents) != 1 || ents[0].ID != id {
		t.Errorf("List() = %+v, want only %s", ents, id)
	}
	mustVerifyClean(t, s)
	rep, err := s.Repair(context.Background())
	if err != nil {
		t.Fatalf("Repair() error = %v", err)
	}
	if len(rep.Objects) != 4 {
		t.Errorf("Repair() removed objects %q, want the killed writer's 4", rep.Objects)
	}
	if n := countObjects(t, s); n != 4 {
		t.Errorf("objects after Repair = %d, want 4", n)
	}
}
