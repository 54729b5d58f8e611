// Package status gathers what `kpreload status` says about a root: its
// kernels, their driver cells and the default kernel; and, on a machine that
// booted through kpreload's /init, the active driver, where its request came
// from, whether the CDI spec kpreload keeps matches it, Secure Boot, lockdown
// and the module signing keys, and each problem found with the command that
// fixes it. It only reads, every path inside the root; the CLI prints.
package status

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/gpu/cdispec"
	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/internal/none"
	"github.com/kpreload/kpreload/kmodcache/modname"
	"github.com/kpreload/kpreload/kmodcache/secureboot"
	"github.com/kpreload/kpreload/report"
)

// ErrNotKpreload is returned for a root kpreload neither installed into nor
// booted: it has no /boot/kpreload and no boot report of kpreload's /init.
var ErrNotKpreload = errors.New("not a kpreload root")

// Options say which root to read.
type Options struct {
	// Root is the root filesystem ("/" for the running system). A booted
	// machine's state is read under it too: its /run (the boot report and
	// the ready record), /sys and /proc.
	Root string
	// Running says Root is the system running now (status without
	// --root): a boot that did not come through kpreload's /init is then a
	// problem.
	Running bool
}

// Status is what `kpreload status` says, and its --json.
type Status struct {
	// Root is the root read.
	Root string `json:"root"`
	// Booted says the machine booted through kpreload's /init: its boot
	// report is in /run. The fields below Kernels are read only then.
	Booted bool `json:"booted"`
	// RunningKernel is the kernel /init booted.
	RunningKernel string `json:"running_kernel,omitempty"`
	// Default is the kernel the boot loader boots by default, Policy the
	// policy that picked it (boot.yaml's default) and DefaultWhy why, in
	// words.
	Default    string `json:"default"`
	Policy     string `json:"policy"`
	DefaultWhy string `json:"default_why"`
	// Kernels are the root's kernels with their driver cells, newest first.
	Kernels []install.Kernel `json:"kernels"`
	// Driver is the active driver (nil when none is).
	Driver *Driver `json:"driver,omitempty"`
	// Request is the driver request in effect and where it came from.
	Request *Request `json:"request,omitempty"`
	// CDI says whether the spec kpreload keeps matches the active driver.
	CDI *cdispec.Verification `json:"cdi,omitempty"`
	// SecureBoot is the firmware's and the kernel's state and the module
	// signing keys of the running kernel's driver sets.
	SecureBoot *SecureBoot `json:"secure_boot,omitempty"`
	// Problems are what is wrong, each with the command that fixes it.
	Problems []Problem `json:"problems"`
	// Warnings are what could not be read as it should (boot.yaml).
	Warnings []string `json:"warnings,omitempty"`
}

// Driver is the active driver, as the ready record kpreload keeps in
// /run/kpreload/ready names it (what kpreload switch reads as active).
type Driver struct {
	Driver  string `json:"driver"`
	Version string `json:"version"`
	Flavor  string `json:"flavor,omitempty"`
	// Set is the boot index set its modules came from.
	Set string `json:"set,omitempty"`
	// By is who activated it: "init" at boot, "switch" after.
	By string `json:"by"`
	// Previous is the version active before a switch.
	Previous string `json:"previous,omitempty"`
	// Userspace is where /run/kpreload/driver points.
	Userspace string `json:"userspace,omitempty"`
	// Modules are the set's modules the record names; NotLoaded those of
	// them the kernel does not hold now (/sys/module).
	Modules   []string `json:"modules"`
	NotLoaded []string `json:"not_loaded,omitempty"`
}

// Request is the driver request in effect: /init's (the boot report's
// selection), or the user-data's when kpreload-user-data.service switched
// to it after boot.
type Request struct {
	// Source is where it came from: cmdline, fw_cfg, seed, image, default
	// or user-data (gpu/instance's Source constants); Origin exactly where.
	Source string `json:"source"`
	Origin string `json:"origin,omitempty"`
	// Version, Flavor and CUDA are what it asked.
	Version string `json:"version,omitempty"`
	Flavor  string `json:"flavor,omitempty"`
	CUDA    string `json:"cuda,omitempty"`
	// Notes say why earlier sources gave no request; Errors are requests
	// that were there but invalid (skipped).
	Notes  []string `json:"notes,omitempty"`
	Errors []string `json:"errors,omitempty"`
	// UserData is what kpreload-user-data.service did (nil before it ran).
	UserData *report.UserData `json:"user_data,omitempty"`
}

