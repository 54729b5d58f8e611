// Package rootdisk builds the root disk image kpreload boots in QEMU tests, without
// mounting anything: it stages a directory tree (the test /sbin/init, the usual empty
// mount points, extra trees such as a module cache) and hands it to the filesystem's
// own mkfs: mkfs.ext4 -d, mkfs.xfs -p with a prototype file written from the tree, or
// mkfs.btrfs --rootdir.
package rootdisk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/internal/fileutil"
)

// DefaultLabel is the filesystem label used when Options.Label is empty.
const DefaultLabel = "kpreload-root"

// fixedTime is the timestamp (2020-01-01T00:00:00Z, in ns since the epoch) of every
// file in an image.
const fixedTime = 1577836800 * 1e9

// Options describes one root disk image.
type Options struct {
	// Out is the image file to write (overwritten).
	Out string
	// FSType is the filesystem: "ext4" (the default when empty), "xfs" or "btrfs"
	// (FSTypes). Only ext4 images are byte-for-byte reproducible: mkfs.xfs and
	// mkfs.btrfs stamp their own creation times and internal UUIDs.
	FSType string
	// SizeMB is the image size in MiB; 0 picks one that fits the staged tree (at least
	// the filesystem's minimum: 64 for ext4, 128 for btrfs, 300 for xfs).
	SizeMB int
	// UUID is the filesystem UUID, for reproducible images and root=UUID=...; empty lets
	// mkfs pick a random one.
	UUID string
	// Label is the filesystem label (root=LABEL=...); empty means DefaultLabel (on
	// xfs, whose labels hold 12 characters, DefaultLabelXFS).
	Label string
	// Init is the path of the program installed as /sbin/init (see BuildRootInit).
	Init string
	// NoInit builds a root without /sbin/init (Init must be empty): a fault
	// the boot tests inject.
	NoInit bool
	// Extra maps a destination directory inside the image to a host directory whose
	// contents are copied there, e.g. "/var/lib/kpreload/cache" -> a module cache.
	Extra map[string]string
	// Verity gives an ext4 filesystem the verity feature (mkfs.ext4 -O
	// verity), so the booted kernel can turn fs-verity on for its files;
	// ext4 only.
	Verity bool
	// Runner runs mkfs, debugfs and xfs_db; nil means runner.Default.
	Runner runner.Runner
}

// skeleton lists the directories every image has (mount points and the like).
var skeleton = []string{"/sbin", "/etc", "/run", "/proc", "/sys", "/dev", "/tmp", "/var/lib/kpreload"}

// Build stages the tree and writes the image with the filesystem's mkfs.
func Build(ctx context.Context, o Options) error {
	if o.Out == "" {
		return errors.New("rootdisk: no output image given")
	}
	if o.Init == "" && !o.NoInit {
		return errors.New("rootdisk: no init program given")
	}
	if o.Init != "" && o.NoInit {
		return errors.New("rootdisk: an init program and NoInit given")
	}
	if o.Verity && o.FSType != "" && o.FSType != FSExt4 {
		return fmt.Errorf("rootdisk: the verity feature is ext4's; %s has none here", o.FSType)
	}
	if o.SizeMB < 0 {
		return fmt.Errorf("rootdisk: size %d MiB is negative", o.SizeMB)
	}
	fsys, err := lookupFS(o.FSType)
	if err != nil {
		return err
	}
	if o.SizeMB != 0 && o.SizeMB < fsys.minExplicitMB {
		return fmt.Errorf("rootdisk: size %d MiB is too small for %s: %s needs at least %d MiB", o.SizeMB, fsys.name, fsys.mkfs, fsys.minExplicitMB)
	}
	label := o.Label
	if label == "" {
		label = fsys.defaultLabel
	}
	if len(label) > fsys.maxLabel {
		return fmt.Errorf("rootdisk: label %q has %d characters; %s labels hold at most %d", label, len(label), fsys.name, fsys.maxLabel)
	}
	r := runner.Or(o.Runner)
	if _, err := r.LookPath(fsys.mkfs); err != nil {
		return fmt.Errorf("rootdisk: %s not found (install %s: scripts/deps.sh): %w", fsys.mkfs, fsys.pkg, err)
	}
	stage, err := os.MkdirTemp("", "kpreload-rootdisk-")
	if err != nil {
		return fmt.Errorf("rootdisk: staging directory: %w", err)
	}
	defer os.RemoveAll(stage)
	if err := Stage(stage, o); err != nil {
		return err
	}
	if err := pinTimes(stage); err != nil {
		return fmt.Errorf("rootdisk: set staged file times: %w", err)
	}
	size := o.SizeMB
	if size == 0 {
		used, err := treeSize(stage)
		if err != nil {
			return fmt.Errorf("rootdisk: measure staged tree: %w", err)
		}
		size = max(fsys.minMB, int(used*3/2>>20)+16)
	}
	if err := os.Remove(o.Out); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("rootdisk: remove old image: %w", err)
	}
	switch fsys.name {
	case FSXFS:
		return buildXFS(ctx, r, stage, o.Out, size, o.UUID, label)
	case FSBtrfs:
		return buildBtrfs(ctx, r, stage, o.Out, size, o.UUID, label)
	}
	// Fixed timestamps and hash seed make the image depend only on its inputs.
	args := MkfsArgs(stage, o.Out, size, o.UUID, label)
	if o.Verity {
		// Kernels before 6.3 turn fs-verity on only where the block size
		// is the page size; mkfs picks 1024 for a small filesystem.
		args = append([]string{"-O", "verity", "-b", "4096"}, args...)
	}
	c := runner.Cmd{Name: fsys.mkfs, Args: args, Env: []string{fakeTimeEnv}, Combined: true}
	if _, err := r.Run(ctx, c); err != nil {
		return fmt.Errorf("rootdisk: %w", err)
	}
	return pinInodeTimes(ctx, r, stage, o.Out)
}

