package install

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestRefreshPullsLateCells: a kernel that arrives before its cell (the
// registry holds only 6.1's) gets its entry, and the default stays on 6.1;
// a refresh before the cell exists changes nothing; once the cell is pushed,
// a refresh pulls it, verified, builds the kernel's kpreload initramfs and
// makes it the default; the refresh after that has nothing to do.
func TestRefreshPullsLateCells(t *testing.T) {
	testenv.SkipShort(t, "real dkms builds and a registry")
	const newer = "6.12.117+deb12-cloud-amd64"
	ctx := context.Background()
	h := newCellHook(t, newer)
	push := func(kernel string) string {
		t.Helper()
		res, err := matrix.Run(ctx, matrix.Options{Recipes: []*recipe.Recipe{h.r}, Kernels: []string{kernel}, CacheDir: h.built, Remote: h.rm})
		if err != nil || len(res) != 1 || res[0].Remote != "pushed" {
			t.Fatalf("build and push %s: %+v, %v", kernel, res, err)
		}
		return res[0].SetID
	}
	root := h.root(t, push(testKernel), map[string]string{
		RemoteFile: "remote: " + h.url + "\nplain_http: true\ntrust: [/etc/kpreload/keys/builder.pub]\n",
	})

	for _, c := range []struct {
		name        string
		run         func(*bytes.Buffer) (*Result, error)
		before      func()
		wantDefault string
		wantPulled  int
		wantLog     string
	}{
		{"postinst before the cell", func(log *bytes.Buffer) (*Result, error) {
			return KernelAdded(ctx, Options{Root: root, RootFS: testRootFS(), Log: log}, newer)
		}, nil, testKernel, 0, "no usable cell for " + newer},
		{"refresh before the cell", func(log *bytes.Buffer) (*Result, error) {
			return Refresh(ctx, Options{Root: root, RootFS: testRootFS(), Log: log})
		}, nil, testKernel, 0, "no usable cell for " + newer},
		{"refresh after the cell", func(log *bytes.Buffer) (*Result, error) {
			return Refresh(ctx, Options{Root: root, RootFS: testRootFS(), Log: log})
		}, func() { push(newer) }, newer, 1, "pulled kpreload-edu 1.0.0 open (set "},
		{"refresh again", func(log *bytes.Buffer) (*Result, error) {
			return Refresh(ctx, Options{Root: root, RootFS: testRootFS(), Log: log})
		}, nil, newer, 0, "every kernel has its driver cells"},
	} {
		if c.before != nil {
			c.before()
		}
		var log bytes.Buffer
		got, err := c.run(&log)
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, log.String())
		}
		t.Logf("%s:\n%s", c.name, log.String())
		if got.Default != c.wantDefault || len(got.Pulled) != c.wantPulled || !strings.Contains(log.String(), c.wantLog) {
			t.Errorf("%s: default %s, pulled %q, output %q; want default %s, %d pulled, output saying %q", c.name, got.Default, got.Pulled, log.String(), c.wantDefault, c.wantPulled, c.wantLog)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, InitramfsPath(newer))); err != nil || fi.Size() < 1<<20 {
		t.Errorf("the kpreload initramfs of %s after the refresh: %v", newer, err)
	}
}
