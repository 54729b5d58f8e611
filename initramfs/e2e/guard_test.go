package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/initramfs/pid1"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// eduEntries returns the report's kpreload_edu entries.
func eduEntries(rep *report.Report) []report.Module {
	var out []report.Module
	for _, m := range rep.Modules {
		if m.Name == "kpreload_edu" {
			out = append(out, m)
		}
	}
	return out
}

// kmsgTime returns the time of the first root-init kernel log line holding s.
func kmsgTime(root *report.RootInit, s string) (float64, bool) {
	for _, l := range root.Kmsg {
		if strings.Contains(l.Text, s) {
			return l.Time, true
		}
	}
	return 0, false
}

// TestLoadDeadline: a driver whose init blocks (the test driver's probe
// sleeps 12 s, uninterruptibly, as a GPU that never answers) cannot hold the
// boot: with kpreload.load_timeout=2 /init records it as still loading after
// 2 s and hands over; the root's /sbin/init runs while the probe still
// sleeps, and the kernel still has the module in its "coming" state. (It is
// also the fault campaign's "module whose init blocks" row.)
func TestLoadDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("QEMU boot; -short")
	}
	b, con := bootSelect(t, selectBoot{onRoot: true, append: "kpreload.driver=1.0.0 kpreload.load_timeout=2 kpreload_edu.probe_delay_ms=12000"})
	edu := eduEntries(b.rep)
	if len(edu) != 1 || edu[0].Result != "still loading" || !strings.Contains(edu[0].Reason, "kpreload.load_timeout") {
		t.Fatalf("kpreload_edu entries %+v, want one still loading after the deadline", edu)
	}
	if d := edu[0].End - edu[0].Start; d < 1.5 || d > 10 {
		t.Errorf("the load was given up after %.1fs, want about the 2 s deadline", d)
	}
	if !strings.Contains(b.rep.Summary(), "1 still loading") {
		t.Errorf("summary %q does not say a module is still loading", b.rep.Summary())
	}
	sleep, ok := kmsgTime(b.root, "probe sleeps 12000 ms")
	if !ok {
		t.Fatalf("the probe never started sleeping; console:\n%s", con)
	}
	if b.root.Start >= sleep+12 {
		t.Errorf("the root's init started at %.1fs, after the probe's 12 s sleep from %.1fs: the boot waited", b.root.Start, sleep)
	}
	if _, bound := kmsgTime(b.root, "bound, id"); bound {
		t.Errorf("the device was bound before the root's init ran: the probe did not block")
	}
	if !strings.Contains(strings.Join(b.root.Modules, " "), "kpreload_edu") {
		t.Errorf("/proc/modules at the root's init lacks kpreload_edu (still coming): %v", b.root.Modules)
	}
	t.Logf("probe began sleeping at %.2fs, /init gave up at %.2fs, switch_root %.2fs, root init %.2fs", sleep, edu[0].End, b.rep.SwitchRoot, b.root.Start)
}

// TestSignatureEnforcement boots with module.sig_enforce=1: the unsigned test
// driver, and the same driver signed with a recipe key no kernel keyring
// holds, are refused by the driver decision, before the kernel is called,
// with the reason and (for the key) the command that enrolls it; both boots
// reach /sbin/init (the kernel's own, Debian-signed modules load), and the
// report records what the kernel enforces.
func TestSignatureEnforcement(t *testing.T) {
	if testing.Short() {
		t.Skip("QEMU boots; -short")
	}
	check := func(t *testing.T, b booted, con string, wantReason string) {
		t.Helper()
		if sb := b.rep.SecureBoot; sb == nil || !sb.Enforced || !sb.SigEnforce || len(sb.Keys) == 0 {
			t.Errorf("report secure_boot = %+v, want sig_enforce, enforced and the kernel's certificates", sb)
		}
		if edu := eduEntries(b.rep); len(edu) != 0 {
			t.Errorf("kpreload_edu entries %+v, want none: the set must be refused before the loader", edu)
		}
		var d *report.SelectionDriver
		if b.rep.Selection != nil {
			for i := range b.rep.Selection.Drivers {
				if b.rep.Selection.Drivers[i].Driver == "kpreload-edu" {
					d = &b.rep.Selection.Drivers[i]
				}
			}
		}
		if d == nil || d.Chosen != nil || len(d.Candidates) == 0 || !strings.Contains(d.Refusal, "while the kernel enforces module signatures") {
			t.Fatalf("selection of kpreload-edu %+v, want every set excluded by the signature rule (%q)", d, wantReason)
		}
		for _, c := range d.Candidates {
			if c.Excluded != "signature" || !strings.Contains(c.Reason, wantReason) {
				t.Errorf("kpreload-edu %s excluded by %q (%s), want the signature rule (%q)", c.Version, c.Excluded, c.Reason, wantReason)
			}
		}
		if _, seen := kmsgTime(b.root, "kpreload_edu"); seen {
			t.Errorf("the kernel log mentions kpreload_edu: it was handed to the kernel")
		}
		if !strings.Contains(con, "no kpreload-edu driver will be loaded") {
			t.Errorf("the console does not show the refusal")
		}
	}
	t.Run("unsigned", func(t *testing.T) {
		b, con := bootSelect(t, selectBoot{onRoot: true, append: "module.sig_enforce=1 kpreload.driver=1.0.0"})
		check(t, b, con, "module kpreload_edu is unsigned, and module.sig_enforce=1")
		// (Also the fault campaign's "unsigned module, signatures enforced" row.)
		if sel := b.rep.Selection; sel == nil || len(sel.Drivers) != 1 {
			t.Errorf("selection %+v, want the test driver's decision only", sel)
		}
		if !strings.Contains(con, "enforces module signatures") && !strings.Contains(strings.Join(eventTexts(b.rep), "\n"), "enforces module signatures") {
			t.Errorf("neither the console nor the report's events say signatures are enforced")
		}
	})
	t.Run("untrusted key", func(t *testing.T) {
		cache := signedCache(t)
		b, con := bootSelect(t, selectBoot{onRoot: true, cache: cache, append: "module.sig_enforce=1"})
		check(t, b, con, `is signed by "kpreload e2e untrusted"`)
		if !strings.Contains(con, "mokutil --import /usr/share/kpreload/module-keys/") {
			t.Errorf("the console does not name the command that enrolls the key")
		}
	})
}

