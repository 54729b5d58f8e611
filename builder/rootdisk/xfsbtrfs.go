package rootdisk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unicode"

	"github.com/kpreload/kpreload/builder/internal/runner"
)

// buildXFS writes an xfs image of sizeMB MiB at out from the stage with
// mkfs.xfs -p (a prototype file describing the tree: XFSProto), then gives
// the directories that have one their sticky bit, which prototype files
// cannot express, with xfs_db.
func buildXFS(ctx context.Context, r runner.Runner, stage, out string, sizeMB int, uuid, label string) error {
	proto, sticky, err := XFSProto(stage)
	if err != nil {
		return err
	}
	protoFile := filepath.Join(filepath.Dir(stage), filepath.Base(stage)+".proto")
	if err := os.WriteFile(protoFile, []byte(proto), 0o600); err != nil {
		return fmt.Errorf("rootdisk: write the xfs prototype file: %w", err)
	}
	defer os.Remove(protoFile)
	if err := sparseFile(out, sizeMB); err != nil {
		return err
	}
	if _, err := r.Run(ctx, runner.Cmd{Name: "mkfs.xfs", Args: MkfsXFSArgs(protoFile, out, uuid, label), Combined: true}); err != nil {
		return fmt.Errorf("rootdisk: %w", err)
	}
	if len(sticky) == 0 {
		return nil
	}
	if _, err := r.LookPath("xfs_db"); err != nil {
		return fmt.Errorf("rootdisk: xfs_db not found (install xfsprogs: scripts/deps.sh): %w", err)
	}
	dbArgs := []string{"-x"}
	for _, s := range sticky {
		dbArgs = append(dbArgs, "-c", "path "+s.path, "-c", fmt.Sprintf("write core.mode 0%o", s.mode))
	}
	dbArgs = append(dbArgs, out)
	if _, err := r.Run(ctx, runner.Cmd{Name: "xfs_db", Args: dbArgs, Combined: true}); err != nil {
		return fmt.Errorf("rootdisk: sticky bits: %w", err)
	}
	return nil
}

// MkfsXFSArgs returns the mkfs.xfs arguments that write the tree a prototype
// file describes into the image out (which must already have its size).
func MkfsXFSArgs(proto, out, uuid, label string) []string {
	args := []string{"-q", "-f", "-L", label}
	if uuid != "" {
		args = append(args, "-m", "uuid="+uuid)
	}
	return append(args, "-p", proto, out)
}

// buildBtrfs writes a btrfs image of sizeMB MiB at out from the stage with
// mkfs.btrfs --rootdir.
func buildBtrfs(ctx context.Context, r runner.Runner, stage, out string, sizeMB int, uuid, label string) error {
	if err := sparseFile(out, sizeMB); err != nil {
		return err
	}
	if _, err := r.Run(ctx, runner.Cmd{Name: "mkfs.btrfs", Args: MkfsBtrfsArgs(stage, out, uuid, label), Combined: true}); err != nil {
		return fmt.Errorf("rootdisk: %w", err)
	}
	return nil
}

// MkfsBtrfsArgs returns the mkfs.btrfs arguments that copy the stage
// directory into the image out (which must already have its size).
func MkfsBtrfsArgs(stage, out, uuid, label string) []string {
	args := []string{"-q", "-f", "-L", label}
	if uuid != "" {
		args = append(args, "-U", uuid)
	}
	return append(args, "--rootdir", stage, out)
}

// sparseFile creates path as a sparse file of sizeMB MiB.
func sparseFile(path string, sizeMB int) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("rootdisk: %w", err)
	}
	if err := f.Truncate(int64(sizeMB) << 20); err != nil {
		f.Close()
		return fmt.Errorf("rootdisk: size to %d MiB: %w", sizeMB, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("rootdisk: %w", err)
	}
	return nil
}

// stickyDir is a directory whose mode has the sticky bit, which an xfs
// prototype file cannot give it.
type stickyDir struct {
	path string // in the image, e.g. /tmp
	mode uint32 // the whole mode, type bits included (0o41777)
}

