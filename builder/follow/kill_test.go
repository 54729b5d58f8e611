package follow

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestCycleKilledHelper is the cycle TestCycleKilled kills: it runs only
// in the process that test starts.
func TestCycleKilledHelper(t *testing.T) {
	dir := os.Getenv("FOLLOW_KILLED_DIR")
	if dir == "" {
		t.Skip("the process TestCycleKilled starts and kills")
	}
	o, _ := setupIn(t, dir, os.Getenv("FOLLOW_KILLED_REGISTRY"), time.Time{})
	o.Build.Remote = openRemote(t, os.Getenv("FOLLOW_KILLED_REGISTRY"), filepath.Join(t.TempDir(), "key"), true)
	Cycle(context.Background(), o)
	t.Fatal("the cycle ended; it should have stalled before the manifest until killed")
}

// TestCycleKilled kills a cycle (SIGKILL) after it built its cell and
// pushed its blobs, before the manifest: the registry holds no record, the
// lock is free, and the next cycle pushes the cell without building it.
func TestCycleKilled(t *testing.T) {
	if os.Getenv("FOLLOW_KILLED_DIR") != "" {
		return
	}
	testenv.KernelTree(t, testKernel) // the helper's cycle needs it; not in -short
	reg := testenvRegistry(t)
	dir := t.TempDir()
	// The helper's own t.TempDir directories (and any other temporary file
	// it makes) go under tmp, which this test owns: killed, the helper never
	// cleans up, and nothing of it may be left in /tmp.
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCycleKilledHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), "FOLLOW_KILLED_DIR="+dir, "FOLLOW_KILLED_REGISTRY="+reg, "TMPDIR="+tmp)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stalled := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "stalling before the manifest") {
				stalled <- true
			}
		}
		close(stalled)
	}()
	select {
	case ok := <-stalled:
		if !ok {
			cmd.Wait()
			t.Fatal("the cycle ended before it stalled mid-push")
		}
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the cycle did not reach the push in 2 minutes")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if left, _ := filepath.Glob(filepath.Join(tmp, "TestCycleKilledHelper*")); len(left) == 0 {
		t.Errorf("the killed helper made no temporary directory in %s, the test's own: it left them elsewhere", tmp)
	}

	o, f := setupIn(t, dir, reg, time.Time{})
	recs, _, _ := o.Build.Remote.List(context.Background())
	if len(recs) != 0 {
		t.Fatalf("the killed cycle left %d records, want none", len(recs))
	}
	rep, err := Cycle(context.Background(), o)
	if err != nil || rep.New != 1 || f.calls.Load() != 0 {
		t.Fatalf("the next cycle: %v, %+v, %d builds; want the killed cycle's cell pushed, not rebuilt", err, rep, f.calls.Load())
	}
}

func testenvRegistry(t *testing.T) string { return testenv.StartRegistry(t).Addr }
