package adopt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/internal/inroot"
)

// Partition is one partition of a disk image, as sfdisk --json reads it.
type Partition struct {
	// Number is the partition's number (1-based, as in /dev/sda1).
	Number int
	// Offset and Size are in bytes.
	Offset, Size int64
	// Type is the partition type: an MBR type in hex ("83") or a GPT type GUID.
	Type string
}

// linuxTypes are the partition types a Linux root filesystem has: MBR
// Linux, GPT Linux filesystem data and the GPT root partition of x86-64.
var linuxTypes = []string{"83", "0FC63DAF-8483-4772-8E79-3D69D8477DE4", "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"}

// sfdiskTable is what sfdisk --json prints.
type sfdiskTable struct {
	PartitionTable struct {
		SectorSize int64 `json:"sectorsize"`
		Partitions []struct {
			Node  string `json:"node"`
			Start int64  `json:"start"`
			Size  int64  `json:"size"`
			Type  string `json:"type"`
		} `json:"partitions"`
	} `json:"partitiontable"`
}

// ParsePartitions reads sfdisk --json output.
func ParsePartitions(out []byte) ([]Partition, error) {
	var t sfdiskTable
	if err := json.Unmarshal(out, &t); err != nil {
		return nil, fmt.Errorf("sfdisk --json: %w", err)
	}
	ss := t.PartitionTable.SectorSize
	if ss == 0 {
		ss = 512
	}
	var parts []Partition
	for _, p := range t.PartitionTable.Partitions {
		// The node is IMAGE<N> (or IMAGEp<N>): the number is its tail.
		i := strings.LastIndexFunc(p.Node, func(r rune) bool { return r < '0' || r > '9' })
		n, err := strconv.Atoi(p.Node[i+1:])
		if err != nil {
			return nil, fmt.Errorf("sfdisk --json: partition %q has no number", p.Node)
		}
		parts = append(parts, Partition{Number: n, Offset: p.Start * ss, Size: p.Size * ss, Type: strings.ToUpper(p.Type)})
	}
	return parts, nil
}

// RootPartition picks the partition holding the root: number when it is not
// 0, else the one partition of a Linux type. No partitions at all (a
// filesystem image) is the whole file, returned as Number 0.
func RootPartition(parts []Partition, number int, size int64) (Partition, error) {
	if len(parts) == 0 {
		if number != 0 {
			return Partition{}, fmt.Errorf("partition %d: the image has no partition table", number)
		}
		return Partition{Number: 0, Offset: 0, Size: size}, nil
	}
	var linux []Partition
	var all []string
	for _, p := range parts {
		if number != 0 && p.Number == number {
			return p, nil
		}
		all = append(all, fmt.Sprintf("%d (type %s, %d MiB)", p.Number, p.Type, p.Size>>20))
		if slices.Contains(linuxTypes, p.Type) {
			linux = append(linux, p)
		}
	}
	switch {
	case number != 0:
		return Partition{}, fmt.Errorf("the image has no partition %d: it has %s", number, strings.Join(all, ", "))
	case len(linux) == 1:
		return linux[0], nil
	case len(linux) == 0:
		return Partition{}, fmt.Errorf("no Linux partition in the image (it has %s): name the root's with --partition N", strings.Join(all, ", "))
	}
	return Partition{}, fmt.Errorf("several Linux partitions in the image (%s): name the root's with --partition N", strings.Join(all, ", "))
}

// ImageOptions says which disk image to put kpreload into.
type ImageOptions struct {
	// Partition is the root's partition number (0: the one Linux partition,
	// or the whole file when it has no partition table).
	Partition int
	// Runner runs sfdisk and mount (nil: runner.Default).
	Runner runner.Runner
}

// Image puts kpreload into the disk image file (raw) as Root does for a
// directory, on the image's root mounted by Mount, unmounted afterwards.
func Image(ctx context.Context, file string, img ImageOptions, o Options) (*Result, error) {
	root, unmount, err := Mount(ctx, file, img, o.Log)
	if err != nil {
		return nil, err
	}
	res, err := Root(ctx, root, o)
	if uerr := unmount(); err == nil && uerr != nil {
		return nil, uerr
	}
	return res, err
}