func eventTexts(rep *report.Report) []string {
	var out []string
	for _, e := range rep.Events {
		out = append(out, e.What)
	}
	return out
}

// signedCache builds the test driver signed with a fresh key (a recipe's
// signing: section) into a cache, with kpreload build.
func signedCache(t *testing.T) string {
	t.Helper()
	kver := kernels[0]
	dir := t.TempDir()
	key, cert := filepath.Join(dir, "key.pem"), filepath.Join(dir, "cert.pem")
	if out, err := exec.Command("openssl", "req", "-new", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "2",
		"-subj", "/CN=kpreload e2e untrusted", "-keyout", key, "-out", cert).CombinedOutput(); err != nil {
		t.Fatalf("openssl: %v\n%s", err, out)
	}
	yml, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	src := strings.Replace(string(yml), "name: testdriver\n", "name: testdriver-signed\nsigning:\n  key: "+key+"\n  cert: "+cert+"\n", 1)
	if out, err := exec.Command("cp", "-rL", filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver"), filepath.Join(dir, "testdriver")).CombinedOutput(); err != nil {
		t.Fatalf("copy the test driver: %v\n%s", err, out)
	}
	recipe := filepath.Join(dir, "testdriver-signed.yaml")
	if err := os.WriteFile(recipe, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := kpreloadBinary(t)
	cache := filepath.Join(dir, "cache")
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 10*time.Minute))
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "build", recipe+":"+kver, "--cache", cache).CombinedOutput()
	if err != nil {
		t.Fatalf("kpreload build of the signed test driver: %v\n%s", err, out)
	}
	return cache
}

