package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/testsupport/buildtest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestSignedRegistry runs the signing flow with real parts: a real registry
// on loopback, the kpreload binary, real dkms builds. A team key signs what
// the builders push; pulls trust only that key. A cell pushed with another
// key is refused by pull-only builds and by cache pull (the others are
// pulled), and a normal build with the team key builds it here and pushes
// its signed cell over it.
func TestSignedRegistry(t *testing.T) {
	if testing.Short() {
		t.Skip("real registry and dkms builds: skipped with -short")
	}
	buildtest.RequireTools(t, dkms.DefaultPath)
	kernelRoot(t, k61)
	reg := testenv.StartRegistry(t)
	url := "oci://" + reg.Addr + "/kpreload/signed"
	kp := staticBinary(t, "kpreload")
	work := t.TempDir()
	recipes := filepath.Join(testenv.RepoRoot(t), "recipes")
	run := func(wantOK bool, args ...string) string {
		t.Helper()
		cmd := exec.Command(kp, args...)
		cmd.Dir = work
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdout, err := cmd.Output()
		out := string(stdout) + stderr.String() // standard output first: --json parses from the start
		if (err == nil) != wantOK {
			t.Fatalf("kpreload %s: err %v, want ok %t:\n%s", strings.Join(args, " "), err, wantOK, out)
		}
		return out
	}
	remote := []string{"--remote", url, "--plain-http", "--docker-config", filepath.Join(work, "docker.json")}
	build := func(wantOK bool, cache string, args ...string) string {
		return run(wantOK, append(append([]string{"build", "--recipes", recipes, "--cache", filepath.Join(work, cache)}, remote...), args...)...)
	}
	teamID := strings.TrimSuffix(strings.Fields(run(true, "cache", "keygen", "team"))[0], ":")
	otherID := strings.TrimSuffix(strings.Fields(run(true, "cache", "keygen", "other"))[0], ":")

	// The team's builder; another key's push of the second cell.
	build(true, "builder", "testdriver:"+k61, "--sign", "team.key")
	build(true, "intruder", "testdriver-2:"+k61, "--sign", "other.key")

	// A pull-only build trusting the team takes the first, refuses the second.
	out := build(true, "puller", "testdriver:"+k61, "--pull-only", "--trust", "team.pub", "--json")
	var cells []remoteCell
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&cells); err != nil || len(cells) != 1 || cells[0].State != "pulled" {
		t.Fatalf("pull-only build of the team's cell: %v %+v\n%s", err, cells, out)
	}
	out = build(false, "puller2", "testdriver-2:"+k61, "--pull-only", "--trust", "team.pub")
	if !strings.Contains(out, "untrusted") || !strings.Contains(out, otherID) {
		t.Errorf("pull-only build of another key's cell: want a refusal naming %s:\n%s", otherID, out)
	}

	// cache pull of the whole repository: one pulled, one refused, exit non-zero.
	out = run(false, append([]string{"cache", "pull", "--cache", filepath.Join(work, "all"), "--trust", "team.pub"}, remote...)...)
	if !strings.Contains(out, "1 cell(s) pulled, 1 refused") || !strings.Contains(out, otherID) {
		t.Errorf("cache pull --trust team.pub: want one pulled, one refused naming %s:\n%s", otherID, out)
	}
	run(true, "cache", "verify", "--cache", filepath.Join(work, "all"))
	if ls := run(true, "cache", "ls", "--cache", filepath.Join(work, "all")); strings.Contains(ls, "2.0.0") || !strings.Contains(ls, "1.0.0") {
		t.Errorf("cache after the trusted pull:\n%s\nwant the team's 1.0.0 only", ls)
	}

	// The team's builder builds the second cell here and pushes over it.
	out = build(true, "builder", "testdriver-2:"+k61, "--sign", "team.key", "--trust", "team.pub", "--json")
	if !strings.Contains(out, `"state": "ok"`) {
		t.Errorf("team build over an untrusted cell: want it built here:\n%s", out)
	}
	out = build(true, "puller3", "testdriver-2:"+k61, "--pull-only", "--trust", "team.pub", "--json")
	if !strings.Contains(out, `"state": "pulled"`) {
		t.Errorf("after the team's push the cell is the team's: want pulled:\n%s", out)
	}
	t.Logf("team key %s, other key %s", teamID, otherID)
}
