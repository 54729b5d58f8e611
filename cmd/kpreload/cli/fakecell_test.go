package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
	"github.com/kpreload/kpreload/kmodcache/remote/remotetest"
)

// fakeKernel is the kernel release fakeModule's vermagic names.
const fakeKernel = "6.1.0-fake"

// fakeModule assembles, with the real assembler, a small module file of
// driver name built for fakeKernel: a .modinfo section (licence, alias,
// firmware, a parameter) and the module structure's section, what kpreload
// reads of a .ko. It returns the file's path.
func fakeModule(t *testing.T, name string) string {
	t.Helper()
	as, err := exec.LookPath("as")
	if err != nil {
		t.Fatalf("as (binutils) is needed to assemble a module: install it with scripts/deps.sh: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, name+".s")
	if err := os.WriteFile(src, []byte(`
	.section .modinfo,"a"
	.asciz "license=GPL"
	.asciz "alias=pci:v00001234d000011E8sv*sd*bc*sc*i*"
	.asciz "name=`+name+`"
	.asciz "vermagic=`+fakeKernel+` SMP preempt mod_unload modversions "
	.asciz "firmware=fake/fw.bin"
	.asciz "parm=debug:turn on debugging"
	.asciz "parmtype=debug:int"
	.section .gnu.linkonce.this_module,"aw"
	.fill 64,1,0
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ko := filepath.Join(dir, name+".ko")
	if out, err := exec.Command(as, "--64", "-o", ko, src).CombinedOutput(); err != nil {
		t.Fatalf("as: %v: %s", err, out)
	}
	return ko
}

// TestFakeCellThroughTheCache: an assembled module through modinfo, cache
// add, ls, index, verify and rm.
func TestFakeCellThroughTheCache(t *testing.T) {
	ko := fakeModule(t, "kpreload_fake")
	cache := t.TempDir()

	out, _ := mustRun(t, 0, "modinfo", ko)
	clitest.WantIn(t, "modinfo", out, "name:           kpreload_fake", "parm:           debug:turn on debugging (int)", "signed:         no")
	out, _ = mustRun(t, 0, "modinfo", "-F", "vermagic", ko)
	clitest.WantIn(t, "modinfo -F vermagic", out, fakeKernel+" SMP")
	out, _ = mustRun(t, 0, "modinfo", "--json", ko)
	clitest.WantIn(t, "modinfo --json", out, `"name": "kpreload_fake"`)

	out, _ = mustRun(t, 0, "cache", "add", "--cache", cache, "--driver", "fake", "--version", "1.0", "--flavor", "open", ko)
	clitest.WantIn(t, "cache add", out, "kernel    "+fakeKernel, "driver    fake 1.0 open", "modules   1 (", "firmware  fake/fw.bin")
	out, _ = mustRun(t, 0, "cache", "add", "--cache", cache, "--driver", "fake", "--version", "1.0", "--flavor", "open", "--json", ko)
	var added struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(out), &added); err != nil || len(added.ID) != 64 {
		t.Fatalf("cache add --json = %q, %v; want the set's id", out, err)
	}

	out, _ = mustRun(t, 0, "cache", "ls", "--cache", cache)
	clitest.WantIn(t, "cache ls", out, "SET", added.ID[:12], fakeKernel, "fake", "open")
	out, _ = mustRun(t, 0, "cache", "ls", "--cache", cache, "--kernel", "6.12.0-other")
	if strings.Contains(out, added.ID[:12]) {
		t.Errorf("cache ls --kernel 6.12.0-other lists the set:\n%s", out)
	}
	out, _ = mustRun(t, 0, "cache", "ls", "--cache", cache, "--json")
	clitest.WantIn(t, "cache ls --json", out, added.ID)
	mustRun(t, 0, "cache", "index", "--cache", cache, "--kernel", fakeKernel)

	out, _ = mustRun(t, 0, "cache", "verify", "--cache", cache)
	clitest.WantIn(t, "cache verify", out, "ok: "+cache)
	out, _ = mustRun(t, 0, "cache", "verify", "--cache", cache, "--repair")
	clitest.WantIn(t, "cache verify --repair", out, "repaired: 0 temporary file(s)", "ok: ")
	out, _ = mustRun(t, 0, "cache", "verify", "--cache", cache, "--json")
	clitest.WantIn(t, "cache verify --json", out, `"ok": true`, `"problems": []`)
	_, errOut := mustRun(t, 1, "cache", "verify", "--cache", cache, "--repair", "--rebuild", added.ID[:12])
	clitest.WantIn(t, "cache verify --repair --rebuild", errOut, "--rebuild and --repair: give one")

	// A module file changed under the cache is a problem verify names.
	objects := filepath.Join(cache, "objects")
	changed := 0
	err := filepath.WalkDir(objects, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			changed++
			err = os.WriteFile(p, []byte("not the module"), 0o644)
		}
		return err
	})
	if err != nil || changed != 1 {
		t.Fatalf("changing the module file under %s: %v, %d changed, want 1", objects, err, changed)
	}
	out, errOut = mustRun(t, 1, "cache", "verify", "--cache", cache)
	clitest.WantIn(t, "cache verify of a changed module", out+errOut, "1 problem(s)")

	mustRun(t, 0, "cache", "rm", "--cache", cache, added.ID[:12])
	out, _ = mustRun(t, 0, "cache", "ls", "--cache", cache)
	if strings.Contains(out, added.ID[:12]) {
		t.Errorf("cache ls after rm lists the set:\n%s", out)
	}
}

// TestFakeCellThroughARegistry: cells added from assembled modules, pushed
// to a registry, reported by build --report and pulled back, narrowed by
// --version read as the instance YAML reads it.
func TestFakeCellThroughARegistry(t *testing.T) {
	reg := remotetest.Start(t)
	cache := t.TempDir()
	dockerConfig := filepath.Join(t.TempDir(), "config.json")
	remoteFlags := []string{"--remote", reg.URL(), "--plain-http", "--docker-config", dockerConfig}
	for _, v := range []struct{ driver, version string }{{"fake", "550.54.14"}, {"fake", "535.261.03"}, {"other", "1.0"}} {
		ko := fakeModule(t, "kpreload_"+v.driver)
		mustRun(t, 0, "cache", "add", "--cache", cache, "--driver", v.driver, "--version", v.version,
			"--key", "schema=test/1", "--key", "cell="+v.driver+"-"+v.version, ko)
	}
	out, _ := mustRun(t, 0, append([]string{"cache", "push", "--cache", cache}, remoteFlags...)...)
	clitest.WantIn(t, "cache push", out, "fake 550.54.14", "fake 535.261.03", "other 1.0")

	out, _ = mustRun(t, 0, append([]string{"build", "--report"}, remoteFlags...)...)
	clitest.WantIn(t, "build --report", out, "registry "+reg.URL()+": 3 cells", "no --trust", "CELL", fakeKernel, "fake 550.54.14", "ok, unsigned")
	out, _ = mustRun(t, 0, append([]string{"build", "--report", "--json"}, remoteFlags...)...)
	clitest.WantIn(t, "build --report --json", out, `"driver": "other"`)

	for _, tt := range []struct {
		version    string
		code       int
		want, lack []string
	}{
		{"550", 0, []string{"fake 550.54.14  for " + fakeKernel + ": pulled set"}, []string{"535.261.03"}},
		{"535.261.03", 0, []string{"fake 535.261.03  for "}, []string{"550.54.14"}},
		{"latest", 0, []string{"fake 550.54.14", "fake 535.261.03"}, []string{"other"}},
		{"560", 1, nil, []string{"pulled"}},
	} {
		t.Run(tt.version, func(t *testing.T) {
			args := append([]string{"cache", "pull", "--cache", t.TempDir(), "--driver", "fake", "--version", tt.version}, remoteFlags...)
			out, errOut := mustRun(t, tt.code, args...)
			clitest.WantIn(t, "cache pull --version "+tt.version, out, tt.want...)
			for _, l := range tt.lack {
				if strings.Contains(out, l) {
					t.Errorf("cache pull --version %s pulled %q:\n%s%s", tt.version, l, out, errOut)
				}
			}
		})
	}
	// By key: exactly the cells tagged with it; --json says so.
	out, _ = mustRun(t, 0, append([]string{"cache", "pull", "--cache", t.TempDir(), "--json"}, remoteFlags...)...)
	var pulled []struct {
		Tag      string `json:"tag"`
		LocalSet string `json:"local_set"`
	}
	if err := json.Unmarshal([]byte(out), &pulled); err != nil || len(pulled) != 3 {
		t.Fatalf("cache pull --json = %q, %v; want 3 cells", out, err)
	}
	out, _ = mustRun(t, 0, append([]string{"cache", "pull", "--cache", t.TempDir(), pulled[0].Tag[:12]}, remoteFlags...)...)
	if n := strings.Count(out, "pulled set"); n != 1 {
		t.Errorf("cache pull KEY pulled %d cells, want 1:\n%s", n, out)
	}
}

// TestFakeCellSigned: a key made with cache keygen signs the cells cache
// push sends, and a pull that trusts it takes them verified, where a pull
// trusting another key refuses them.
func TestFakeCellSigned(t *testing.T) {
	t.Chdir(t.TempDir())
	mustRun(t, 0, "cache", "keygen", "team")
	mustRun(t, 0, "cache", "keygen", "--json", "other")
	reg := remotetest.Start(t)
	cache := t.TempDir()
	remoteFlags := []string{"--remote", reg.URL(), "--plain-http", "--docker-config", filepath.Join(t.TempDir(), "config.json")}
	mustRun(t, 0, "cache", "add", "--cache", cache, "--driver", "fake", "--version", "1.0", "--key", "schema=test/1", fakeModule(t, "kpreload_fake"))
	out, _ := mustRun(t, 0, append([]string{"cache", "push", "--cache", cache, "--sign", "team.key", "--json"}, remoteFlags...)...)
	clitest.WantIn(t, "cache push --sign --json", out, `"driver": "fake"`)

	out, errOut := mustRun(t, 0, append([]string{"cache", "pull", "--cache", t.TempDir(), "--trust", "team.pub"}, remoteFlags...)...)
	clitest.WantIn(t, "cache pull --trust team.pub", out, "fake 1.0  for "+fakeKernel+": pulled set")
	if strings.Contains(errOut, "unsigned") || strings.Contains(errOut, "not verified") {
		t.Errorf("cache pull --trust team.pub warns of a cell it verified:\n%s", errOut)
	}
	_, errOut = mustRun(t, 1, append([]string{"cache", "pull", "--cache", t.TempDir(), "--trust", "other.pub"}, remoteFlags...)...)
	clitest.WantIn(t, "cache pull --trust other.pub", errOut, "0 cell(s) pulled, 1 refused")
	out, _ = mustRun(t, 0, append([]string{"build", "--report", "--trust", "team.pub"}, remoteFlags...)...)
	clitest.WantIn(t, "build --report --trust team.pub", out, "fake 1.0", "ok")
}
