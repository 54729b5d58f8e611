package install

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/kpreload/kpreload/internal/inroot/inroottest"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
	"github.com/kpreload/kpreload/testsupport/treetest"
)

// hostSecret is a host file's content that nothing kpreload prints may
// echo, however little of it: its first byte is one no message of the
// hooks quotes ('Q').
const hostSecret = "QSECRET host file, never to be shown\n"

// echoesSecret reports whether out shows any of hostSecret: the file, or
// its first byte as a JSON decoder quotes it.
func echoesSecret(out string) bool {
	return strings.Contains(out, "QSECRET") || strings.Contains(out, "'Q'")
}

// cacheCell is a registry holding one signed cell of the driver linkRoot's
// index names (kpreload-edu 1.0, a synthetic module) for kernel, and the
// builder's public key.
type cacheCell struct {
	url, pub, setID, keyID, objectSHA string
}

func newCacheCell(t *testing.T, kernel string) *cacheCell {
	t.Helper()
	ctx := context.Background()
	keys, _, reg, rm := signedRegistry(t, "builder")
	built, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	key := map[string]string{"schema": "test", "kernel": kernel}
	m, id, err := built.AddFiles(ctx, store.AddRequest{Driver: "kpreload-edu", Version: "1.0", Files: []string{testenv.SyntheticModule(t, "kpreload_edu", kernel)}, CacheKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rm.PushSet(ctx, built, id, "testdriver"); err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(filepath.Join(keys, "builder.pub"))
	if err != nil {
		t.Fatal(err)
	}
	return &cacheCell{url: reg.URL(), pub: string(pub), setID: id, keyID: manifest.KeyID(key), objectSHA: m.Modules[0].SHA256}
}

// cacheLinkRoot is linkRoot with a newer kernel (its image and an empty
// module tree) whose cell the root's registry holds, the registry's
// configuration and key, and the module cache's directories.
func (c *cacheCell) root(t *testing.T, newer string) (root, victim string) {
	t.Helper()
	root, victim = linkRoot(t)
	treetest.Write(t, root, map[string]string{
		"boot/vmlinuz-" + newer:                             "newer kernel",
		"lib/modules/" + newer + "/modules.dep":             "",
		"lib/modules/" + newer + "/modules.builtin.modinfo": "ext4.alias=fs-ext4\x00xfs.alias=fs-xfs\x00btrfs.alias=fs-btrfs\x00crc32c_generic.alias=crypto-crc32c\x00",
		"etc/kpreload/keys/builder.pub":                     c.pub,
		RemoteFile:                                          "remote: " + c.url + "\nplain_http: true\ntrust: [/etc/kpreload/keys/builder.pub]\n",
	})
	if _, err := store.Open(filepath.Join(root, CacheDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "secret"), []byte(hostSecret), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, victim
}

// TestCacheLinksOut runs install, the kernel hooks that pull cells
// (postinst, refresh), postrm and status on roots where one path of the
// module cache (each directory, lock, record and file a pull writes or
// reads, the cache itself, /var/lib/kpreload and the hooks' lock) is a link to a directory beside the root, to a file there or to
// a file there that does not exist. Nothing beside the root is created,
// changed or removed, and nothing any step prints, warns or fails with
// shows the file's content. Without a link, postinst and refresh each
// pull the cell (the check that the steps reach the cache at all).
func TestCacheLinksOut(t *testing.T) {
	const newer = "6.12.117+deb12-cloud-amd64"
	cell := newCacheCell(t, newer)
	obj := path.Join("objects/sha256", cell.objectSHA[:2])
	links := []string{
		"objects", "objects/sha256", obj, path.Join(obj, cell.objectSHA),
		"sets", path.Join("sets", cell.setID+".json"),
		"keys", path.Join("keys", cell.keyID),
		bootindex.IndexDir, path.Join(bootindex.IndexDir, newer+".json"),
		".lock", remote.SeenFile, "remote-generations.lock",
		// The cache itself, the directory above it and the hooks' lock there.
		".", "..", path.Join("..", path.Base(HookLock)),
	}
	type step struct {
		name string
		run  func(ctx context.Context, o Options) (*Result, []string, error)
	}
	hook := func(f func(ctx context.Context, o Options) (*Result, error)) func(ctx context.Context, o Options) (*Result, []string, error) {
		return func(ctx context.Context, o Options) (*Result, []string, error) {
			res, err := f(ctx, o)
			var w []string
			if res != nil {
				w = res.Warnings
			}
			return res, w, err
		}
	}
	status := step{"status", func(ctx context.Context, o Options) (*Result, []string, error) {
		ks, err := Kernels(o.Root)
		var out []string
		for _, k := range ks {
			out = append(out, fmt.Sprintf("%+v", k))
		}
		_, w := ReadSettingsOrDefaults(o.Root)
		return nil, append(out, w...), err
	}}
	// Two runs on two roots, so that both hooks that pull find the cell
	// missing.
	runs := [][]step{
		{
			{"install", hook(func(ctx context.Context, o Options) (*Result, error) { return Install(ctx, o) })},
			{"postinst", hook(func(ctx context.Context, o Options) (*Result, error) { return KernelAdded(ctx, o, newer) })},
			{"postrm", hook(func(ctx context.Context, o Options) (*Result, error) { return KernelRemoved(ctx, o, newer) })},
			status,
		},
		{
			{"refresh", hook(Refresh)},
			status,
		},
	}
	for _, link := range append([]string{""}, links...) {
		for _, form := range []string{"dir", "file", "dangling"} {
			if link == "" && form != "dir" {
				continue
			}
			name := fmt.Sprintf("%s/%s", link, form)
			if link == "" {
				name = "no link"
			}
			t.Run(name, func(t *testing.T) {
				for _, steps := range runs {
					root, victim := cell.root(t, newer)
					if link != "" {
						target := map[string]string{"dir": victim, "file": filepath.Join(victim, "secret"), "dangling": filepath.Join(victim, "dangling")}[form]
						full := filepath.Join(root, CacheDir, link)
						if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
							t.Fatal(err)
						}
						if err := os.RemoveAll(full); err != nil {
							t.Fatal(err)
						}
						if err := os.Symlink(target, full); err != nil {
							t.Fatal(err)
						}
					}
					before := inroottest.Snapshot(t, victim)
					for _, s := range steps {
						var log bytes.Buffer
						res, out, err := s.run(context.Background(), Options{Root: root, RootFS: testRootFS(), Bootloader: SystemdBoot, Log: &log})
						said := log.String() + strings.Join(out, "\n")
						if err != nil {
							said += "\n" + err.Error()
						}
						if got := inroottest.Snapshot(t, victim); got != before {
							t.Fatalf("%s (err %v) changed the tree beside the root:\nbefore\n%s\nafter\n%s\nsaid:\n%s", s.name, err, before, got, said)
						}
						if echoesSecret(said) {
							t.Errorf("%s shows the content of a file beside the root:\n%s", s.name, said)
						}
						if link == "" {
							if err != nil {
								t.Fatalf("%s: %v\n%s", s.name, err, said)
							}
							if (s.name == "postinst" || s.name == "refresh") && (res == nil || len(res.Pulled) != 1) {
								t.Errorf("%s without a link pulled %v, want the cell of %s\n%s", s.name, res.Pulled, newer, said)
							}
						}
					}
				}
			})
		}
	}
}

// TestEarlyDriversCacheLinksOut: a root that asks for the early decision
// (its initramfs carries the driver sets of the root's cache) whose boot
// index names a module file that is a link to a file beside the root, or
// whose object directory is a link to a directory beside it holding a file
// of that name. install and postinst either fail or build initramfs images
// that do not carry that file: every file of the cache is read inside the
// root.
func TestEarlyDriversCacheLinksOut(t *testing.T) {
	const sha = "ab00000000000000000000000000000000000000000000000000000000000001"
	for _, link := range []string{"objects/sha256/ab/" + sha, "objects/sha256/ab", "objects/sha256", "objects"} {
		t.Run(link, func(t *testing.T) {
			root, victim := linkRoot(t)
			// The file beside the root, where each link leads.
			leads := filepath.Join(victim, "secret")
			if rest := strings.TrimPrefix("objects/sha256/ab/"+sha, link); rest != "" {
				leads = filepath.Join(victim, rest)
			}
			treetest.Write(t, victim, map[string]string{strings.TrimPrefix(leads, victim+"/"): hostSecret})
			cache := filepath.Join(root, CacheDir)
			ix := &bootindex.Index{Format: bootindex.FormatVersion, Kernel: testKernel, Sets: []bootindex.Set{{
				ID: strings.Repeat("c", 64), Driver: "kpreload-edu", Version: "1.0", Dir: store.IndexSetDir,
				Modules: []bootindex.Module{{Name: "kpreload_edu", Path: "ab/" + sha, SHA256: sha, Size: int64(len(hostSecret)), Vermagic: testKernel + " SMP preempt mod_unload modversions "}},
			}}}
			if err := bootindex.Write(bootindex.Path(cache, testKernel), ix); err != nil {
				t.Fatal(err)
			}
			treetest.Write(t, root, map[string]string{EarlyDrivers: ""})
			full := filepath.Join(cache, link)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(full); err != nil {
				t.Fatal(err)
			}
			target := victim // a directory beside the root
			if link == "objects/sha256/ab/"+sha {
				target = leads // the file itself
			}
			if err := os.Symlink(target, full); err != nil {
				t.Fatal(err)
			}
			before := inroottest.Snapshot(t, victim)
			ctx := context.Background()
			for _, s := range []struct {
				name string
				run  func(o Options) error
			}{
				{"install", func(o Options) error { _, err := Install(ctx, o); return err }},
				{"postinst", func(o Options) error { _, err := KernelAdded(ctx, o, testKernel); return err }},
			} {
				var log bytes.Buffer
				err := s.run(Options{Root: root, RootFS: testRootFS(), Bootloader: SystemdBoot, Log: &log})
				said := log.String()
				if err != nil {
					said += "\n" + err.Error()
				}
				if got := inroottest.Snapshot(t, victim); got != before {
					t.Fatalf("%s changed the tree beside the root:\nbefore\n%s\nafter\n%s\n%s", s.name, before, got, said)
				}
				if echoesSecret(said) {
					t.Errorf("%s shows the content of a file beside the root:\n%s", s.name, said)
				}
				if img, err := os.ReadFile(filepath.Join(root, InitramfsPath(testKernel))); err == nil {
					if bytes.Contains(unzstd(t, img), []byte("QSECRET")) {
						t.Errorf("%s put a file from beside the root into the initramfs:\n%s", s.name, said)
					}
				}
			}
		})
	}
}

// unzstd decompresses a zstd initramfs (a stand-in that is not zstd is
// returned as it is).
func unzstd(t *testing.T, b []byte) []byte {
	t.Helper()
	d, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	out, err := d.DecodeAll(b, nil)
	if err != nil {
		return b
	}
	return out
}
