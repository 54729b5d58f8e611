package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/initramfs/assemble"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/buildtest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// remoteCell is one cell of `kpreload build --json` with its remote outcome.
type remoteCell struct {
	cellJSON
	Remote    string `json:"remote"`
	PushError string `json:"push_error"`
}

// TestDistributedBuild is issue 11's proof with real parts: a real registry
// (Debian's docker-registry, distribution 2.8) on loopback, real dkms builds
// of the test driver (2 kernels × 2 versions) split over 2 shard processes
// running at once, one of them SIGKILLed between its blobs and its manifest
// and rerun; then an empty cache takes the cells from the registry alone and
// the kernel boots them in QEMU with the device bound; a flipped byte in the
// registry's storage is refused on pull.
func TestDistributedBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("real registry, dkms builds and a QEMU boot: skipped with -short")
	}
	buildtest.RequireTools(t, dkms.DefaultPath)
	for _, k := range []string{k61, k612} {
		kernelRoot(t, k)
	}
	reg := testenv.StartRegistry(t)
	url := "oci://" + reg.Addr + "/kpreload/cells"
	kp := staticBinary(t, "kpreload")
	work := t.TempDir()
	// The matrix: test driver 1.0.0 and 2.0.0, each for 6.1 and 6.12.
	matrixArgs := []string{"testdriver:" + k61, "testdriver:" + k612, "testdriver-2"}
	all := []string{"testdriver-2/" + k61, "testdriver-2/" + k612, "testdriver/" + k61, "testdriver/" + k612}
	docker := filepath.Join(work, "docker-config.json") // no credentials: an open local registry
	// kpreload runs "kpreload SUB... --cache CACHE --remote URL --plain-http ... ARGS...".
	kpreload := func(sub []string, cache string, env []string, args ...string) *exec.Cmd {
		a := append(slices.Clone(sub), "--cache", cache, "--remote", url, "--plain-http", "--docker-config", docker)
		cmd := exec.Command(kp, append(a, args...)...)
		cmd.Env = append(os.Environ(), env...)
		return cmd
	}
	recipes := filepath.Join(testenv.RepoRoot(t), "recipes")
	buildCmd := func(cache string, env []string, args ...string) *exec.Cmd {
		return kpreload([]string{"build", "--json", "--recipes", recipes}, cache, env, args...)
	}
	decode := func(name string, out []byte) map[string]remoteCell {
		var cells []remoteCell
		if err := json.Unmarshal(out, &cells); err != nil {
			t.Fatalf("%s: --json: %v\n%s", name, err, out)
		}
		m := map[string]remoteCell{}
		for _, c := range cells {
			m[c.Recipe+"/"+c.Kernel] = c
		}
		return m
	}
	keys := func(m map[string]remoteCell) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}

	// 1. Two shard processes at once, each with its own empty cache. Shard 2
	// stops between the blobs and the manifest of its first push and is
	// SIGKILLed there.
	cache1, cache2 := filepath.Join(work, "shard1"), filepath.Join(work, "shard2")
	var wg sync.WaitGroup
	var out1 []byte
	var err1 error
	var stderr1 bytes.Buffer
	wg.Add(1)
	go func() {
		defer wg.Done()
		cmd := buildCmd(cache1, nil, append(matrixArgs, "--shard", "1/2")...)
		cmd.Stderr = &stderr1
		out1, err1 = cmd.Output()
	}()
	killed := buildCmd(cache2, []string{"KPRELOAD_REMOTE_STALL_BEFORE_MANIFEST=1"}, append(matrixArgs, "--shard", "2/2")...)
	pipe, err := killed.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	stalled := make(chan string, 1)
	var stderr2 bytes.Buffer
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			stderr2.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "stalling before the manifest") {
				stalled <- sc.Text()
			}
		}
		io.Copy(io.Discard, pipe)
	}()
	select {
	case line := <-stalled:
		t.Logf("shard 2/2 stalled mid-push: %s", line)
	case <-time.After(testenv.Deadline(t, 10*time.Minute)):
		killed.Process.Kill()
		t.Fatalf("shard 2/2 never reached its first push:\n%s", stderr2.String())
	}
	if err := killed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed.Wait()
	wg.Wait()
	if err1 != nil {
		t.Fatalf("shard 1/2: %v\n%s", err1, stderr1.String())
	}
	shard1 := decode("shard 1/2", out1)
	if len(shard1) != 2 {
		t.Fatalf("shard 1/2 ran cells %v, want 2 of the 4", keys(shard1))
	}
	for name, c := range shard1 {
		if c.State != "ok" || c.Remote != "pushed" {
			t.Errorf("shard 1/2 %s: %s, remote %q %s; want ok, pushed", name, c.State, c.Remote, c.PushError)
		}
	}

	// The killed push left the registry with shard 1's cells only, and both
	// local caches consistent.
	reportOf := func() map[string]string {
		out, err := buildCmd(cache1, nil, "--report").Output()
		if err != nil {
			t.Fatalf("build --report: %v", err)
		}
		return reportCells(t, out)
	}
	if got, want := keysOf(reportOf()), keys(shard1); !slices.Equal(got, want) {
		t.Errorf("after the kill the registry holds %v, want shard 1's cells %v only (a killed push leaves no tag)", got, want)
	}
	for _, c := range []string{cache1, cache2} {
		if out, err := exec.Command(kp, "cache", "verify", "--cache", c).CombinedOutput(); err != nil {
			t.Errorf("cache verify %s after the kill: %v\n%s", c, err, out)
		}
	}

	// 2. Shard 2 again: its built cell is in its cache (cached) and is pushed
	// now; the other is built and pushed.
	out2, err := buildCmd(cache2, nil, append(matrixArgs, "--shard", "2/2")...).Output()
	if err != nil {
		t.Fatalf("shard 2/2 rerun: %v", err)
	}
	shard2 := decode("shard 2/2", out2)
	states := map[string]int{}
	for name, c := range shard2 {
		if c.Remote != "pushed" {
			t.Errorf("shard 2/2 rerun %s: remote %q %s, want pushed", name, c.Remote, c.PushError)
		}
		states[c.State]++
	}
	if states["cached"] != 1 || states["ok"] != 1 {
		t.Errorf("shard 2/2 rerun states %v, want 1 cached (built before the kill) and 1 ok", states)
	}
	if got := append(keys(shard1), keys(shard2)...); !slices.Equal(sorted(got), all) {
		t.Errorf("the shards ran %v, want each of %v once", got, all)
	}
	rep := reportOf()
	if got := keysOf(rep); !slices.Equal(got, all) {
		t.Errorf("registry report %v, want %v", got, all)
	}
	for c, s := range rep {
		if s != "ok" {
			t.Errorf("registry report: %s is %s", c, s)
		}
	}

	// 3. An empty cache takes the 6.1 cells an image needs from the registry
	// alone (their keys computed from the recipes and headers), and 6.1 boots
	// them: the test driver binds the edu device.
	pulledCache := filepath.Join(work, "pulled")
	out3, err := buildCmd(pulledCache, nil, "--pull-only", "testdriver:"+k61, "testdriver-2:"+k61).Output()
	if err != nil {
		t.Fatalf("build --pull-only: %v", err)
	}
	for name, c := range decode("pull-only", out3) {
		if c.State != "pulled" {
			t.Errorf("pull-only %s: %s (%s), want pulled", name, c.State, c.FirstError)
		}
	}
	st, err := store.Open(pulledCache)
	if err != nil {
		t.Fatal(err)
	}
	ents, err := st.List()
	if err != nil || len(ents) != 2 {
		t.Fatalf("pulled cache holds %v (%v), want the 2 sets for %s", ents, err, k61)
	}
	dir := t.TempDir()
	initBin := staticBinary(t, "kpreload-init")
	rootInit := staticBinary(t, "kpreload-rootinit")
	initrd := filepath.Join(dir, "initrd.img")
	if _, err := assemble.WriteFile(assemble.Options{
		Kernel: k61, ModulesDir: filepath.Join(kernelRoot(t, k61), "lib", "modules", k61), Init: initBin, CacheDir: pulledCache,
	}, initrd); err != nil {
		t.Fatalf("initramfs from pulled cells: %v", err)
	}
	res := boot(t, k61, dir, initrd, rootInit, "", []string{"edu"}, "")
	m, ok := loaded(res.Report, "kpreload_edu")
	if !ok || m.Result != "loaded" || !slices.ContainsFunc(ents, func(e store.Entry) bool { return e.ID == m.Set }) {
		t.Errorf("kpreload_edu = %+v, want loaded from a pulled set", m)
	}
	if con := console(t, res); !strings.Contains(con, eduID) {
		t.Errorf("console lacks %q:\n%s", eduID, lastLines(con, 30))
	}

	// 4. One flipped byte in a module blob in the registry's storage: the
	// pull refuses it, naming the cell, and nothing enters the cache.
	mf, err := st.Get(ents[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	blob := reg.BlobPath(mf.Modules[0].SHA256)
	b, err := os.ReadFile(blob)
	if err != nil {
		t.Fatalf("the registry's copy of %s: %v", mf.Modules[0].File, err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(blob, b, 0o644); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(work, "victim")
	out4, err := kpreload([]string{"cache", "pull"}, victim, nil, "--kernel", k61, "--version", mf.Version).CombinedOutput()
	if err == nil {
		t.Fatalf("pull of a corrupted blob succeeded:\n%s", out4)
	}
	for _, want := range []string{"for " + k61, mf.Modules[0].File, "digest"} {
		if !strings.Contains(string(out4), want) {
			t.Errorf("pull error lacks %q:\n%s", want, out4)
		}
	}
	t.Logf("pull of the corrupted cell: %s", strings.TrimSpace(string(out4)))
	vs, err := store.Open(victim)
	if err != nil {
		t.Fatal(err)
	}
	if ents, err := vs.List(); err != nil || len(ents) != 0 {
		t.Errorf("after the refused pull the cache holds %v (%v), want nothing", ents, err)
	}
}

// reportCells decodes `kpreload build --report --json` into "recipe/kernel" -> state.
func reportCells(t *testing.T, out []byte) map[string]string {
	t.Helper()
	var recs []struct {
		Recipe, Kernel, State string
	}
	if err := json.Unmarshal(out, &recs); err != nil {
		t.Fatalf("build --report --json: %v\n%s", err, out)
	}
	m := map[string]string{}
	for _, r := range recs {
		m[r.Recipe+"/"+r.Kernel] = r.State
	}
	return m
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
