package report

import (
	"encoding/json"
	"fmt"
)

// RootInitFormat is the current format of the RootInit record.
const RootInitFormat = 1

// RootInit is what the test root filesystem's /sbin/init (cmd/kpreload-rootinit) saw after
// the boot handed over to it. It prints the record as one console line starting with
// RootInitPrefix and then powers the machine off. Times are seconds since the kernel
// started (/proc/uptime, or the printk clock for kernel log lines).
type RootInit struct {
	Format int `json:"format"`
	// PID is the process ID the program ran as; 1 when it was the real init.
	PID int `json:"pid"`
	// Start is /proc/uptime when the program started (as soon as /proc was readable).
	Start float64 `json:"start"`
	// End is /proc/uptime when it finished collecting, just before printing.
	End float64 `json:"end"`
	// Kernel is the running kernel's release (uname -r).
	Kernel string `json:"kernel"`
	// Cmdline is the kernel command line (/proc/cmdline), without the trailing newline.
	Cmdline string `json:"cmdline"`
	// Root is the filesystem mounted at / according to /proc/mounts.
	Root MountEntry `json:"root"`
	// Report is /run/kpreload/report.json as /init left it, embedded unchanged; absent when
	// the file does not exist.
	Report json.RawMessage `json:"report,omitempty"`
	// DriverLink is where /run/kpreload/driver points (the loaded driver's
	// userspace); empty when the link does not exist.
	DriverLink string `json:"driver_link,omitempty"`
	// Ready is /run/kpreload/ready as /init left it, embedded unchanged; absent
	// when no driver was activated.
	Ready json.RawMessage `json:"ready,omitempty"`
	// Modules lists the loaded modules (/proc/modules), in the kernel's order.
	Modules []string `json:"modules"`
	// PCI lists every PCI device with the driver bound to it, if any.
	PCI []PCIDevice `json:"pci"`
	// Kmsg holds the kernel log lines that mention kpreload or NVRM, with their printk times.
	Kmsg []KmsgLine `json:"kmsg"`
	// Mounted lists the pseudo filesystems the program had to mount itself ("/proc", ...).
	Mounted []string `json:"mounted,omitempty"`
	// Errors records every step that failed; the program carries on regardless.
	Errors []string `json:"errors,omitempty"`
}

// MountEntry is one line of /proc/mounts.
type MountEntry struct {
	Device  string `json:"device"`
	FSType  string `json:"fstype"`
	Options string `json:"options,omitempty"`
	// BlockDevice is the block device holding the filesystem, found from its device
	// number (e.g. /dev/nvme0n1 where /proc/mounts says /dev/root); empty when it is
	// not on a block device.
	BlockDevice string `json:"block_device,omitempty"`
}

// PCIDevice is one device under /sys/bus/pci/devices.
type PCIDevice struct {
	Address string `json:"address"`          // e.g. 0000:00:03.0
	Vendor  string `json:"vendor"`           // hex without 0x, e.g. 1234
	Device  string `json:"device"`           // hex without 0x, e.g. 11e8
	Class   string `json:"class,omitempty"`  // hex without 0x, e.g. 030200
	Driver  string `json:"driver,omitempty"` // bound driver's name, empty when unbound
	// EduID is the edu_id attribute the project's test driver exposes on a bound edu device.
	EduID string `json:"edu_id,omitempty"`
}

// ID renders the device's vendor:device pair, e.g. "1234:11e8".
func (d PCIDevice) ID() string { return d.Vendor + ":" + d.Device }

// KmsgLine is one kernel log record.
type KmsgLine struct {
	Time  float64 `json:"t"` // seconds since the kernel started (printk clock)
	Level int     `json:"level"`
	Text  string  `json:"text"`
}

// ConsoleLine renders the record as the single console line tools parse back.
func (r *RootInit) ConsoleLine() (string, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("encode root-init record: %w", err)
	}
	return RootInitPrefix + string(b), nil
}

// DecodeRootInit decodes the raw JSON of a root-init line as returned by Scan.
func DecodeRootInit(raw json.RawMessage) (*RootInit, error) {
	var r RootInit
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("decode root-init record: %w", err)
	}
	return &r, nil
}
