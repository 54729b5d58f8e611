// Package report defines the boot report /init writes to /run/kpreload/report.json
// and prints on the console, and how tools read it back from a console log.
package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/kpreload/kpreload/kmodcache/secureboot"
)

// Path is where /init writes the report; it survives switch_root with /run.
const Path = "/run/kpreload/report.json"

// ConsolePrefix starts the console line that carries the whole report as one line of JSON.
const ConsolePrefix = "kpreload-report: "

// RootInitPrefix starts the console line the test root filesystem's /sbin/init prints
// with what it saw after switch_root (see RootInit).
const RootInitPrefix = "kpreload-rootinit: "

// Report is everything /init decided and did during one boot. Times are seconds
// since the kernel started (CLOCK_BOOTTIME as read from /proc/uptime at the moment).
type Report struct {
	Format    int     `json:"format"`
	Kernel    string  `json:"kernel"`
	Cmdline   string  `json:"cmdline"`
	InitStart float64 `json:"init_start"`
	// Devices lists every device seen during coldplug with its modalias and the decision taken.
	Devices []Device `json:"devices"`
	// Modules lists every module /init considered, loaded or refused.
	Modules []Module `json:"modules"`
	// Events is a time-ordered log of phases ("coldplug round 1", "root mounted", ...).
	Events []Event `json:"events"`
	// Root describes how the root filesystem was found and mounted.
	Root Root `json:"root"`
	// DriversReady is when the last driver load finished (seconds since kernel start).
	DriversReady float64 `json:"drivers_ready"`
	// SwitchRoot is when /init called switch_root.
	SwitchRoot float64 `json:"switch_root"`
	// SecureBoot is what the kernel enforces about module signatures (Secure
	// Boot, lockdown, the certificates on its keyrings); nil when not read.
	SecureBoot *secureboot.State `json:"secure_boot,omitempty"`
	// Selection records the GPU driver version decision; nil when no driver set was cached.
	Selection *Selection `json:"selection,omitempty"`
	Warnings  []string   `json:"warnings,omitempty"`
	Errors    []string   `json:"errors,omitempty"`
	// Channel is the report channel /init sent the report line to (the
	// command line's kpreload.report=, or the device a boot harness named
	// through fw_cfg), "" when none: kpreload's units write their Up
	// records on the same device.
	Channel string `json:"channel,omitempty"`
	// CDI is the CDI spec written for the active driver once the root's
	// userspace is reachable (kpreload-cdi.service, then every kpreload
	// switch); nil while none exists. /init never writes it.
	CDI *CDI `json:"cdi,omitempty"`
	// UserData records the instance request cloud-init's user-data carried,
	// as kpreload-user-data.service applied it after boot; nil until then.
	UserData *UserData `json:"user_data,omitempty"`
}

// UserData is what kpreload user-data apply did with the request in the
// user-data cloud-init read (from a seed or a cloud's metadata service).
type UserData struct {
	// Origin is the file read (cloud-init's cloud-config.txt).
	Origin string `json:"origin"`
	// Action is none (no request, or one that yields to /init's source),
	// unchanged (the driver it picks is active), switched, or failed; a dry
	// run (never recorded) says would-switch where it would switch.
	Action string `json:"action"`
	// Reason says why, in words.
	Reason string `json:"reason"`
	// Driver, From and To name the driver and the versions switched between.
	Driver string `json:"driver,omitempty"`
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"`
	// Time is when it was applied (RFC 3339).
	Time string `json:"time"`
}

// CDI records a CDI spec file: where it is and its SHA-256.
type CDI struct {
	Path    string `json:"path"`
	SHA256  string `json:"sha256"`
	Written string `json:"written"` // RFC 3339
}

// Device is one device found in sysfs.
type Device struct {
	Path     string   `json:"path"` // sysfs path, e.g. /sys/bus/pci/devices/0000:00:04.0
	Modalias string   `json:"modalias"`
	Modules  []string `json:"modules,omitempty"` // modules matched to it
	Driver   string   `json:"driver,omitempty"`  // bound driver after coldplug, if any
	Decision string   `json:"decision"`          // "matched", "no match", "builtin", ...
}

