package pid1

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/kmodcache/modname"
)

// Kernel command line flags of a root that cannot be mounted.
const (
	// RootFailFlag sets how long (seconds) mounts of a root device that is
	// there may fail before /init gives up on them (DefaultRootFail).
	RootFailFlag = "kpreload.rootfail"
	// FallbackFlag ("kpreload.fallback=1") says the boot loader arranged a
	// fallback entry for the next boot (GRUB's next_entry, systemd-boot's
	// boot counting): /init may reboot into it. The entry writers
	// (builder/install) add it only when such an entry exists.
	FallbackFlag = "kpreload.fallback"
)

// DefaultRootFail is how long mounts of a root device that is there may
// fail before /init says the root cannot be mounted: long enough for a
// slow device to settle under emulation, short enough that a machine falls
// back before anyone gives up on it.
const DefaultRootFail = 30 * time.Second

// Bounds of what the report keeps of the kernel's log.
const (
	kmsgMaxBytes = 1 << 20
	kmsgMaxLines = 6
	kmsgMaxLine  = 200
)

// rootFailAfter is kpreload.rootfail= (seconds, decimals allowed), else
// DefaultRootFail; a bad value is a warning and the default.
func (b *Boot) rootFailAfter() time.Duration {
	v := b.flag(RootFailFlag, "")
	if v == "" {
		return DefaultRootFail
	}
	secs, err := strconv.ParseFloat(v, 64)
	if err != nil || secs <= 0 || secs > 3600 {
		b.warnf("%s=%q: want seconds between 0 and 3600; using %s", RootFailFlag, v, DefaultRootFail)
		return DefaultRootFail
	}
	return time.Duration(secs * float64(time.Second))
}

// rootFailed records, says and acts on a root device that is there but has
// failed to mount for the whole of kpreload.rootfail=: the report's root
// names why, the modules the filesystem needed that did not load and the
// kernel's own complaints; the report is written and sent on its channel;
// with a fallback entry arranged by the boot loader (kpreload.fallback=1)
// /init reboots into it. It returns only when it did not reboot: the caller
// keeps retrying.
func (b *Boot) rootFailed(dev, fstype string, waited time.Duration, mountErr error) {
	b.rep.Root.Failed = fmt.Sprintf("%s (%s) is there but could not be mounted for %s: %v", dev, fstype, waited.Round(time.Second), mountErr)
	b.rep.Root.FailedModules = b.fsModuleFaults(fstype)
	b.rep.Root.KernelLog = kernelComplaints(filepath.Join(b.o.DevDir, "kmsg"), filepath.Base(dev), fstype)
	msg := "root " + b.rep.Root.Failed
	if len(b.rep.Root.FailedModules) > 0 {
		msg += "; modules: " + strings.Join(b.rep.Root.FailedModules, "; ")
	}
	if len(b.rep.Root.KernelLog) > 0 {
		msg += "; the kernel said: " + strings.Join(b.rep.Root.KernelLog, " | ")
	}
	fallback := b.flag(FallbackFlag, "") == "1"
	if fallback {
		b.rep.Root.Fallback = "reboot"
	} else {
		b.rep.Root.Fallback = "none"
	}
	b.errorf("%s", msg)
	b.emitReport()
	if !fallback {
		fmt.Fprintf(b.console, "kpreload: no fallback boot entry was arranged (%s=1 is not on the command line): retrying the mount\n", FallbackFlag)
		return
	}
	fmt.Fprintln(b.console, "kpreload: rebooting into the boot loader's fallback entry")
	if err := b.o.System.Reboot(); err != nil {
		b.errorf("reboot: %v; retrying the mount", err)
	}
}