// XFSProto returns the mkfs.xfs prototype file (mkfs.xfs(8), -p) that
// describes the tree under stage: directories, regular files (their contents
// read from the stage) and symbolic links, with their permissions, setuid and
// setgid bits and owners; the root directory is owned by 0:0, as mkfs.ext4's
// root_owner=0:0 makes it. It also returns the directories with a sticky bit,
// which the format cannot express. A name the format cannot hold (one with
// white space, one starting with ':' or one that is "$"), or a file that is not
// a directory, regular file or symbolic link, is an error naming it.
func XFSProto(stage string) (string, []stickyDir, error) {
	info, err := os.Stat(stage)
	if err != nil {
		return "", nil, fmt.Errorf("rootdisk: xfs prototype: %w", err)
	}
	if !info.IsDir() {
		return "", nil, fmt.Errorf("rootdisk: xfs prototype: %s is not a directory", stage)
	}
	var b strings.Builder
	var sticky []stickyDir
	b.WriteString("/dev/null\n0 0\n")
	if info.Mode()&fs.ModeSticky != 0 {
		sticky = append(sticky, stickyDir{path: "/", mode: unixMode(info)})
	}
	fmt.Fprintf(&b, "%s 0 0\n", protoMode(info))
	if err := protoDir(&b, &sticky, stage, "/", 1); err != nil {
		return "", nil, err
	}
	b.WriteString("$\n")
	return b.String(), sticky, nil
}

// protoDir writes the entries of the host directory dir (the image's path
// rel) at the given depth, each directory's contents followed by "$".
func protoDir(b *strings.Builder, sticky *[]stickyDir, dir, rel string, depth int) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("rootdisk: xfs prototype: %w", err)
	}
	indent := strings.Repeat("  ", depth)
	for _, e := range ents {
		name := e.Name()
		p := filepath.Join(dir, name)
		img := filepath.Join(rel, name)
		if err := protoToken(name); err != nil {
			return fmt.Errorf("rootdisk: %s: an xfs prototype file cannot hold this name: %w", img, err)
		}
		info, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("rootdisk: xfs prototype: %w", err)
		}
		uid, gid := owner(info)
		head := fmt.Sprintf("%s%s %s %d %d", indent, name, protoMode(info), uid, gid)
		switch {
		case info.IsDir():
			if info.Mode()&fs.ModeSticky != 0 {
				*sticky = append(*sticky, stickyDir{path: img, mode: unixMode(info)})
			}
			fmt.Fprintf(b, "%s\n", head)
			if err := protoDir(b, sticky, p, img, depth+1); err != nil {
				return err
			}
			fmt.Fprintf(b, "%s$\n", indent)
		case info.Mode().IsRegular():
			if err := protoToken(p); err != nil {
				return fmt.Errorf("rootdisk: %s: its staged copy %s cannot be named in an xfs prototype file: %w", img, p, err)
			}
			fmt.Fprintf(b, "%s %s\n", head, p)
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("rootdisk: xfs prototype: %w", err)
			}
			if err := protoToken(target); err != nil {
				return fmt.Errorf("rootdisk: %s: an xfs prototype file cannot hold the link target %q: %w", img, target, err)
			}
			fmt.Fprintf(b, "%s %s\n", head, target)
		default:
			return fmt.Errorf("rootdisk: %s: unsupported file type %s", img, info.Mode().Type())
		}
	}
	return nil
}

// protoToken checks that s reads back from a prototype file as one token.
func protoToken(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case s == "$":
		return errors.New(`"$" ends a directory there`)
	case strings.HasPrefix(s, ":"):
		return errors.New(`a token starting with ':' is a comment there`)
	case strings.IndexFunc(s, unicode.IsSpace) >= 0:
		return errors.New("white space separates tokens there")
	}
	return nil
}

// protoMode renders a file's type and mode as a prototype file's six
// characters: type (- d l), u for setuid, g for setgid, three octal digits.
func protoMode(info fs.FileInfo) string {
	m := info.Mode()
	t := byte('-')
	switch {
	case m.IsDir():
		t = 'd'
	case m&fs.ModeSymlink != 0:
		t = 'l'
	}
	u, g := byte('-'), byte('-')
	if m&fs.ModeSetuid != 0 {
		u = 'u'
	}
	if m&fs.ModeSetgid != 0 {
		g = 'g'
	}
	return fmt.Sprintf("%c%c%c%03o", t, u, g, m.Perm())
}

// unixMode returns a directory's mode as the kernel stores it (S_IFDIR, the
// set-id and sticky bits and the permissions).
func unixMode(info fs.FileInfo) uint32 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Mode
	}
	return 0
}

// owner returns a file's uid and gid (0, 0 when the platform does not say).
func owner(info fs.FileInfo) (uint32, uint32) {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Uid, st.Gid
	}
	return 0, 0
}
