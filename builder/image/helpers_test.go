package image

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// testKernel is the kernel the image tests install and boot (scripts/lib.sh's first).
const testKernel = "6.1.0-56-cloud-amd64"

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range []string{binDir, bothDir, ciDir} {
		if d != "" {
			os.RemoveAll(d)
		}
	}
	os.Exit(code)
}

// binaries builds, once per test run, the static kpreload CLI (CGO_ENABLED=0, as
// an image needs it) and the static /init.
func binaries(t testing.TB) (kpreload, initBin string) {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "kpreload-image-bin-"); binErr != nil {
			return
		}
		for out, pkg := range map[string]string{"kpreload": "./cmd/kpreload", "kpreload-init": "./cmd/kpreload-init"} {
			cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(binDir, out), pkg)
			cmd.Dir = testenv.RepoRoot(t)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if b, err := cmd.CombinedOutput(); err != nil {
				binErr = fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
				return
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return filepath.Join(binDir, "kpreload"), filepath.Join(binDir, "kpreload-init")
}

// e2eStart begins an end-to-end test: skipped under -short (saying why), the
// test kernel's tree present, the static binaries built; it returns a context
// bounded by limit on the reference host, stretched by the host's measured
// slowdown (testenv.Deadline), and a progress logger timed from now.
func e2eStart(t *testing.T, why string, limit time.Duration) (ctx context.Context, kpreload, initBin string, progress Progress) {
	t.Helper()
	if testing.Short() {
		t.Skip(why + "; -short")
	}
	testenv.KernelTree(t, testKernel)
	kpreload, initBin = binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, limit))
	t.Cleanup(cancel)
	start := time.Now()
	return ctx, kpreload, initBin, func(msg string) { t.Logf("[%6.1fs] %s", time.Since(start).Seconds(), msg) }
}
