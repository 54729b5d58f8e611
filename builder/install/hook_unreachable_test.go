package install

import (
	"bytes"
	"context"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/kmodcache/remote/remotetest"
)

// closedPort returns a loopback address nothing listens on: a port that was
// free a moment ago (listened on, then closed).
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// stampedLog is a hook's output with the time each line arrived.
type stampedLog struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines []stampedLine
}

type stampedLine struct {
	at   time.Time
	text string
}

func (l *stampedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for _, s := range strings.SplitAfter(string(p), "\n") {
		if s != "" {
			l.lines = append(l.lines, stampedLine{time.Now(), s})
		}
	}
	return len(p), nil
}

func (l *stampedLog) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.buf.String() }

// between returns how long passed from the first line containing from to
// the first later line containing to (false if either is missing).
func (l *stampedLog) between(from, to string) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := slices.IndexFunc(l.lines, func(s stampedLine) bool { return strings.Contains(s.text, from) })
	if i < 0 {
		return 0, false
	}
	j := slices.IndexFunc(l.lines[i+1:], func(s stampedLine) bool { return strings.Contains(s.text, to) })
	if j < 0 {
		return 0, false
	}
	return l.lines[i+1+j].at.Sub(l.lines[i].at), true
}

// treeFiles lists the regular files and links under dir, relative to it.
func treeFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestKernelHookUnreachableRegistry: the postinst hook of a kernel the
// cache has no driver cell for, on a root whose remote.yaml names a registry
// that cannot be reached (a closed loopback port; a port that accepts and
// never answers, on plain HTTP and on TLS). The hook succeeds within the
// configuration's timeout, warns naming the registry and what went wrong,
// says the module cache has no driver cell for the kernel, leaves the
// default entry on the older kernel with its driver and leaves nothing
// half-written; so does a refresh after it.
func TestKernelHookUnreachableRegistry(t *testing.T) {
	const older = "6.1.0-55-cloud-amd64" // hookRoot's kernel with its driver cell
	const timeout = time.Second          // the configuration's pull timeout
	// How long a pull may take past the configuration's timeout before the
	// hook is said to ignore it: well under the registry client's own
	// connect (10s) and first-byte (30s) timeouts.
	const slack = 5 * time.Second

	for _, c := range []struct {
		name, addr string
		plainHTTP  bool
		want       string // what the warning says went wrong
	}{
		{"closed port", closedPort(t), true, "connection refused"},
		{"silent port", remotetest.Silent(t), true, "deadline exceeded"},
		{"silent port TLS", remotetest.Silent(t), false, "deadline exceeded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := hookRoot(t)
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp) // where the hook copies its keys out to
			// The new kernel arrives without its cell; only the older one has it.
			if err := os.Remove(bootindex.Path(filepath.Join(root, CacheDir), testKernel)); err != nil {
				t.Fatal(err)
			}
			keys := filepath.Join(root, "etc/kpreload/keys")
			if err := os.MkdirAll(keys, 0o755); err != nil {
				t.Fatal(err)
			}
			if _, err := cellsign.Generate(filepath.Join(t.TempDir(), "builder.key"), filepath.Join(keys, "builder.pub")); err != nil {
				t.Fatal(err)
			}
			url := "oci://" + c.addr + "/cells"
			config := "remote: " + url + "\ntrust: [/etc/kpreload/keys/builder.pub]\ntimeout: " + timeout.String() + "\n"
			if c.plainHTTP {
				config += "plain_http: true\n"
			}
			if err := os.WriteFile(filepath.Join(root, RemoteFile), []byte(config), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := checkBootable(t, root, "before the hook"); got != older {
				t.Fatalf("default before the hook = %s, want %s", got, older)
			}
			esp := filepath.Join(root, ESPMount)
			entryBefore, _ := os.ReadFile(filepath.Join(esp, EntryPath(older)))
			cacheBefore := treeFiles(t, filepath.Join(root, CacheDir))

			for _, h := range []struct {
				name string
				run  func(context.Context, Options) (*Result, error)
			}{
				{"postinst", func(ctx context.Context, o Options) (*Result, error) { return KernelAdded(ctx, o, testKernel) }},
				{"refresh", Refresh},
			} {
				log := &stampedLog{}
				type outcome struct {
					res *Result
					err error
				}
				done := make(chan outcome, 1)
				start := time.Now()
				go func() {
					res, err := h.run(context.Background(), Options{Root: root, RootFS: testRootFS(), Log: log})
					done <- outcome{res, err}
				}()
				var got outcome
				select {
				case got = <-done:
				case <-time.After(2 * time.Minute):
					t.Fatalf("%s with the registry at %s unreachable still runs after 2m (a pull timeout of %s):\n%s", h.name, c.addr, timeout, log)
				}
				t.Logf("%s took %s:\n%s", h.name, time.Since(start).Round(time.Millisecond), log)
				if got.err != nil {
					t.Fatalf("%s with the registry unreachable: %v, want success (a warning)\n%s", h.name, got.err, log)
				}
				// The pull, from the line saying it starts to the warning
				// logged once it returned, is bounded by the timeout.
				pull, ok := log.between("looking for the driver cells of "+testKernel, "WARNING: registry "+url)
				if !ok {
					t.Fatalf("%s output does not say it looked in %s, then warn about it:\n%s", h.name, url, log)
				}
				if pull > timeout+slack {
					t.Errorf("%s: the pull took %s, want at most the configured %s (+%s)", h.name, pull.Round(time.Millisecond), timeout, slack)
				}
				warnings := strings.Join(got.res.Warnings, "\n")
				for _, want := range []string{"registry " + url + ": list the cells: ", c.want} {
					if !strings.Contains(log.String(), want) || !strings.Contains(warnings, want) {
						t.Errorf("%s: output %q, warnings %q: want both to say %q", h.name, log, warnings, want)
					}
				}
				if want := "the module cache has no driver cell for kernel " + testKernel; !strings.Contains(warnings, want) {
					t.Errorf("%s: warnings %q, want %q", h.name, warnings, want)
				}
				if len(got.res.Pulled) != 0 || got.res.Default != older {
					t.Errorf("%s: pulled %v, default %s; want nothing pulled and the default on %s", h.name, got.res.Pulled, got.res.Default, older)
				}
				// The default entry is the older kernel's, as it was; the
				// new kernel has its kpreload initramfs and its own entry.
				if def := checkBootable(t, root, "after "+h.name); def != older {
					t.Errorf("default after %s = %s, want %s", h.name, def, older)
				}
				if entry, _ := os.ReadFile(filepath.Join(esp, EntryPath(older))); !bytes.Equal(entry, entryBefore) {
					t.Errorf("after %s the default entry is\n%s\nwas\n%s", h.name, entry, entryBefore)
				}
				if entry, err := os.ReadFile(filepath.Join(esp, EntryPath(testKernel))); err != nil || string(entry) != LoaderEntry(testKernel, "root=UUID=x rw") {
					t.Errorf("after %s the new kernel's entry is %q (%v), want its own", h.name, entry, err)
				}
				// Nothing half-written: the cache as it was (no index, no set
				// for the new kernel), no temporary file in the root, no
				// copy of the keys left in TMPDIR.
				if got := treeFiles(t, filepath.Join(root, CacheDir)); !slices.Equal(got, cacheBefore) {
					t.Errorf("after %s the cache holds %v, was %v", h.name, got, cacheBefore)
				}
				for _, f := range treeFiles(t, root) {
					if strings.HasPrefix(filepath.Base(f), ".") {
						t.Errorf("after %s a temporary file is left in the root: %s", h.name, f)
					}
				}
				if left := treeFiles(t, tmp); len(left) > 0 {
					t.Errorf("after %s the hook left %v in TMPDIR", h.name, left)
				}
			}
		})
	}
}
