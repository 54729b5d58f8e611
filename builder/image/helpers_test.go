package image

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// testKernel is the kernel the image tests install and boot (scripts/lib.sh's first).
const testKernel = "6.1.0-56-cloud-amd64"

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveStaticBinaries()
	for _, d := range []string{bothDir, ciDir} {
		if d != "" {
			os.RemoveAll(d)
		}
	}
	os.Exit(code)
}

// binaries builds, once per test process, the static kpreload CLI (CGO_ENABLED=0, as
// an image needs it) and the static /init, side by side.
func binaries(t testing.TB) (kpreload, initBin string) {
	t.Helper()
	return testenv.StaticBinary(t, "kpreload", "./cmd/kpreload"), testenv.StaticBinary(t, "kpreload-init", "./cmd/kpreload-init")
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