// TestEarlyDecision: with both test driver versions in an initramfs whose
// index is marked complete and a request on the command line, /init decides
// before the root is mounted and the chosen set loads while the root is
// found; the report says so, and the driver is active after switch_root.
// kpreload.early=0 keeps today's order (checked in
// TestBootSelectsDriverVersion's last boot); an initramfs not marked
// complete waits for the root (checked in its first boot).
func TestEarlyDecision(t *testing.T) {
	if testing.Short() {
		t.Skip("QEMU boots; -short")
	}
	b, con := bootSelect(t, selectBoot{complete: true, append: "kpreload.driver=1.0.0"})
	events := strings.Join(eventTexts(b.rep), "\n")
	if !strings.Contains(events, "driver selection early, before the root") || !strings.Contains(con, "kpreload: kpreload-edu 1.0.0 open chosen") {
		t.Errorf("events %q: want the early decision", events)
	}
	edu := eduEntries(b.rep)
	if len(edu) != 1 || edu[0].Result != "loaded" || edu[0].Phase != "initramfs-early" {
		t.Fatalf("kpreload_edu %+v, want loaded early", edu)
	}
	if lines := eduLines(b.root); len(lines) != 1 || !strings.Contains(lines[0], "driver version 1.0.0") {
		t.Errorf("bound lines %q", lines)
	}
	if sel := b.rep.Selection; sel == nil || len(sel.Drivers) != 1 || !sel.Drivers[0].Active {
		t.Errorf("selection %+v: want kpreload-edu active", sel)
	}
	t.Logf("early: decision, kpreload_edu loaded %.3f-%.3fs, root mounted %.3fs, switch_root %.3fs", edu[0].Start, edu[0].End, b.rep.Root.Mounted, b.rep.SwitchRoot)
	logTimeline(t, b.rep)

	// A request through fw_cfg, read through the device's I/O ports (found
	// by its ACPI device alone): the early decision takes fw_cfg's 2.0.0
	// and qemu_fw_cfg is not loaded from the initramfs at all. With
	// kpreload.fwcfg=module, qemu_fw_cfg loads first and the request is
	// read from sysfs, as where the ports are closed (lockdown, not x86).
	const fwRequest = "resources:\n  driver:\n    version: 2.0.0\n"
	for _, tc := range []struct {
		name, append, origin string
		moduleFirst          bool
	}{
		{"ports", "", pid1.FwCfgPortsOrigin, false},
		{"module", "kpreload.fwcfg=module", instance.FwCfgPath, true},
	} {
		fw, fwCon := bootSelect(t, selectBoot{complete: true, instance: fwRequest, append: tc.append})
		if e := eduEntries(fw.rep); len(e) != 1 || e[0].Result != "loaded" || e[0].Phase != "initramfs-early" || !strings.Contains(fwCon, "kpreload: kpreload-edu 2.0.0 open chosen") {
			t.Errorf("%s: early decision from fw_cfg: kpreload_edu %+v; want 2.0.0 chosen and loaded early\n%s", tc.name, e, fwCon)
		}
		sel := fw.rep.Selection
		if sel == nil || sel.Source != instance.SourceFwCfg || sel.Origin != tc.origin {
			t.Fatalf("%s: selection %+v, want from %s", tc.name, sel, tc.origin)
		}
		m, ok := moduleResult(fw.rep, "qemu_fw_cfg")
		if tc.moduleFirst && (!ok || m.Result != "loaded" || m.End > sel.Time) || !tc.moduleFirst && ok {
			t.Errorf("%s: qemu_fw_cfg %+v (in the report: %v), selection at %.3f: want it loaded before the decision: %v, else not loaded", tc.name, m, ok, sel.Time, tc.moduleFirst)
		}
		t.Logf("fw_cfg through %s: decision at %.3fs, qemu_fw_cfg %+v", tc.name, sel.Time, m)
	}
	// Bad YAML read through the ports: the request is skipped with its
	// origin and line, the default is used, and the driver still loads early.
	bad, badCon := bootSelect(t, selectBoot{complete: true, instance: "resources: [\n"})
	errs := selectionErrors(bad.rep)
	if sel := bad.rep.Selection; sel == nil || sel.Source != instance.SourceDefault || !strings.Contains(errs, pid1.FwCfgPortsOrigin) || !strings.Contains(errs, "line 1") {
		t.Errorf("bad YAML through fw_cfg's ports: selection %+v, errors %q; want the default and an error naming %q and its line", sel, errs, pid1.FwCfgPortsOrigin)
	}
	if e := eduEntries(bad.rep); len(e) != 1 || e[0].Result != "loaded" || e[0].Phase != "initramfs-early" || bad.root == nil {
		t.Errorf("bad YAML through fw_cfg's ports: kpreload_edu %+v, root init ran: %v; want the default loaded early and the boot to go on\n%s", e, bad.root != nil, badCon)
	}
	t.Logf("bad YAML through fw_cfg's ports: %s", firstLine(errs, ""))

	// kpreload.early=0 with an index marked complete keeps today's order:
	// TestBootSelectsDriverVersion's "absent 3.0.0 from the image" boot
	// checks it (the image's file on the root is read only after the root
	// mount). An initramfs not marked complete: its "fw_cfg 2.0.0 from the
	// initramfs" boot checks the reason for the late decision.
}

// checkNotComplete checks a boot whose initramfs holds the cache, its index
// not marked complete, and no kpreload.early=0: the report gives the reason
// the driver decision waited for the root.
func checkNotComplete(t *testing.T, rep *report.Report) {
	t.Helper()
	if !strings.Contains(strings.Join(eventTexts(rep), "\n"), "not marked complete") {
		t.Errorf("an initramfs not marked complete: events %q, want the reason for the late decision", eventTexts(rep))
	}
}

// logTimeline logs a boot's /init events and module loads in time order.
func logTimeline(t *testing.T, rep *report.Report) {
	t.Helper()
	type line struct {
		at   float64
		what string
	}
	lines := []line{{rep.InitStart, "/init started"}}
	for _, e := range rep.Events {
		lines = append(lines, line{e.Time, e.What})
	}
	for _, m := range rep.Modules {
		lines = append(lines, line{m.Start, fmt.Sprintf("load %s (%s) until %.3fs: %s", m.Name, m.Phase, m.End, m.Result)})
	}
	lines = append(lines, line{rep.Root.Mounted, "root mounted"}, line{rep.SwitchRoot, "switch_root"})
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].at < lines[j].at })
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "\n  %.3fs %s", l.at, l.what)
	}
	t.Logf("timeline:%s", b.String())
}
