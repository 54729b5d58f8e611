package status

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/cdispec"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/treetest"
)

const (
	k1 = "6.1.0-56-cloud-amd64"
	k2 = "6.1.0-55-cloud-amd64"
	// sigKey signs the test driver's module; keyID is it as /proc/keys writes it.
	sigKey = "3A:4B:5C:6D:7E:8F"
	keyID  = "3a4b5c6d7e8f"
	signer = "kpreload module key"
)

var (
	set1 = strings.Repeat("1a", 32)
	set2 = strings.Repeat("2b", 32)
)

// index is a boot index of kernel with the test driver's sets, 1.0.0 and
// 2.0.0, both open and signed by signer.
func index(t *testing.T, kernel string, sets ...map[string]any) string {
	t.Helper()
	if sets == nil {
		for _, s := range []struct{ id, version string }{{set1, "1.0.0"}, {set2, "2.0.0"}} {
			sets = append(sets, map[string]any{"id": s.id, "driver": "kpreload-edu", "version": s.version, "flavor": "open", "dir": "../objects/sha256",
				"modules": []map[string]any{{"name": "kpreload_edu", "path": "kpreload_edu.ko", "sha256": strings.Repeat("0", 64), "vermagic": kernel + " SMP", "signer": signer, "sig_key": sigKey}}})
		}
	}
	b, err := json.Marshal(map[string]any{"format": 1, "kernel": kernel, "sets": sets})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// bootReport is /init's report of a boot of k1 that activated the test
// driver 1.0.0 asked through fw_cfg.
func bootReport() *report.Report {
	return &report.Report{Format: 1, Kernel: k1, Cmdline: "root=/dev/vda2 ro",
		Selection: &report.Selection{Source: "fw_cfg", Origin: "fw_cfg opt/kpreload/instance.yaml (I/O ports)",
			Request: report.SelectionRequest{Version: "1.0.0", Flavor: "auto"}, Kernel: k1,
			Drivers: []report.SelectionDriver{{Driver: "kpreload-edu", Requested: true, Rule: "exact 1.0.0",
				Chosen: &report.SelectionCandidate{ID: set1, Version: "1.0.0", Flavor: "open", From: "rootfs"}, Loaded: true, Active: true}}}}
}

// machine is a booted kpreload machine's root, as the cases change it.
type machine struct {
	files  map[string]string
	links  map[string]string
	report *report.Report // nil: no boot report
	spec   bool           // write the CDI spec as kpreload-cdi.service does
	later  map[string]string
}

// healthy is a machine that booted k1 through kpreload's /init with the
// test driver 1.0.0 active, its module loaded, its CDI spec written,
// Secure Boot off on UEFI and the signing key on a keyring; k2 is older,
// with cells too.
func healthy(t *testing.T) *machine {
	return &machine{files: map[string]string{
		"boot/vmlinuz-" + k1: "k", "boot/kpreload/initrd.img-" + k1: "i", "lib/modules/" + k1 + "/modules.dep": "",
		"boot/vmlinuz-" + k2: "k", "boot/kpreload/initrd.img-" + k2: "i", "lib/modules/" + k2 + "/modules.dep": "",
		"var/lib/kpreload/cache/index/" + k1 + ".json": index(t, k1),
		"var/lib/kpreload/cache/index/" + k2 + ".json": index(t, k2),
		"run/kpreload/ready": `{"format":1,"driver":"kpreload-edu","version":"1.0.0","flavor":"open","set":"` + set1 + `","kernel":"` + k1 +
			`","time":4.2,"modules":["kpreload_edu"],"userspace":"/opt/kpreload/drivers/1.0.0","by":"init"}`,
		"sys/module/kpreload_edu/initstate":                                            "live\n",
		"sys/class/misc/kpreload-edu0/dev":                                             "10:125\n",
		"opt/kpreload/drivers/1.0.0/usr/lib/x86_64-linux-gnu/libkpreload_edu.so.1.0.0": "lib",
		"sys/firmware/efi/fw_platform_size":                                            "64\n",
		"sys/kernel/boot_params/data":                                                  strings.Repeat("\x00", 0x1ec) + "\x02",
		"sys/kernel/security/lockdown":                                                 "[none] integrity confidentiality\n",
		"proc/cmdline":                                                                 "root=/dev/vda2 ro\n",
		"proc/keys":                                                                    "0a7b1c2d I------     1 perm 1f030000     0     0 asymmetri " + signer + ": " + keyID + ": X509.rsa " + keyID[:8] + " []\n",
	}, links: map[string]string{"run/kpreload/driver": "/opt/kpreload/drivers/1.0.0"}, report: bootReport(), spec: true}
}

// write makes the machine's tree and returns its root.
func (m *machine) write(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{}
	for p, s := range m.files {
		files[p] = s
	}
	if m.report != nil {
		b, err := json.Marshal(m.report)
		if err != nil {
			t.Fatal(err)
		}
		files["run/kpreload/report.json"] = string(b)
	}
	treetest.Write(t, root, files)
	treetest.Links(t, root, m.links)
	if m.spec {
		if _, err := cdispec.RefreshActive(root, cdispec.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	treetest.Write(t, root, m.later) // after the refresh, which would set them right
	return root
}

// problemLines are the problems as "what; fix: FIX", as status prints them.
func problemLines(s *Status) []string {
	var out []string
	for _, p := range s.Problems {
		out = append(out, p.What+"; fix: "+p.Fix)
	}
	return out
}

// TestRead: each field of a booted machine's status, and each problem line
// with its fix, from fake trees.
func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(m *machine)
		running bool
		// got is the field checked, in words.
		got  func(s *Status) string
		want string
		// problems are substrings of the problem lines, one each, in order.
		problems []string
	}{
		{"active driver", nil, true, func(s *Status) string {
			d := s.Driver
			return strings.Join([]string{d.Driver, d.Version, d.Flavor, d.Set[:4], d.By, d.Userspace, strings.Join(d.Modules, ",")}, " ")
		}, "kpreload-edu 1.0.0 open 1a1a init /opt/kpreload/drivers/1.0.0 kpreload_edu", nil},
		{"request", nil, true, func(s *Status) string {
			r := s.Request
			return strings.Join([]string{r.Source, r.Origin, r.Version, r.Flavor}, "|")
		}, "fw_cfg|fw_cfg opt/kpreload/instance.yaml (I/O ports)|1.0.0|auto", nil},
		{"request switched by user-data", func(m *machine) {
			m.report.UserData = &report.UserData{Origin: "/var/lib/cloud/instance/cloud-config.txt", Action: "switched", Reason: "asked 2.0.0", Driver: "kpreload-edu", From: "1.0.0", To: "2.0.0"}
		}, true, func(s *Status) string {
			r := s.Request
			return strings.Join([]string{r.Source, r.Origin, r.Version, r.UserData.Action}, "|")
		}, "user-data|/var/lib/cloud/instance/cloud-config.txt|2.0.0|switched", nil},
		{"cdi matches", nil, true, func(s *Status) string { return s.CDI.State + " " + s.CDI.File }, "matches " + cdispec.EduSpecFile, nil},
		{"default kernel and cells", nil, true, func(s *Status) string {
			var ks []string
			for _, k := range s.Kernels {
				ks = append(ks, k.Release+"="+strings.Join(k.Drivers, ","))
			}
			return s.Default + " (" + s.DefaultWhy + ") " + strings.Join(ks, " ")
		}, k1 + " (the newest kernel with its driver cells) " + k1 + "=kpreload-edu 1.0.0 (open),kpreload-edu 2.0.0 (open) " + k2 + "=kpreload-edu 1.0.0 (open),kpreload-edu 2.0.0 (open)", nil},
		{"each version once with its flavours", func(m *machine) {
			mod := []map[string]any{{"name": "nvidia", "path": "nvidia.ko", "sha256": strings.Repeat("0", 64), "vermagic": k2}}
			m.files["var/lib/kpreload/cache/index/"+k2+".json"] = index(t, k2,
				map[string]any{"id": set1, "driver": "nvidia", "version": "550.163.01", "flavor": "open", "dir": "d", "modules": mod},
				map[string]any{"id": set2, "driver": "nvidia", "version": "550.163.01", "flavor": "proprietary", "dir": "d", "modules": mod})
		}, true, func(s *Status) string {
			return strings.Join(s.Kernels[1].Drivers, ", ") + " / " + strconv.Itoa(len(s.Kernels[1].Sets)) + " sets"
		},
			"nvidia 550.163.01 (open, proprietary) / 2 sets", nil},
		{"secure boot off, key enrolled", nil, true, func(s *Status) string {
			sb := s.SecureBoot
			return sb.State + " " + sb.Lockdown + " enforced=" + strconv.FormatBool(sb.Enforced) + " " + sb.Keys[0].File + " enrolled=" + strconv.FormatBool(sb.Keys[0].Enrolled) + " " + strings.Join(sb.Keys[0].Sets, ",")
		}, "disabled none enforced=false /usr/share/kpreload/module-keys/" + keyID + ".der enrolled=true kpreload-edu 1.0.0 (open),kpreload-edu 2.0.0 (open)", nil},
		{"healthy: no problems", nil, true, func(s *Status) string { return strconv.Itoa(len(s.Problems)) }, "0", nil},

		// Each problem line and its fix.
		{"module not loaded", func(m *machine) { delete(m.files, "sys/module/kpreload_edu/initstate") }, true,
			func(s *Status) string { return strings.Join(s.Driver.NotLoaded, ",") }, "kpreload_edu",
			[]string{"kpreload-edu 1.0.0 is recorded active, but its module(s) kpreload_edu are not loaded; fix: kpreload switch 1.0.0"}},
		{"no driver active", func(m *machine) { delete(m.files, "run/kpreload/ready"); m.spec = false }, true,
			func(s *Status) string { return strconv.FormatBool(s.Driver == nil) + " " + s.CDI.State }, "true none",
			[]string{"no driver is active: kpreload-edu 1.0.0 was chosen at boot but did not become active; fix: kpreload switch 1.0.0"}},
		{"refused at boot", func(m *machine) {
			delete(m.files, "run/kpreload/ready")
			m.spec = false
			d := &m.report.Selection.Drivers[0]
			d.Chosen, d.Loaded, d.Active, d.Refusal = nil, false, false, "no kpreload-edu driver will be loaded: asked latest, flavour proprietary; the cache holds ...; would work on this machine: 2.0.0 open, 1.0.0 open (e.g. kpreload.driver=2.0.0)"
		}, true, func(s *Status) string { return strconv.FormatBool(s.Driver == nil) }, "true",
			[]string{"no driver is active: no kpreload-edu driver will be loaded: asked latest, flavour proprietary; would work on this machine: 2.0.0 open, 1.0.0 open (e.g. kpreload.driver=2.0.0); fix: kpreload switch 2.0.0"}},
		{"refused at boot, nothing would work", func(m *machine) {
			delete(m.files, "run/kpreload/ready")
			m.spec = false
			d := &m.report.Selection.Drivers[0]
			d.Chosen, d.Loaded, d.Active, d.Refusal = nil, false, false, "no kpreload-edu driver will be loaded: asked latest, flavour auto; the cache holds ...; no cached version supports GPU x"
		}, true, func(s *Status) string { return strconv.FormatBool(s.Driver == nil) }, "true",
			[]string{"no driver is active: no kpreload-edu driver will be loaded: asked latest, flavour auto; no cached version supports GPU x; fix: kpreload plan --sysfs / --cache /var/lib/kpreload/cache --kernel " + k1 + " (what would load, and why not), then build that driver"}},
		{"cdi spec missing", func(m *machine) { m.spec = false }, true, func(s *Status) string { return s.CDI.State }, "missing",
			[]string{"the CDI spec of kpreload-edu 1.0.0: no spec at " + cdispec.EduSpecFile + "; fix: kpreload cdi refresh"}},
		{"cdi spec of a driver not active", func(m *machine) {
			m.later = map[string]string{strings.TrimPrefix(cdispec.DefaultSpecFile, "/"): string(cdispec.Mark([]byte("old\n")))}
		}, true, func(s *Status) string { return s.CDI.State + " " + strings.Join(s.CDI.Stale, ",") }, "matches " + cdispec.DefaultSpecFile,
			[]string{cdispec.DefaultSpecFile + " is kpreload's CDI spec of a driver that is not active; fix: kpreload cdi refresh"}},
		{"a foreign spec of the same device names", func(m *machine) {
			m.later = map[string]string{"var/run/cdi/other.yaml": "cdiVersion: 0.5.0\nkind: kpreload.dev/edu\ndevices:\n  - name: all\n    containerEdits:\n      deviceNodes:\n        - path: /dev/null\n"}
		}, true, func(s *Status) string { return s.CDI.State }, "matches",
			[]string{"or stop NVIDIA's nvidia-cdi-refresh); fix: remove the other spec, or for NVIDIA's set \"nvidia: false\" in /etc/kpreload/cdi.yaml and run kpreload cdi refresh"}},
		{"kernel without cells", func(m *machine) { delete(m.files, "var/lib/kpreload/cache/index/"+k2+".json") }, true,
			func(s *Status) string { return strconv.Itoa(len(s.Kernels[1].Sets)) }, "0",
			[]string{"kernel " + k2 + " has no driver cells: kpreload boots it without a GPU driver; fix: kpreload kernel-hook refresh"}},
		{"kernel without kpreload initramfs", func(m *machine) { delete(m.files, "boot/kpreload/initrd.img-"+k2) }, true,
			func(s *Status) string { return strconv.FormatBool(s.Kernels[1].Initramfs) }, "false",
			[]string{"kernel " + k2 + " has no kpreload initramfs: it boots only with the distribution's; fix: kpreload kernel-hook postinst " + k2}},
		{"built for Secure Boot, booted without", func(m *machine) {
			m.files["proc/cmdline"] = "root=/dev/vda2 ro kpreload.secureboot=expected\n"
		}, true, func(s *Status) string { return strconv.FormatBool(s.SecureBoot.Expected) }, "true",
			[]string{"this image was built for Secure Boot (kpreload.secureboot=expected), but Secure Boot is disabled: the kernel does not check module signatures and the boot goes on; turn Secure Boot on for the instance (UEFI firmware with Secure Boot: GCE Shielded VM, Azure Trusted Launch, EC2 UEFI Secure Boot, kpreload boot --firmware uefi-secure); fix: turn Secure Boot on in the instance's firmware"}},
		{"signatures enforced, key not enrolled", func(m *machine) {
			m.files["sys/kernel/boot_params/data"] = strings.Repeat("\x00", 0x1ec) + "\x03"
			m.files["sys/kernel/security/lockdown"] = "none [integrity] confidentiality\n"
			m.files["proc/keys"] = "0a7b1c2d I------     1 perm 1f030000     0     0 asymmetri Debian Secure Boot CA: 6ccece7e4c6c0d1f6149f3dd27dfcc5cbb419ea1: X509.rsa 6ccece7e []\n"
		}, true, func(s *Status) string {
			return s.SecureBoot.State + " " + s.SecureBoot.Lockdown + " enforced=" + strconv.FormatBool(s.SecureBoot.Enforced) + " enrolled=" + strconv.FormatBool(s.SecureBoot.Keys[0].Enrolled)
		}, "enabled integrity enforced=true enrolled=false",
			[]string{`the kernel enforces module signatures and no keyring holds "kpreload module key" (sig_key ` + sigKey + `), which signs kpreload-edu 1.0.0 (open), kpreload-edu 2.0.0 (open); fix: mokutil --import /usr/share/kpreload/module-keys/` + keyID + `.der (then reboot and confirm it at the console)`}},
		{"errors in the boot report", func(m *machine) { m.report.Errors = []string{"instance request from cmdline: bad flavour"} }, true,
			func(s *Status) string { return "" }, "",
			[]string{"/init recorded 1 error(s) in its boot report, the first: instance request from cmdline: bad flavour; fix: kpreload report"}},
		{"not booted through kpreload", func(m *machine) { m.report = nil; m.spec = false }, true,
			func(s *Status) string {
				return strconv.FormatBool(s.Booted) + strconv.FormatBool(s.Driver == nil) + strconv.FormatBool(s.SecureBoot == nil)
			}, "falsetruetrue",
			[]string{"this boot did not come through kpreload's /init (no /run/kpreload/report.json); fix: reboot: the boot loader's default entry boots kpreload (kernel " + k1 + ")"}},
		{"booted from a kernel handed to QEMU, never installed", func(m *machine) {
			for p := range m.files {
				if strings.HasPrefix(p, "boot/") {
					delete(m.files, p)
				}
			}
		}, true, func(s *Status) string { return s.Default + "|" + s.Driver.Version }, "|1.0.0", nil},
		{"an image's root", func(m *machine) { m.report = nil; m.spec = false }, false,
			func(s *Status) string { return strconv.FormatBool(s.Booted) + " " + s.Default }, "false " + k1, nil},
		{"no kernel boots kpreload", func(m *machine) {
			m.report = nil
			m.spec = false
			delete(m.files, "boot/vmlinuz-"+k1)
			delete(m.files, "boot/vmlinuz-"+k2)
		}, false, func(s *Status) string { return s.Default }, "",
			[]string{"no kernel has both its image and a kpreload initramfs: nothing boots kpreload; fix: kpreload install --root "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := healthy(t)
			if tc.change != nil {
				tc.change(m)
			}
			root := m.write(t)
			s, err := Read(Options{Root: root, Running: tc.running})
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.got(s); got != tc.want {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
			lines := problemLines(s)
			if len(lines) != len(tc.problems) {
				t.Errorf("problems %q\nwant %d: %q", lines, len(tc.problems), tc.problems)
			}
			for _, want := range tc.problems {
				if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, want) }) {
					t.Errorf("problems %q\nlack %q", lines, want)
				}
			}
			if _, err := json.Marshal(s); err != nil {
				t.Errorf("--json: %v", err)
			}
		})
	}
}

