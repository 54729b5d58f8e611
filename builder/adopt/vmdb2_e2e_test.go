package adopt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/testsupport/dibtest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// vmdb2Spec is the vmdb2 specification of the image TestVmdb2 adopts, and
// vmdb2Path the directory put first on PATH for vmdb2's run: it holds only
// the stand-in for kpartx (see the script) that a kernel without
// device-mapper needs.
const (
	vmdb2Spec = "testdata/vmdb2.vmdb"
	vmdb2Path = "testdata/vmdb2-path"
)

// vmdb2Image returns a raw disk image made by vmdb2 from testdata/vmdb2.vmdb
// (an MBR disk with one ext4 partition, Debian 12 by debootstrap, Debian's
// generic kernel, GRUB for BIOS installed by vmdb2's grub step), built once
// per machine and kept under $KPRELOAD_CACHE/vmdb2/<key>/, where key is the
// SHA-256 of vmdb2's version, the specification and the kpartx stand-in.
func vmdb2Image(ctx context.Context, t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("vmdb2")
	if err != nil {
		t.Fatalf("no vmdb2 (scripts/deps.sh installs it): %v", err)
	}
	spec, err := filepath.Abs(vmdb2Spec)
	if err != nil {
		t.Fatal(err)
	}
	path, err := filepath.Abs(vmdb2Path)
	if err != nil {
		t.Fatal(err)
	}
	// vmdb2 --version wants a specification file too.
	version, err := exec.Command(bin, "--version", spec).Output()
	if err != nil {
		t.Fatalf("vmdb2 --version: %v", err)
	}
	specText, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	standIn, err := os.ReadFile(filepath.Join(path, "kpartx"))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "vmdb2 %s\nspec %s\nkpartx %s\n", strings.TrimSpace(string(version)), specText, standIn)
	return dibtest.Cached(ctx, t, "vmdb2", hex.EncodeToString(h.Sum(nil))[:16], func(dir, out string, log *os.File) error {
		// vmdb2 tears down (unmounts, detaches its loop device) on SIGINT,
		// not on the SIGKILL a context's end sends by default.
		vlog := filepath.Join(dir, "vmdb2.log") // beside build.log
		cmd := exec.CommandContext(ctx, "nice", "-n", "10", bin, "--output", "debian.raw", "--log", vlog, spec)
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 2 * time.Minute
		cmd.Env = append(os.Environ(), "PATH="+path+string(os.PathListSeparator)+os.Getenv("PATH"))
		cmd.Dir = out
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("vmdb2 (its own log, every command with its output: %s): %w", vlog, err)
		}
		return nil
	})
}

// TestVmdb2 adopts an image vmdb2 made from the example specification of
// its manual (bookworm, Debian's generic kernel, an MBR disk with one ext4
// partition, GRUB for BIOS by vmdb2's grub step, vmdb2's serial console
// settings) as TestDiskImageBuilder adopts diskimage-builder's: install
// --stage --image on the partitioned disk, a boot under SeaBIOS through the
// image's own GRUB with kpreload's /init binding the test driver before
// systemd and the fallback taken back, Debian's update-initramfs,
// update-grub and another kernel package inside the root keeping kpreload
// the default with its driver, and one boot, after them, to the default target.
func TestVmdb2(t *testing.T) {
	testenv.SkipShort(t, "builds (once per machine) and boots a vmdb2 image")
	if os.Getuid() != 0 {
		t.Fatal("this test needs root (vmdb2, loop devices, chroot)")
	}
	t.Parallel() // its image build beside diskimage-builder's: see adoptBoots
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 40*time.Minute))
	defer cancel()
	start := time.Now()
	cached := vmdb2Image(ctx, t)
	checkVmdb2Disk(t, cached)
	adoptBoots.Lock()
	defer adoptBoots.Unlock()
	adoptBootUpdate(ctx, t, cached)
	t.Logf("whole test: %s", time.Since(start).Round(time.Second))
}

// checkVmdb2Disk: the image is what vmdb2 makes of the specification, a
// partitioned MBR disk (the root in partition 1, after the gap GRUB's core
// image goes in) whose boot sector holds GRUB's boot code, put there by
// vmdb2's grub step (install --stage runs no grub-install).
func checkVmdb2Disk(t *testing.T, img string) {
	t.Helper()
	p := rootPartition(t, img)
	if p.Number != 1 || p.Offset == 0 || p.Type != "83" {
		t.Fatalf("the vmdb2 image's root: %+v, want partition 1 of type 83 past the disk's start", p)
	}
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mbr := make([]byte, 512)
	if _, err := io.ReadFull(f, mbr); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(mbr, []byte("GRUB ")) || mbr[510] != 0x55 || mbr[511] != 0xaa {
		t.Fatalf("the vmdb2 image's boot sector holds no GRUB boot code:\n%q", mbr)
	}
	t.Logf("vmdb2's disk: an MBR with GRUB's boot code, the root in partition %d at %d MiB (%d MiB)", p.Number, p.Offset>>20, p.Size>>20)
}
