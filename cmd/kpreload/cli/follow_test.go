package cli

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestFollowHelpExamples runs every example of `kpreload follow --help`
// exactly as written, against a real registry on 127.0.0.1:5055 (not 5000,
// where a host's docker-registry service listens) with the
// real dkms: the first cycle pushes the test driver's cell (built by
// TestBuildJSONAndExitStatus, or by this cycle when that did not run)
// (exit 0 with --new-exit-code 0), the second finds nothing new.
func TestFollowHelpExamples(t *testing.T) {
	testenv.SkipShort(t, "builds the test driver with the real dkms")
	examples := helpExamples(t, "follow", "testdriver:6.1.0-56-cloud-amd64")
	reg := testenv.StartRegistry(t)
	forward5055(t, reg.Addr)
	recipes, err := filepath.Abs("../../../recipes")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	if err := os.Symlink(recipes, "recipes"); err != nil {
		t.Fatal(err)
	}
	if _, err := cellsign.Generate("team.key", "team.pub"); err != nil {
		t.Fatal(err)
	}
	// The cell the first cycle pushes: TestBuildJSONAndExitStatus's real dkms
	// build when that test ran (seedCache), else the first cycle builds it.
	cache := filepath.Join(t.TempDir(), "cache")
	seedCache(t, cache)
	t.Setenv("KPRELOAD_CACHE_DIR", cache)
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	if len(examples) != 2 {
		t.Fatalf("follow --help has %d examples, want 2", len(examples))
	}
	for i, args := range examples {
		code, out, errOut := runCLI(args...)
		if code != 0 {
			t.Fatalf("example %v: exit %d: %s\n%s", args, code, out, errOut)
		}
		if i == 1 {
			var rep struct {
				New   int `json:"new"`
				Cells []struct {
					Kernel string `json:"kernel"`
					Pushed string `json:"pushed"`
				} `json:"cells"`
			}
			if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.New != 0 || len(rep.Cells) != 1 || rep.Cells[0].Pushed == "" {
				t.Fatalf("example %v: %v: %s", args, err, out)
			}
		}
	}
}

// forward5055 forwards 127.0.0.1:5055, the registry address the help
// examples name, to the test registry at addr until the test ends.
func forward5055(t *testing.T, addr string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:5055")
	if err != nil {
		t.Fatalf("the examples name 127.0.0.1:5055, which is taken: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer r.Close()
				go io.Copy(r, c)
				io.Copy(c, r)
			}()
		}
	}()
}