// Mount mounts the root partition (RootPartition) of the raw disk image
// file on a new directory through a loop device at its offset (no partition
// scanning is needed), with /dev, /proc and /sys bound into it for tools a
// caller runs in a chroot of it (update-initramfs); the root's programs
// kpreload runs get their own in the root's sandbox. unmount undoes it all
// and removes the directory.
func Mount(ctx context.Context, file string, img ImageOptions, log io.Writer) (root string, unmount func() error, err error) {
	fi, err := os.Stat(file)
	if err != nil {
		return "", nil, err
	}
	if !fi.Mode().IsRegular() {
		return "", nil, fmt.Errorf("%s is not a disk image file", file)
	}
	if err := checkRaw(file); err != nil {
		return "", nil, err
	}
	r := runner.Or(img.Runner)
	p, err := findRoot(ctx, file, fi.Size(), img.Partition, r)
	if err != nil {
		return "", nil, err
	}
	mnt, err := os.MkdirTemp("", "kpreload-adopt-root-")
	if err != nil {
		return "", nil, err
	}
	logf(log, "mounting partition %d of %s (offset %d) on %s", p.Number, file, p.Offset, mnt)
	if _, err := r.Run(ctx, runner.Cmd{Name: "mount", Args: []string{"-o", fmt.Sprintf("loop,offset=%d,sizelimit=%d", p.Offset, p.Size), file, mnt}}); err != nil {
		os.Remove(mnt)
		return "", nil, fmt.Errorf("mount the root of %s: %w", file, err)
	}
	mounts := []string{mnt}
	unmount = func() error {
		var errs []error
		for i := len(mounts) - 1; i >= 0; i-- {
			if err := unix.Unmount(mounts[i], 0); err != nil {
				errs = append(errs, fmt.Errorf("unmount %s: %w", mounts[i], err))
			}
		}
		if len(errs) == 0 {
			os.Remove(mnt)
		}
		mounts = nil
		return errors.Join(errs...)
	}
	for _, d := range []string{"dev", "proc", "sys"} {
		// Bound where the root's own path leads, inside the root.
		err := inroot.MkdirAll(mnt, d, 0o755)
		target := ""
		if err == nil {
			target, err = inroot.Resolve(mnt, d)
		}
		if err == nil {
			if err = unix.Mount("/"+d, target, "", unix.MS_BIND, ""); err != nil {
				err = fmt.Errorf("bind /%s into the root of %s: %w", d, file, err)
			}
		}
		if err != nil {
			unmount()
			return "", nil, err
		}
		mounts = append(mounts, target)
	}
	return mnt, unmount, nil
}

// findRoot reads the partition table of the raw disk image file (size
// bytes) with sfdisk and picks the root's partition (RootPartition); a file
// without a partition table is the filesystem itself.
func findRoot(ctx context.Context, file string, size int64, number int, r runner.Runner) (Partition, error) {
	var parts []Partition
	out, err := r.Run(ctx, runner.Cmd{Name: "sfdisk", Args: []string{"--json", file}})
	var re *runner.Error
	switch {
	case errors.As(err, &re) && strings.Contains(strings.Join(re.Tail, "\n"), "does not contain a recognized partition table"):
		// A filesystem image: the whole file.
	case err != nil:
		return Partition{}, fmt.Errorf("read the partition table of %s: %w", file, err)
	default:
		if parts, err = ParsePartitions(out); err != nil {
			return Partition{}, err
		}
	}
	p, err := RootPartition(parts, number, size)
	if err != nil {
		return Partition{}, fmt.Errorf("%s: %w", file, err)
	}
	return p, nil
}

// checkRaw refuses a disk image in a format that is not raw (qcow2, VMDK,
// VHDX), naming the conversion: only a raw disk can be loop-mounted.
func checkRaw(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	head := make([]byte, 8)
	if _, err := io.ReadFull(f, head); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	for _, m := range []struct{ magic, format string }{{"QFI\xfb", "qcow2"}, {"KDMV", "vmdk"}, {"vhdxfile", "vhdx"}} {
		if strings.HasPrefix(string(head), m.magic) {
			return fmt.Errorf("%s is a %s image, not a raw disk: convert it first (qemu-img convert -O raw %s disk.raw), then convert back after", file, m.format, file)
		}
	}
	return nil
}

func logf(w io.Writer, format string, a ...any) {
	if w != nil {
		fmt.Fprintf(w, "kpreload: "+format+"\n", a...)
	}
}
