package loader

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/fsverity"
	"golang.org/x/sys/unix"
)

// fakeVerity answers FS_IOC_MEASURE_VERITY for every file with one digest
// or error, and records the files fs-verity was turned on for.
type fakeVerity struct {
	digest string
	err    error

	mu       sync.Mutex
	measured int
	enabled  []string
}

func (v *fakeVerity) MeasureVerity(fd int) (string, error) {
	v.mu.Lock()
	v.measured++
	v.mu.Unlock()
	return v.digest, v.err
}

func (v *fakeVerity) EnableVerity(fd int) error {
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return err
	}
	v.mu.Lock()
	v.enabled = append(v.enabled, p)
	v.mu.Unlock()
	return nil
}

// TestLoadVerity: the loader's choice between the kernel's fs-verity
// measure and its own SHA-256 pass. The module file on disk has one byte
// flipped against the index's sha256 where the case says so: a load that
// goes ahead with such a file proves no hashing pass ran.
func TestLoadVerity(t *testing.T) {
	const verity = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	const other = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	tests := []struct {
		name      string
		flipped   bool   // the file's bytes differ from the index's sha256
		indexed   string // the index's verity digest
		measure   *fakeVerity
		enableOpt bool
		finitErr  error

		result, reason, verified string
		enabled                  bool
		measured                 int
	}{
		{name: "verity on, digest equal: no read pass", flipped: true, indexed: verity, measure: &fakeVerity{digest: verity},
			result: "loaded", verified: "fs-verity", measured: 1},
		{name: "verity on, digest different: refused", indexed: verity, measure: &fakeVerity{digest: other},
			result: "refused", reason: "fs-verity digest mismatch: the kernel measures 222222222222, index says 111111111111", measured: 1},
		{name: "no verity on the file: hashed, then turned on", indexed: verity, measure: &fakeVerity{err: unix.ENODATA}, enableOpt: true,
			result: "loaded", verified: "sha256", enabled: true, measured: 1},
		{name: "no verity on the file, enabling not asked", indexed: verity, measure: &fakeVerity{err: unix.ENODATA},
			result: "loaded", verified: "sha256", measured: 1},
		{name: "no verity on the filesystem (the initramfs)", indexed: verity, measure: &fakeVerity{err: unix.ENOTTY}, enableOpt: true,
			result: "loaded", verified: "sha256", measured: 1},
		{name: "verity of another algorithm", indexed: verity, measure: &fakeVerity{err: fsverity.ErrOtherAlgorithm}, enableOpt: true,
			result: "loaded", verified: "sha256", measured: 1},
		{name: "plain file with a flipped byte: refused", flipped: true, indexed: verity, measure: &fakeVerity{err: unix.ENODATA}, enableOpt: true,
			result: "refused", reason: "digest mismatch: file sha256 ", measured: 1},
		{name: "index without a verity digest: hashed, never measured", flipped: true, measure: &fakeVerity{digest: verity}, enableOpt: true,
			result: "refused", reason: "digest mismatch: file sha256 "},
		{name: "hashed, the module's init failed: turned on all the same", indexed: verity, measure: &fakeVerity{err: unix.ENODATA}, enableOpt: true, finitErr: unix.ENODEV,
			result: "failed", verified: "sha256", enabled: true, measured: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			s := f.set(t, "drv", bootindex.Module{Name: "g"})
			p := filepath.Join(f.dir, "drv", "g.ko")
			s.Modules[0].SHA256, s.Modules[0].Verity = sha(t, p), tt.indexed
			if tt.flipped {
				b, _ := os.ReadFile(p)
				b[len(b)-1] ^= 1
				if err := os.WriteFile(p, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			f.kernel.finitErr["g"] = tt.finitErr
			l := f.loader()
			l.VerifyDigest, l.EnableVerity, l.Verity = true, tt.enableOpt, tt.measure
			m := one(t, load(t, l, f.index(s), "g"), "g")
			if m.Result != tt.result || !strings.Contains(m.Reason, tt.reason) {
				t.Errorf("Load(g) = %q (%q), want %q with reason containing %q", m.Result, m.Reason, tt.result, tt.reason)
			}
			if m.Verified != tt.verified && m.Result != "refused" {
				t.Errorf("Verified = %q, want %q", m.Verified, tt.verified)
			}
			if got := len(tt.measure.enabled) == 1; got != tt.enabled || m.VerityStarted != tt.enabled {
				t.Errorf("fs-verity turned on for %q (VerityStarted %v), want %v", tt.measure.enabled, m.VerityStarted, tt.enabled)
			}
			if tt.enabled && tt.measure.enabled[0] != p {
				t.Errorf("fs-verity turned on for %s, want %s", tt.measure.enabled[0], p)
			}
			if tt.measure.measured != tt.measured {
				t.Errorf("measured %d times, want %d", tt.measure.measured, tt.measured)
			}
			calls := f.kernel.callsFor("g")
			if tt.result == "refused" && len(calls) != 0 || tt.result != "refused" && len(calls) != 1 {
				t.Fatalf("kernel saw %d calls for a %s module", len(calls), tt.result)
			}
			if len(calls) == 1 && calls[0].off != 0 {
				t.Errorf("fd offset at finit_module = %d, want 0", calls[0].off)
			}
		})
	}
}

// TestLoadVerityOff: kpreload.verify=0 checks nothing, fs-verity included.
func TestLoadVerityOff(t *testing.T) {
	f := newFixture(t)
	s := f.set(t, "drv", bootindex.Module{Name: "g", SHA256: strings.Repeat("ab", 32), Verity: "sha256:" + strings.Repeat("ab", 32)})
	v := &fakeVerity{err: unix.ENODATA}
	l := f.loader()
	l.EnableVerity, l.Verity = true, v
	m := one(t, load(t, l, f.index(s), "g"), "g")
	if m.Result != "loaded" || m.Verified != "" || m.VerityStarted || v.measured != 0 {
		t.Errorf("Load(g) without verification = %q, Verified %q, VerityStarted %v, measured %d; want loaded, nothing checked", m.Result, m.Verified, m.VerityStarted, v.measured)
	}
}
