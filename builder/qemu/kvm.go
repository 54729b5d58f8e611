package qemu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// DefaultProbeTimeout bounds the KVM probe boot.
const DefaultProbeTimeout = 10 * time.Second

// kvmDevice is the KVM device node; a variable so tests can point it elsewhere.
var kvmDevice = "/dev/kvm"

// chooseAccel resolves c.Accel to "tcg" or "kvm". For "kvm" and "auto" it runs the
// probe; a failed probe gives "tcg" and a warning saying why.
func (r *Runner) chooseAccel(ctx context.Context, drv Driver, c Config) (accel, warning string, err error) {
	switch c.Accel {
	case "tcg":
		return "tcg", "", nil
	case "kvm", "auto":
		if c.Kernel == "" {
			// The probe boots a kernel; a UEFI boot has none on the host side.
			return "tcg", "KVM unusable, falling back to TCG: the KVM probe needs a kernel and a UEFI boot names none", nil
		}
		timeout := r.ProbeTimeout
		if timeout == 0 {
			timeout = DefaultProbeTimeout
		}
		ok, detail := ProbeKVM(ctx, drv, c.Kernel, filepath.Dir(c.ConsoleLog), timeout)
		if ok {
			return "kvm", "", nil
		}
		return "tcg", "KVM unusable, falling back to TCG: " + detail, nil
	default:
		return "", "", fmt.Errorf("qemu: accelerator %q: want tcg, kvm or auto", c.Accel)
	}
}

// ProbeArgs is the QEMU command line of the KVM probe: the kernel alone, no disk, no
// initramfs; it panics for want of a root (panic=-1 and -no-reboot end QEMU then).
func ProbeArgs(kernel, consoleLog string) []string {
	return []string{
		"-machine", DefaultMachine, "-accel", "kvm", "-cpu", "host",
		"-m", "256", "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none", "-monitor", "none", "-no-reboot",
		"-serial", "file:" + consoleLog,
		"-kernel", kernel,
		"-append", "console=ttyS0 panic=-1",
	}
}

// ProbeKVM boots kernel under KVM for at most timeout and reports whether the console
// showed the kernel starting ("Linux version"). Nested KVM on some hosts hangs after the
// firmware, which this catches; detail says what was seen. The probe stops as soon as the
// kernel has been seen.
func ProbeKVM(ctx context.Context, drv Driver, kernel, workDir string, timeout time.Duration) (ok bool, detail string) {
	f, err := os.OpenFile(kvmDevice, os.O_RDWR, 0)
	if err != nil {
		return false, fmt.Sprintf("cannot open %s: %v", kvmDevice, err)
	}
	f.Close()
	if workDir == "" {
		workDir = os.TempDir()
	}
	log, err := os.CreateTemp(workDir, "kvm-probe-*.log")
	if err != nil {
		return false, fmt.Sprintf("probe log: %v", err)
	}
	logPath := log.Name()
	log.Close()
	defer os.Remove(logPath)

	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	seen := make(chan struct{})
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
				if b, _ := os.ReadFile(logPath); bytes.Contains(b, []byte("Linux version")) {
					close(seen)
					cancel()
					return
				}
			}
		}
	}()
	start := time.Now()
	_, runErr := drv.Run(pctx, ProbeArgs(kernel, logPath))
	expired := pctx.Err() != nil
	cancel()
	select {
	case <-seen:
		return true, fmt.Sprintf("kernel started under KVM within %.1fs", time.Since(start).Seconds())
	default:
	}
	b, _ := os.ReadFile(logPath)
	if bytes.Contains(b, []byte("Linux version")) {
		return true, "kernel started under KVM"
	}
	if runErr != nil && !expired {
		return false, fmt.Sprintf("probe boot failed: %v", runErr)
	}
	return false, fmt.Sprintf("no kernel output within %s under KVM (console: %q)", timeout, lastBytes(b, 200))
}

// lastBytes returns at most n trailing bytes of b as a string.
func lastBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