// SecureBoot is the firmware's and the kernel's state, and the keys the
// running kernel's driver sets are signed with.
type SecureBoot struct {
	// State is enabled, disabled, not-uefi or unknown (kmodcache/secureboot).
	State string `json:"state"`
	// Lockdown is the kernel's lockdown mode (/sys/kernel/security/lockdown).
	Lockdown string `json:"lockdown,omitempty"`
	// Enforced says the kernel refuses modules without a valid signature.
	Enforced bool `json:"enforced"`
	// Expected says the image was built for Secure Boot.
	Expected bool `json:"expected,omitempty"`
	// Keys are the certificates the running kernel's driver sets are
	// signed with; KeysError says why the kernel's keyrings (/proc/keys)
	// could not be read.
	Keys      []SigningKey `json:"signing_keys,omitempty"`
	KeysError string       `json:"keys_error,omitempty"`
}

// SigningKey is one certificate driver sets are signed with.
type SigningKey struct {
	Signer string `json:"signer,omitempty"`
	SigKey string `json:"sig_key,omitempty"`
	// File is where the image keeps the certificate for mokutil --import.
	File string `json:"file"`
	// Enrolled says a kernel keyring holds it (a MOK, or built in).
	Enrolled bool `json:"enrolled"`
	// Sets are the driver versions it signs ("kpreload-edu 1.0.0 (open)").
	Sets []string `json:"sets"`
}

// Problem is one thing wrong and the command that fixes it.
type Problem struct {
	What string `json:"what"`
	Fix  string `json:"fix"`
}

// Read gathers the status of o.Root. A root that does not exist is an
// error, and so is one kpreload neither installed into nor booted
// (ErrNotKpreload, saying what to run).
func Read(o Options) (*Status, error) {
	root := o.Root
	if root == "" {
		root = "/"
	}
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("root %s: %w", root, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("root %s: not a directory", root)
	}
	rep, repErr := readReport(root)
	booted := rep != nil || (repErr != nil && !errors.Is(repErr, fs.ErrNotExist))
	if !install.Installed(root) && !booted {
		if o.Running {
			return nil, fmt.Errorf("%w: kpreload is not installed on this system (no /%s) and it did not boot through kpreload's /init (no %s); `kpreload install` makes it boot kpreload (images get it from `kpreload image build`, the Packer plugin or `kpreload install --stage`)", ErrNotKpreload, install.InitramfsDir, report.Path)
		}
		return nil, fmt.Errorf("%w: %s has no /%s (`kpreload install --root %s` makes it boot kpreload) and no boot report of kpreload's /init", ErrNotKpreload, root, install.InitramfsDir, root)
	}
	kernels, err := install.Kernels(root)
	if err != nil {
		return nil, err
	}
	st, warnings := install.ReadSettingsOrDefaults(root)
	s := &Status{Root: root, Booted: booted, Kernels: kernels, Policy: st.Default, Warnings: warnings, Problems: []Problem{}}
	s.Default = install.DefaultKernel(kernels, st.NewestFirst())
	s.DefaultWhy = st.DescribeDefault(kernels, s.Default)
	s.kernelProblems()
	if !booted {
		if o.Running {
			s.add(fmt.Sprintf("this boot did not come through kpreload's /init (no %s)", report.Path),
				"reboot: the boot loader's default entry boots kpreload (kernel "+none.Or(s.Default)+")")
		}
		return s, nil
	}
	if repErr != nil {
		s.add(repErr.Error(), "reboot: /init writes the report once a boot")
		return s, nil
	}
	s.RunningKernel = rep.Kernel
	s.readDriver(root, rep)
	s.Request = request(rep)
	if err := s.readCDI(root); err != nil {
		s.add("the CDI spec cannot be checked: "+err.Error(), "kpreload cdi refresh")
	}
	s.readSecureBoot(root, rep)
	if n := len(rep.Errors); n > 0 {
		s.add(fmt.Sprintf("/init recorded %d error(s) in its boot report, the first: %s", n, rep.Errors[0]), "kpreload report")
	}
	return s, nil
}

// add records a problem.
func (s *Status) add(what, fix string) {
	s.Problems = append(s.Problems, Problem{What: what, Fix: fix})
}

// readReport reads /init's boot report under root.
func readReport(root string) (*report.Report, error) {
	b, err := inroot.ReadFile(root, report.Path, inroot.MaxLarge)
	if err != nil {
		return nil, fmt.Errorf("boot report: %w", err)
	}
	var rep report.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("boot report %s: %w", inroot.Host(root, report.Path), err)
	}
	return &rep, nil
}