// fakeTimeEnv makes e2fsprogs stamp fixedTime wherever it would stamp the time.
var fakeTimeEnv = fmt.Sprintf("E2FSPROGS_FAKE_TIME=%d", int64(fixedTime/1e9))

// pinInodeTimes sets the ctime and atime of every inode mkfs.ext4 copied from the stage
// to fixedTime with debugfs: mkfs copies them from the stage, where ctime cannot be set
// and reading the files moves atime. Names debugfs cannot quote are left alone.
func pinInodeTimes(ctx context.Context, r runner.Runner, stage, img string) error {
	if _, err := r.LookPath("debugfs"); err != nil {
		return fmt.Errorf("rootdisk: debugfs not found (install e2fsprogs: scripts/deps.sh): %w", err)
	}
	var script strings.Builder
	at := fmt.Sprintf("@%d", int64(fixedTime/1e9))
	pin := func(name string) {
		fmt.Fprintf(&script, "sif \"%s\" ctime %s\nsif \"%s\" atime %s\n", name, at, name, at)
	}
	pin("/lost+found")
	err := filepath.WalkDir(stage, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(stage, p)
		if err != nil {
			return err
		}
		name := filepath.Clean("/" + rel)
		if strings.ContainsAny(name, "\"\\\n") {
			return nil
		}
		pin(name)
		return nil
	})
	if err != nil {
		return fmt.Errorf("rootdisk: list staged files: %w", err)
	}
	c := runner.Cmd{Name: "debugfs", Args: []string{"-w", "-f", "-", img}, Stdin: strings.NewReader(script.String()), Env: []string{fakeTimeEnv}, Combined: true}
	if _, err := r.Run(ctx, c); err != nil {
		return fmt.Errorf("rootdisk: pin inode times: %w", err)
	}
	return nil
}

// MkfsArgs returns the mkfs.ext4 arguments that turn the stage directory into an image.
func MkfsArgs(stage, out string, sizeMB int, uuid, label string) []string {
	args := []string{"-q", "-F", "-L", label}
	ext := "root_owner=0:0"
	if uuid != "" {
		args = append(args, "-U", uuid)
		ext += ",hash_seed=" + uuid
	}
	return append(args, "-d", stage, "-E", ext, out, fmt.Sprintf("%dM", sizeMB))
}

// Stage lays out the image's tree in dir: the skeleton directories, the init program
// at /sbin/init (mode 0755) and the Extra trees.
func Stage(dir string, o Options) error {
	for _, d := range skeleton {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("rootdisk: stage %s: %w", d, err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), os.ModeSticky|0o777); err != nil {
		return fmt.Errorf("rootdisk: stage /tmp: %w", err)
	}
	if !o.NoInit {
		initPath := filepath.Join(dir, "sbin/init")
		if err := fileutil.CopyFile(o.Init, initPath, 0o755); err != nil {
			return fmt.Errorf("rootdisk: install init: %w", err)
		}
		if err := os.Chmod(initPath, 0o755); err != nil {
			return fmt.Errorf("rootdisk: install init: %w", err)
		}
	}
	for dest, src := range o.Extra {
		clean := filepath.Clean("/" + dest)
		if clean == "/" {
			return fmt.Errorf("rootdisk: extra tree %s: destination must not be the image root", src)
		}
		if err := copyTree(src, filepath.Join(dir, clean)); err != nil {
			return fmt.Errorf("rootdisk: copy %s to %s: %w", src, clean, err)
		}
	}
	return nil
}

// copyTree copies src (a directory, or a single file) to dst, keeping modes and symlinks.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			return os.Symlink(link, target)
		case info.Mode().IsRegular():
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			if err := fileutil.CopyFile(p, target, info.Mode().Perm()); err != nil {
				return err
			}
			// The exact mode, whatever the umask.
			return os.Chmod(target, info.Mode().Perm())
		default:
			return fmt.Errorf("%s: unsupported file type %s", p, info.Mode().Type())
		}
	})
}

// pinTimes sets every staged entry's access and modification times to fixedTime, so
// the image does not depend on when it was built.
func pinTimes(dir string) error {
	ts := []unix.Timespec{unix.NsecToTimespec(fixedTime), unix.NsecToTimespec(fixedTime)}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
	})
}

// treeSize sums the sizes of the regular files under dir plus a block per entry.
func treeSize(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		total += 4096
		if info.Mode().IsRegular() {
			total += info.Size()
		}
		return nil
	})
	return total, err
}