// fsModuleFaults returns, for the filesystem fstype, each module it needs
// (its fs- alias, their dependencies and soft dependencies, names or
// aliases) that the initramfs lacks or the loader refused or failed, with
// why, in the order met.
func (b *Boot) fsModuleFaults(fstype string) []string {
	var out []string
	names := b.index.Match("fs-" + fstype)
	if len(names) == 0 {
		return []string{fmt.Sprintf("fs-%s: no module in the initramfs provides it (build it with --filesystems %s)", fstype, fstype)}
	}
	results := map[string]string{}
	for _, m := range b.rep.Modules {
		if m.Result == "failed" || m.Result == "refused" {
			why := m.Result
			if m.Reason != "" {
				why += ": " + m.Reason
			} else if m.Errno != "" {
				why += ": " + m.Errno
			}
			results[modname.Normalize(m.Name)] = why
		}
	}
	seen := map[string]bool{}
	var walk func(name, via string, soft bool)
	walk = func(name, via string, soft bool) {
		n := modname.Normalize(name)
		if seen[n] {
			return
		}
		seen[n] = true
		cands := b.index.ByName(n)
		if len(cands) == 0 {
			// A soft dependency may name an alias (crypto-crc32c).
			if alts := b.index.Lookup(name); len(alts) > 0 {
				for _, a := range alts {
					walk(a, via, soft)
				}
				return
			}
			// A soft dependency the initramfs lacks may be built into the
			// kernel (crc32c on Debian's cloud kernels): not a fault to name.
			if !soft {
				out = append(out, fmt.Sprintf("%s (%s): not in the initramfs", name, via))
			}
			return
		}
		if why, ok := results[n]; ok {
			out = append(out, fmt.Sprintf("%s (%s): %s", name, via, why))
		}
		m := cands[0].Module
		for _, d := range m.Depends {
			walk(d, "needed by "+name, false)
		}
		for _, d := range m.SoftPre {
			walk(d, "soft dependency of "+name, true)
		}
	}
	for _, n := range names {
		walk(n, "fs-"+fstype, false)
	}
	return out
}

// kernelComplaints returns the last few lines of the kernel log at path
// (/dev/kmsg, read without waiting) that name the device dev or the
// filesystem fstype ("EXT4-fs (vda1): Cannot load crc32c driver."), each
// cut to a bounded length; nil when there are none or the log cannot be read.
func kernelComplaints(path, dev, fstype string) []string {
	// Raw system calls, not an *os.File: Go's poller would wait at the end
	// of /dev/kmsg (EAGAIN) for a record that may never come.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	var all bytes.Buffer
	buf := make([]byte, 8192) // /dev/kmsg gives one record per read
	for all.Len() < kmsgMaxBytes {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EPIPE) || errors.Is(err, unix.EINTR) {
			continue // records were overwritten: the next read goes on
		}
		if err != nil || n <= 0 {
			break // EAGAIN at the end of /dev/kmsg, 0 at the end of a file
		}
		all.Write(buf[:n])
	}
	fsName := strings.ToUpper(fstype)
	var out []string
	for _, line := range strings.Split(all.String(), "\n") {
		if line == "" || line[0] == ' ' {
			continue // a record's continuation (" SUBSYSTEM=...")
		}
		// "priority,sequence,time,flags;message"
		if head, msg, ok := strings.Cut(line, ";"); ok && strings.Count(head, ",") >= 2 {
			line = msg
		}
		if !strings.Contains(line, fsName) && (dev == "" || !containsWord(line, dev)) {
			continue
		}
		if len(line) > kmsgMaxLine {
			line = line[:kmsgMaxLine] + "…"
		}
		out = append(out, line)
	}
	if len(out) > kmsgMaxLines {
		out = out[len(out)-kmsgMaxLines:]
	}
	return slices.Clip(out)
}

// containsWord reports whether s holds w not run into a longer name
// ("vda" in "(vda):" but not in "vda1" or "nvdax").
func containsWord(s, w string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		j += i
		before := j == 0 || !isNameByte(s[j-1])
		after := j+len(w) == len(s) || !isNameByte(s[j+len(w)])
		if before && after {
			return true
		}
		i = j + 1
	}
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}