// TestReadErrors: a root that is not there, and one kpreload neither
// installed into nor booted (here or as the running system), are errors
// that say so and what to run.
func TestReadErrors(t *testing.T) {
	empty := t.TempDir()
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		o       Options
		notOurs bool
		want    string
	}{
		{"no such root", Options{Root: filepath.Join(empty, "absent")}, false, "no such file or directory"},
		{"a file", Options{Root: notDir}, false, "not a directory"},
		{"not a kpreload root", Options{Root: empty}, true, "has no /boot/kpreload (`kpreload install --root " + empty + "` makes it boot kpreload)"},
		{"the running system without kpreload", Options{Root: empty, Running: true}, true, "kpreload is not installed on this system (no /boot/kpreload) and it did not boot through kpreload's /init"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Read(tc.o)
			if err == nil || s != nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrNotKpreload) != tc.notOurs {
				t.Errorf("Read = %v, %v; want an error containing %q (ErrNotKpreload: %v)", s, err, tc.want, tc.notOurs)
			}
		})
	}
}

// TestShortRefusal: the refusal a Secure Boot VM's /init recorded (its
// module key not enrolled), and others, lose the list of what the cache
// holds and keep what was asked and what would work, or why nothing would.
func TestShortRefusal(t *testing.T) {
	for _, tc := range []struct{ refusal, want string }{
		{"no kpreload-edu driver will be loaded: asked latest, flavour auto, kernel 6.1.0-56-cloud-amd64; the cache holds 1.0.0 open (signature: module kpreload_edu is signed by \"kpreload module signing key\" (sig_key 0E:31:73:F6:B3:4C:A9:A4:4F:FD:27:D4:23:EF:C0:23), which no kernel keyring holds, and Secure Boot is on (lockdown integrity): enroll that certificate as a Machine Owner Key with `mokutil --import /usr/share/kpreload/module-keys/0e3173f6b34ca9a44ffd27d423efc023.der`, reboot and confirm it at the console (MokManager)); 2.0.0 open (signature: module kpreload_edu is signed by \"kpreload module signing key\" (sig_key 0E:31:73:F6:B3:4C:A9:A4:4F:FD:27:D4:23:EF:C0:23), which no kernel keyring holds, and Secure Boot is on (lockdown integrity): enroll that certificate as a Machine Owner Key with `mokutil --import /usr/share/kpreload/module-keys/0e3173f6b34ca9a44ffd27d423efc023.der`, reboot and confirm it at the console (MokManager)); nothing cached would work while the kernel enforces module signatures: sign the driver's modules (a recipe's signing: key) and enroll that certificate as a Machine Owner Key",
			"no kpreload-edu driver will be loaded: asked latest, flavour auto, kernel 6.1.0-56-cloud-amd64; nothing cached would work while the kernel enforces module signatures: sign the driver's modules (a recipe's signing: key) and enroll that certificate as a Machine Owner Key"},
		{"no nvidia driver will be loaded: asked branch 550, flavour open, kernel k; the cache holds 535.261.03 open (version: asked branch 550); would work on this machine: 535.261.03 open (e.g. kpreload.driver=535.261.03)",
			"no nvidia driver will be loaded: asked branch 550, flavour open, kernel k; would work on this machine: 535.261.03 open (e.g. kpreload.driver=535.261.03)"},
		{"something else entirely", "something else entirely"},
	} {
		if got := shortRefusal(tc.refusal); got != tc.want {
			t.Errorf("shortRefusal(%q)\n = %q\nwant %q", tc.refusal, got, tc.want)
		}
	}
}
