package image

import (
	"crypto/x509"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/image/formats"
	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/modkey"
	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/builder/status"
	"github.com/kpreload/kpreload/gpu/cdispec"
	"github.com/kpreload/kpreload/kmodcache/secureboot"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// selectionOf returns the report's decision for a driver, or nil.
func selectionOf(rep *report.Report, driver string) *report.SelectionDriver {
	if rep == nil || rep.Selection == nil {
		return nil
	}
	for i := range rep.Selection.Drivers {
		if rep.Selection.Drivers[i].Driver == driver {
			return &rep.Selection.Drivers[i]
		}
	}
	return nil
}

// TestSecureBootImage builds a GRUB image with --secure-boot from the test
// driver 1.0.0 and 2.0.0, whose recipes name no signing key: the build makes
// the module cache's own key (builder/modkey, as DKMS makes its MOK), builds
// both cells signed with it, and enrolls its certificate. It boots the image
// with UEFI Secure Boot on (OVMF's Secure Boot firmware, SMM, secure pflash)
// through Debian's signed shim, GRUB and kernel, twice, then once with
// Secure Boot off:
//
//  1. With the image's <name>.ovmf-vars.fd (the module key enrolled as a
//     MOK): the report records Secure Boot and lockdown; no version is
//     refused for its signature, and 1.0.0, asked through fw_cfg (which /init
//     reads through qemu_fw_cfg, lockdown closing the I/O ports), loads and
//     binds before the real init.
//  2. With Microsoft's keys only: the boot reaches its default target, no
//     driver loads, and the console and report name the missing certificate
//     and the mokutil command that enrolls it.
//  3. Plain OVMF, Secure Boot off: the report says so, nothing is enforced
//     and the newest version, 2.0.0, loads.
func TestSecureBootImage(t *testing.T) {
	ctx, kpreload, initBin, progress := e2eStart(t, "mmdebstrap, two dkms builds and three TCG boots", 40*time.Minute)

	var recipes []*recipe.Recipe
	for _, f := range []string{"testdriver.yaml", "testdriver-2.yaml"} {
		r, err := recipe.Load(filepath.Join(testenv.RepoRoot(t), "recipes", f))
		if err != nil {
			t.Fatal(err)
		}
		if r.Signing != nil {
			t.Fatalf("recipe %s names a signing key: this test proves the build's own", f)
		}
		recipes = append(recipes, r)
	}
	cache := t.TempDir()
	dir := t.TempDir()
	want11 := filepath.Join(dir, "v1.yaml")
	if err := os.WriteFile(want11, []byte("resources:\n  driver:\n    version: \"1\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmdline := "console=ttyS0 panic=-1 kpreload.report=" + qemu.ReportDevice
	m, err := Build(ctx, Options{
		Name: "sb", OutDir: out, Kernels: []string{testKernel},
		Stage: stage.Options{
			Recipes: recipes, CacheDir: cache, BuildMissing: true, KpreloadBinary: kpreload, InitBinary: initBin,
		},
		Boot:    bootloader.Options{Loader: install.GRUB, SecureBoot: true, Cmdline: cmdline},
		Disk:    disk.Options{SizeMB: 1024, ESPSizeMB: 64},
		Formats: []string{formats.Raw}, TempDir: t.TempDir(), Progress: progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	k := m.ModuleKey
	if !m.SecureBoot || k == nil {
		t.Fatalf("manifest secure_boot %v, module_key %+v: want both", m.SecureBoot, k)
	}
	auto, err := modkey.Load(cache)
	if err != nil {
		t.Fatalf("the build made no module signing key in the cache: %v", err)
	}
	cert := auto.Certificate
	der, err := os.ReadFile(k.DER)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := x509.ParseCertificate(der); err != nil || !got.Equal(cert) || k.Subject != modkey.CommonName {
		t.Errorf("%s: %v, subject %q: want the cache's module key in DER", k.DER, err, k.Subject)
	}
	if pemCert, err := bootloader.ReadCertificate(k.PEM); err != nil || !pemCert.Equal(cert) {
		t.Errorf("%s: %v: want the cache's module key in PEM", k.PEM, err)
	}
	if k.InImage != secureboot.KeyFile(k.SigKey) || k.SigKey != auto.SigKey() {
		t.Errorf("module key in the image at %s (sig_key %s), want %s", k.InImage, k.SigKey, secureboot.KeyFile(auto.SigKey()))
	}
	// The private key stays in the cache: the image holds only the certificate.
	if st, err := os.Stat(auto.Key); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v, want mode 0600", auto.Key, err)
	}
	// The variable store holds the certificate as a MOK (virt-fw-vars reads it back).
	if b, err := exec.Command("virt-fw-vars", "--input", k.OVMFVars, "--print").CombinedOutput(); err != nil || !strings.Contains(string(b), "MokList") {
		t.Errorf("virt-fw-vars --print %s: %v; want a MokList:\n%s", k.OVMFVars, err, b)
	}

	boot := func(name, firmware, vars string, fwcfg map[string]string) (*qemu.Result, string) {
		t.Helper()
		res, err := (&qemu.Runner{WorkDir: t.TempDir()}).Run(ctx, qemu.Config{
			Firmware: firmware, OVMFVars: vars, RootDisk: m.Files[0].Path, Snapshot: true,
			Devices: []string{"edu"}, FwCfg: fwcfg, Until: defaultTarget, UntilUp: true, Timeout: testenv.Deadline(t, 420*time.Second),
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: booted to %q in %s", name, res.UntilMatch, res.Duration.Round(time.Second))
		console, _ := os.ReadFile(res.Console)
		for _, l := range strings.Split(string(console), "\n") {
			if strings.Contains(l, "Secure boot") || strings.Contains(l, "locked down") || strings.Contains(l, "MokListRT") ||
				strings.Contains(l, "kpreload: ") || strings.Contains(l, "kpreload-edu") {
				t.Logf("%s: console: %s", name, strings.TrimSpace(l))
			}
		}
		if res.Report == nil {
			t.Fatalf("%s: no report; console %s", name, res.Console)
		}
		sb := res.Report.SecureBoot
		if firmware != qemu.FirmwareUEFISecure {
			if sb == nil || sb.SecureBoot != secureboot.Disabled || sb.Enforced {
				t.Errorf("%s: report secure_boot %+v, want disabled, nothing enforced", name, sb)
			}
			// The image was built for Secure Boot: the report names the fault.
			if sb == nil || !sb.Expected || !strings.Contains(sb.Fault, "built for Secure Boot") || !slices.Contains(res.Report.Warnings, sb.Fault) ||
				!strings.Contains(string(console), "kpreload: warning: this image was built for Secure Boot") {
				t.Errorf("%s: secure_boot %+v, warnings %q: want the fault in both and on the console", name, sb, res.Report.Warnings)
			}
			return res, string(console)
		}
		if sb == nil || !sb.Expected || sb.Fault != "" {
			t.Errorf("%s: secure_boot %+v: want expected, no fault", name, sb)
		}
		for _, want := range []string{"Secure boot enabled", "Kernel is locked down"} {
			if !strings.Contains(string(console), want) {
				t.Errorf("%s: console lacks the kernel's %q (%s)", name, want, res.Console)
			}
		}
		if sb == nil || sb.SecureBoot != secureboot.Enabled || sb.Lockdown != "integrity" || !sb.Enforced || len(sb.Keys) == 0 {
			t.Errorf("%s: report secure_boot %+v, want enabled, lockdown integrity, enforced, the keyrings' certificates", name, sb)
		}
		return res, string(console)
	}

	// 1. The module key enrolled.
	res, _ := boot("boot 1 (MOK enrolled)", qemu.FirmwareUEFISecure, k.OVMFVars, map[string]string{"kpreload/instance.yaml": want11})
	checkImageBoot(t, res, testKernel, "root=UUID="+m.RootUUID+" ro "+secureboot.ExpectFlag+"="+secureboot.ExpectValue+" "+cmdline)
	d := selectionOf(res.Report, "kpreload-edu")
	if d == nil || d.Chosen == nil || d.Chosen.Version != "1.0.0" {
		t.Fatalf("boot 1: kpreload-edu decision %+v, want 1.0.0 chosen", d)
	}
	if res.Report.Selection.Source != "fw_cfg" {
		t.Errorf("boot 1: request from %q, want fw_cfg (read through qemu_fw_cfg under lockdown)", res.Report.Selection.Source)
	}
	for _, c := range d.Candidates {
		if c.Excluded == "signature" {
			t.Errorf("boot 1: %s excluded by the signature rule (%s), want every version signed by the enrolled key", c.Version, c.Reason)
		}
	}
	for _, mod := range res.Report.Modules {
		if mod.Name == "kpreload_edu" && mod.Result != "loaded" {
			t.Errorf("boot 1: a kpreload_edu was handed to the loader and %s: %+v", mod.Result, mod)
		}
	}
	if !strings.Contains(strings.Join(eventsOf(res.Report), "\n"), "fw_cfg through its I/O ports") {
		t.Errorf("boot 1: the report does not say fw_cfg's I/O ports were closed: %v", eventsOf(res.Report))
	}
	// What the machine says of itself (kpreload status --json, on the
	// report channel before kpreload-up.service's record): the driver /init
	// activated and the request it came from, the CDI spec matching it,
	// Secure Boot on with lockdown and the module key enrolled, the default
	// kernel with both versions' cells, and no problem.
	st := liveStatus(t, "boot 1", res)
	if d := st.Driver; d == nil || d.Driver != "kpreload-edu" || d.Version != "1.0.0" || d.Flavor != "open" || d.By != "init" || len(d.NotLoaded) != 0 {
		t.Errorf("boot 1: status driver %+v, want kpreload-edu 1.0.0 (open) activated by /init, its module loaded", d)
	}
	if r := st.Request; r == nil || r.Source != "fw_cfg" || r.Version != "1" {
		t.Errorf("boot 1: status request %+v, want version 1 from fw_cfg", r)
	}
	if c := st.CDI; c == nil || c.State != cdispec.SpecMatches || c.File != cdispec.EduSpecFile {
		t.Errorf("boot 1: status cdi %+v, want %s matching the loaded driver", c, cdispec.EduSpecFile)
	}
	if sb := st.SecureBoot; sb == nil || sb.State != secureboot.Enabled || sb.Lockdown != "integrity" || !sb.Enforced || !sb.Expected ||
		len(sb.Keys) != 1 || sb.Keys[0].File != k.InImage || !sb.Keys[0].Enrolled ||
		!slices.Contains(sb.Keys[0].Sets, "kpreload-edu 1.0.0 (open)") || !slices.Contains(sb.Keys[0].Sets, "kpreload-edu 2.0.0 (open)") {
		t.Errorf("boot 1: status secure_boot %+v, want enabled, lockdown integrity, enforced, expected, the module key %s enrolled for both versions", sb, k.InImage)
	}
	if !st.Booted || st.RunningKernel != testKernel || st.Default != testKernel || len(st.Kernels) != 1 ||
		!slices.Contains(st.Kernels[0].Drivers, "kpreload-edu 1.0.0 (open)") || !slices.Contains(st.Kernels[0].Drivers, "kpreload-edu 2.0.0 (open)") {
		t.Errorf("boot 1: status booted %v on %q, default %q, kernels %+v: want %s the default, with both versions' cells", st.Booted, st.RunningKernel, st.Default, st.Kernels, testKernel)
	}
	if len(st.Problems) != 0 {
		t.Errorf("boot 1: status problems %+v, want none", st.Problems)
	}

	// 2. Microsoft's keys only: the module key is not enrolled.
	res, console := boot("boot 2 (no MOK)", qemu.FirmwareUEFISecure, qemu.SecureBootVars, nil)
	d = selectionOf(res.Report, "kpreload-edu")
	if d == nil || d.Chosen != nil {
		t.Fatalf("boot 2: kpreload-edu decision %+v, want a refusal", d)
	}
	enroll := "mokutil --import " + k.InImage
	for _, c := range d.Candidates {
		if c.Excluded != "signature" || !strings.Contains(c.Reason, `signed by "`+modkey.CommonName+`"`) || !strings.Contains(c.Reason, enroll) {
			t.Errorf("boot 2: %s excluded by %q (%s), want the signature rule naming the key and %q", c.Version, c.Excluded, c.Reason, enroll)
		}
	}
	if !strings.Contains(console, enroll) {
		t.Errorf("boot 2: the console does not name %q", enroll)
	}
	for _, mod := range res.Report.Modules {
		if mod.Name == "kpreload_edu" {
			t.Errorf("boot 2: kpreload_edu was handed to the loader: %+v", mod)
		}
	}
	// Its status: no driver, the key not on any keyring, and both problems
	// with their fixes, the enrolling one the command the console named.
	st = liveStatus(t, "boot 2", res)
	if st.Driver != nil || st.SecureBoot == nil || len(st.SecureBoot.Keys) != 1 || st.SecureBoot.Keys[0].Enrolled {
		t.Errorf("boot 2: status driver %+v, secure_boot %+v: want no driver and the module key not enrolled", st.Driver, st.SecureBoot)
	}
	if !slices.ContainsFunc(st.Problems, func(p status.Problem) bool { return p.Fix == enroll+" (then reboot and confirm it at the console)" }) ||
		!slices.ContainsFunc(st.Problems, func(p status.Problem) bool {
			return strings.HasPrefix(p.What, "no driver is active: no kpreload-edu driver will be loaded: ") &&
				strings.HasSuffix(p.What, "; nothing cached would work while the kernel enforces module signatures: sign the driver's modules (a recipe's signing: key) and enroll that certificate as a Machine Owner Key") &&
				strings.HasPrefix(p.Fix, "enroll the modules' signing key")
		}) {
		t.Errorf("boot 2: status problems %+v, want the key to enroll (%s), and no driver active until it is", st.Problems, enroll)
	}

	// 3. The same image where Secure Boot is off (plain OVMF): nothing is
	// enforced, so the newest version, 2.0.0, loads.
	res, _ = boot("boot 3 (Secure Boot off)", qemu.FirmwareUEFI, "", nil)
	checkImageBoot(t, res, testKernel, "root=UUID="+m.RootUUID+" ro "+secureboot.ExpectFlag+"="+secureboot.ExpectValue+" "+cmdline)
	if d := selectionOf(res.Report, "kpreload-edu"); d == nil || d.Chosen == nil || d.Chosen.Version != "2.0.0" {
		t.Errorf("boot 3: kpreload-edu decision %+v, want 2.0.0 (the newest)", d)
	}
	// Its status: 2.0.0 active, Secure Boot off, and one problem: the image
	// was built for it.
	st = liveStatus(t, "boot 3", res)
	if d := st.Driver; d == nil || d.Version != "2.0.0" || st.SecureBoot == nil || st.SecureBoot.State != secureboot.Disabled || !st.SecureBoot.Expected || st.SecureBoot.Enforced {
		t.Errorf("boot 3: status driver %+v, secure_boot %+v: want 2.0.0 active, Secure Boot disabled, expected, nothing enforced", d, st.SecureBoot)
	}
	if len(st.Problems) != 1 || !strings.Contains(st.Problems[0].What, "built for Secure Boot") || st.Problems[0].Fix != "turn Secure Boot on in the instance's firmware" {
		t.Errorf("boot 3: status problems %+v, want the one that Secure Boot is off in an image built for it", st.Problems)
	}
}

// liveStatus is what `kpreload status --json` said of the machine a boot
// brought up: the line kpreload-up.service writes on the report channel
// just before its up record, which ended the boot (qemu.Result.Status).
func liveStatus(t *testing.T, name string, res *qemu.Result) *status.Status {
	t.Helper()
	raw := res.Status
	if raw == nil {
		t.Fatalf("%s: no %q line on the report channel (%s); the boot ended by %q", name, report.StatusPrefix, res.ReportLog, res.UntilMatch)
	}
	t.Logf("%s: kpreload status: %s", name, raw)
	var st status.Status
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatalf("%s: status line: %v", name, err)
	}
	return &st
}

// eventsOf returns the texts of a report's events.
func eventsOf(rep *report.Report) []string {
	var out []string
	for _, e := range rep.Events {
		out = append(out, e.What)
	}
	return out
}