// kernelProblems are the root's kernels that kpreload cannot boot with a
// driver, and a root with no kernel it can boot.
func (s *Status) kernelProblems() {
	for _, k := range s.Kernels {
		switch {
		case k.Image && k.Modules && !k.Initramfs:
			s.add(fmt.Sprintf("kernel %s has no kpreload initramfs: it boots only with the distribution's", k.Release), "kpreload kernel-hook postinst "+k.Release)
		case k.Image && k.IndexError != "":
			s.add(fmt.Sprintf("kernel %s: its boot index is refused (%s): kpreload boots it without a GPU driver", k.Release, k.IndexError), "kpreload kernel-hook refresh")
		case k.Image && len(k.Sets) == 0:
			s.add(fmt.Sprintf("kernel %s has no driver cells: kpreload boots it without a GPU driver", k.Release), "kpreload kernel-hook refresh")
		}
	}
	// A root booted some other way (a kernel QEMU was handed) and never
	// installed into has no boot loader of kpreload's to fix.
	if s.Default == "" && install.Installed(s.Root) {
		s.add("no kernel has both its image and a kpreload initramfs: nothing boots kpreload", "kpreload install --root "+s.Root)
	}
}

// readDriver reads the ready record and which of its modules are loaded,
// and says what is wrong when no driver is active though the running
// kernel has driver cells.
func (s *Status) readDriver(root string, rep *report.Report) {
	ready, err := activate.ReadReadyIn(root, activate.RunDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.add(err.Error(), "kpreload switch VERSION (rewrites the record)")
		return
	}
	if ready != nil {
		d := &Driver{Driver: ready.Driver, Version: ready.Version, Flavor: ready.Flavor, Set: ready.Set, By: ready.By,
			Previous: ready.Previous, Userspace: ready.Userspace, Modules: ready.Modules}
		if d.Modules == nil {
			d.Modules = []string{}
		}
		for _, m := range ready.Modules {
			if _, err := inroot.Stat(root, path.Join("sys/module", modname.Normalize(m))); err != nil {
				d.NotLoaded = append(d.NotLoaded, m)
			}
		}
		s.Driver = d
		if len(d.NotLoaded) > 0 {
			s.add(fmt.Sprintf("%s %s is recorded active, but its module(s) %s are not loaded", d.Driver, d.Version, strings.Join(d.NotLoaded, ", ")), "kpreload switch "+d.Version)
		}
		return
	}
	var running *install.Kernel
	for i := range s.Kernels {
		if s.Kernels[i].Release == rep.Kernel {
			running = &s.Kernels[i]
		}
	}
	if running == nil || len(running.Sets) == 0 {
		return // the kernel problems say so
	}
	why, fix := "no driver set qualified at boot", "kpreload switch "+running.Sets[0].Version
	if sel := rep.Selection; sel != nil {
		for _, dd := range sel.Drivers {
			switch {
			case dd.Chosen != nil:
				why, fix = fmt.Sprintf("%s %s was chosen at boot but did not become active", dd.Driver, dd.Chosen.Version), "kpreload switch "+dd.Chosen.Version
			case dd.Refusal != "":
				why, fix = shortRefusal(dd.Refusal), refusalFix(dd.Refusal, rep.Kernel)
			}
		}
	}
	s.add("no driver is active: "+why, fix)
}

// shortRefusal is a decision's refusal without the list of what the cache
// holds, each set with its rule (kpreload report shows it): what was asked,
// and what would work or why nothing would.
func shortRefusal(refusal string) string {
	asked, rest, ok := strings.Cut(refusal, "; the cache holds ")
	if !ok {
		return refusal
	}
	for _, tail := range []string{"; would work on this machine: ", "; nothing cached would work", "; no cached version "} {
		if i := strings.LastIndex(rest, tail); i >= 0 {
			return asked + rest[i:]
		}
	}
	return asked
}

// refusalFix is the command that gets a driver the boot's decision refused
// loaded: the version the refusal says would work, else (signatures) the
// key to enroll, else the decision to read again.
func refusalFix(refusal, kernel string) string {
	if _, after, ok := strings.Cut(refusal, "(e.g. kpreload.driver="); ok {
		if v, _, ok := strings.Cut(after, ")"); ok && v != "" {
			return "kpreload switch " + v
		}
	}
	if strings.Contains(refusal, "enforces module signatures") {
		return "enroll the modules' signing key (the signing key problem's mokutil command) and reboot"
	}
	return "kpreload plan --sysfs / --cache /" + install.CacheDir + " --kernel " + kernel + " (what would load, and why not), then build that driver"
}

// request is the request in effect, from the report's selection and
// kpreload-user-data.service's record.
func request(rep *report.Report) *Request {
	sel := rep.Selection
	if sel == nil && rep.UserData == nil {
		return nil
	}
	r := &Request{UserData: rep.UserData}
	if sel != nil {
		r.Source, r.Origin, r.Notes, r.Errors = sel.Source, sel.Origin, sel.Notes, sel.Errors
		r.Version, r.Flavor, r.CUDA = sel.Request.Version, sel.Request.Flavor, sel.Request.CUDA
	}
	if ud := rep.UserData; ud != nil && ud.Action == "switched" {
		r.Source, r.Origin, r.Version, r.Flavor, r.CUDA = instance.SourceUserData, ud.Origin, ud.To, "", ""
	}
	return r
}