// Module is the outcome of one module.
type Module struct {
	Name   string  `json:"name"`
	Set    string  `json:"set,omitempty"` // set ID from the boot index
	Path   string  `json:"path,omitempty"`
	Result string  `json:"result"` // "loaded", "already loaded", "refused", "failed"
	Reason string  `json:"reason,omitempty"`
	Errno  string  `json:"errno,omitempty"` // e.g. "ENODEV"
	Start  float64 `json:"start"`
	End    float64 `json:"end"`
	Phase  string  `json:"phase,omitempty"` // "initramfs" or "rootfs"
	// Decompress says who decompressed a compressed module: "kernel"
	// (MODULE_INIT_COMPRESSED_FILE) or "userspace" (the kernel cannot).
	Decompress string `json:"decompress,omitempty"`
	// Verified says how the file's bytes were checked against the boot
	// index before the kernel was called: "fs-verity" (the file has
	// fs-verity on and the kernel's measure of it is the digest the index
	// records; not read), "sha256" (read and hashed), or empty (not
	// checked: kpreload.verify=0, or the index names no digest).
	Verified string `json:"verified,omitempty"`
	// VerityStarted says fs-verity was being turned on for the file once
	// the kernel had read it, in the background, so that later boots measure it instead of
	// hashing it.
	VerityStarted bool `json:"verity_started,omitempty"`
	// MissingFirmware lists firmware the module declares that was not where
	// the kernel looks when it was loaded.
	MissingFirmware []string `json:"missing_firmware,omitempty"`
	// ReadTime, DigestTime and DecompressTime are the seconds the insert
	// spent reading the file for its digest check, hashing it, and
	// decompressing it in userspace (0: not done); Called is when the
	// system call that loaded it (finit_module, or init_module after
	// userspace decompression) was made, End when it returned. The kernel's
	// log under initcall_debug splits the call into the kernel's load_module
	// work and the module's init (scripts/nvidia-breakdown.sh).
	ReadTime       float64 `json:"read_time,omitempty"`
	DigestTime     float64 `json:"digest_time,omitempty"`
	DecompressTime float64 `json:"decompress_time,omitempty"`
	Called         float64 `json:"called,omitempty"`
}

// Event is one timestamped step of the boot.
type Event struct {
	Time float64 `json:"t"`
	What string  `json:"what"`
}

// Root records the root filesystem's discovery.
type Root struct {
	Spec    string  `json:"spec"`   // root= value
	Device  string  `json:"device"` // resolved block device
	FSType  string  `json:"fstype"`
	Mounted float64 `json:"mounted"` // time mounted
	Error   string  `json:"error,omitempty"`
	// Failed is set when the root device was there but could not be
	// mounted within kpreload.rootfail= seconds: why, in words.
	Failed string `json:"failed,omitempty"`
	// FailedModules names the modules the root's filesystem needed that
	// the initramfs lacked or the loader refused or failed, each with why.
	FailedModules []string `json:"failed_modules,omitempty"`
	// KernelLog holds the kernel's own complaints about the root (from
	// /dev/kmsg), at most a few lines.
	KernelLog []string `json:"kernel_log,omitempty"`
	// Fallback is what /init did about a root that cannot be mounted:
	// "reboot" (into the boot loader's fallback entry) or "none" (no
	// fallback entry was arranged: it keeps retrying).
	Fallback string `json:"fallback,omitempty"`
}

// Summary is the one-line console summary of a report.
func (r *Report) Summary() string {
	loaded, refused, failed, loading := 0, 0, 0, 0
	for _, m := range r.Modules {
		switch m.Result {
		case "loaded":
			loaded++
		case "refused":
			refused++
		case "failed":
			failed++
		case "still loading":
			loading++
		}
	}
	still := ""
	if loading > 0 {
		still = fmt.Sprintf(", %d still loading", loading)
	}
	return fmt.Sprintf("kpreload: %d devices, %d modules loaded, %d refused, %d failed%s; drivers ready at %.3fs, root %s at %.3fs, switch_root at %.3fs",
		len(r.Devices), loaded, refused, failed, still, r.DriversReady, r.Root.Device, r.Root.Mounted, r.SwitchRoot)
}

// ConsoleLine renders the report as the single console line tools parse back.
func (r *Report) ConsoleLine() (string, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	return ConsolePrefix + string(b), nil
}

// Scan reads a console log and returns the last intact report line and the last
// intact root-init line found in it (raw JSON), or nil when absent. Lines may carry
// a trailing \r; lines whose JSON is damaged are skipped.
func Scan(r io.Reader) (rep *Report, rootInit json.RawMessage, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if i := strings.Index(line, ConsolePrefix); i >= 0 {
			// On a shared console, kernel messages can cut into the line: a
			// damaged line is skipped, and a later intact one wins.
			var x Report
			if err := json.Unmarshal([]byte(line[i+len(ConsolePrefix):]), &x); err == nil {
				rep = &x
			}
		}
		if i := strings.Index(line, RootInitPrefix); i >= 0 {
			if raw := json.RawMessage(line[i+len(RootInitPrefix):]); json.Valid(raw) {
				rootInit = raw
			}
		}
	}
	return rep, rootInit, sc.Err()
}