// readCDI checks the spec kpreload keeps against the active driver.
func (s *Status) readCDI(root string) error {
	v, err := cdispec.Verify(root)
	if err != nil {
		return err
	}
	s.CDI = &v
	switch v.State {
	case cdispec.SpecMissing, cdispec.SpecDiffers, cdispec.SpecUnchecked:
		s.add(fmt.Sprintf("the CDI spec of %s %s: %s", v.Driver, v.Version, v.Why), "kpreload cdi refresh")
	case cdispec.SpecNotOwn:
		s.add(fmt.Sprintf("the CDI spec of %s %s: %s", v.Driver, v.Version, v.Why), "move "+v.File+" away, then kpreload cdi refresh")
	}
	for _, f := range v.Stale {
		s.add(fmt.Sprintf("%s is kpreload's CDI spec of a driver that is not active", f), "kpreload cdi refresh")
	}
	for _, c := range v.Conflicts {
		s.add(c, "remove the other spec, or for NVIDIA's set \"nvidia: false\" in "+cdispec.ConfigFile+" and run kpreload cdi refresh")
	}
	return nil
}

// readSecureBoot reads the firmware's and the kernel's state under root's
// /sys and /proc, whether the image expects Secure Boot (/init's report,
// else the command line), and which keyring holds each key the running
// kernel's driver sets are signed with.
func (s *Status) readSecureBoot(root string, rep *report.Report) {
	sys, proc := filepath.Join(root, "sys"), filepath.Join(root, "proc")
	cmdline := rep.Cmdline
	if b, err := inroot.ReadFile(root, "proc/cmdline", inroot.MaxText); err == nil {
		cmdline = string(b)
	}
	flag := func(name string) string {
		v := ""
		for _, f := range strings.Fields(cmdline) {
			if val, ok := strings.CutPrefix(f, name+"="); ok {
				v = val
			}
		}
		return v
	}
	st := secureboot.Read(sys, proc, flag("lockdown"))
	st.Expect(flag(secureboot.ExpectFlag))
	if rep.SecureBoot != nil && rep.SecureBoot.Expected {
		st.Expected = true
		if st.Fault == "" && st.SecureBoot != secureboot.Enabled {
			st.Fault = rep.SecureBoot.Fault
		}
	}
	sb := &SecureBoot{State: st.SecureBoot, Lockdown: st.Lockdown, Enforced: st.Enforced, Expected: st.Expected}
	s.SecureBoot = sb
	if st.Fault != "" {
		s.add(st.Fault, "turn Secure Boot on in the instance's firmware")
	}
	if !st.Enforced {
		// Read signs nothing it need not; which key is enrolled is still worth telling.
		b, err := os.ReadFile(filepath.Join(proc, "keys"))
		if err != nil {
			st.KeysError = err.Error()
		} else {
			st.Keys = secureboot.ParseKeys(b)
		}
	}
	sb.KeysError = st.KeysError
	ix, err := install.ReadIndex(root, rep.Kernel)
	if err != nil {
		return
	}
	byKey := map[string]int{}
	for _, set := range ix.Sets {
		if set.Driver == "" {
			continue
		}
		name := set.Driver + " " + set.Version
		if set.Flavor != "" {
			name += " (" + set.Flavor + ")"
		}
		for _, m := range set.Modules {
			if m.SigKey == "" && m.Signer == "" {
				continue
			}
			id := m.SigKey + "\x00" + m.Signer
			i, ok := byKey[id]
			if !ok {
				i = len(sb.Keys)
				byKey[id] = i
				sb.Keys = append(sb.Keys, SigningKey{Signer: m.Signer, SigKey: m.SigKey, File: secureboot.KeyFile(m.SigKey),
					Enrolled: st.KeysError == "" && st.Enrolled(m.Signer, m.SigKey)})
			}
			if k := &sb.Keys[i]; len(k.Sets) == 0 || k.Sets[len(k.Sets)-1] != name {
				k.Sets = append(k.Sets, name)
			}
		}
	}
	for _, k := range sb.Keys {
		if st.Enforced && st.KeysError == "" && !k.Enrolled {
			s.add(fmt.Sprintf("the kernel enforces module signatures and no keyring holds %q (sig_key %s), which signs %s", k.Signer, k.SigKey, strings.Join(k.Sets, ", ")),
				"mokutil --import "+k.File+" (then reboot and confirm it at the console)")
		}
	}
}
