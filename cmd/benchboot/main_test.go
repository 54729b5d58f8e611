package main

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/report"
)

// console is an excerpt of a real console log of Debian's initramfs booting
// 6.1.0-56-cloud-amd64 under QEMU TCG (userspace output interleaved).
const console = `[    4.040000] Freeing unused kernel image (rodata/data gap) memory: 1892K
[    4.047023] Run /init as init process
Loading, please wait...
Starting systemd-udevd version 252.39-1~deb12u2
[    5.739656] kpreload_edu 0000:00:02.0: bound, id 0x010000ed, driver version 1.0.0
[    5.950001] virtio_blk virtio0: 2/0/0 default/read/poll queues
Begin: Loading essential drivers ... [    5.961884] virtio_blk virtio0: [vda] 131072 512-byte logical blocks (67.1 MB/64.0 MiB)
[    6.731201] EXT4-fs (vda): mounted filesystem with ordered data mode. Quota mode: none.
[    7.102210] EXT4-fs (vda): re-mounted. Quota mode: none.
`

func TestConsoleTime(t *testing.T) {
	for _, c := range []struct {
		name, console string
		want          float64
		wantErr       bool
	}{
		{"init", console, 4.047023, false},
		{"vda", console, 5.961884, false},
		{"vda", "[    5.950001] virtio_blk virtio0: 2/0/0 default/read/poll queues\n", 0, true},
		{"init", "Loading, please wait...\n", 0, true},
	} {
		re := initLine
		if c.name == "vda" {
			re = vdaLine
		}
		got, err := consoleTime([]byte(c.console), re)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("consoleTime(%q, %s) = %v, %v; want %v, error %v", c.console, c.name, got, err, c.want, c.wantErr)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{9.7, 7.5, 8.1}, 8.1},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median(nil) = %v, want NaN", got)
	}
}

// goodBoot is a boot that reached the root disk's init with edu bound.
func goodBoot() *bootResult {
	return &bootResult{
		Accel:       "tcg",
		WallSeconds: 8.8,
		Error:       `no boot report came back: the guest powered off without printing "kpreload-report:"`,
		RootInit: &report.RootInit{
			PID: 1, Start: 7.58, Kernel: "6.1.0-56-cloud-amd64",
			Root: report.MountEntry{Device: "/dev/vda", FSType: "ext4", BlockDevice: "/dev/vda"},
			PCI:  []report.PCIDevice{{Address: "0000:00:02.0", Vendor: "1234", Device: "11e8", Driver: "kpreload_edu", EduID: eduID}},
			Kmsg: []report.KmsgLine{{Time: 5.739656, Text: "kpreload_edu 0000:00:02.0: bound, id 0x010000ed, driver version 1.0.0"}},
		},
	}
}

func TestCheckBoot(t *testing.T) {
	s, err := checkBoot(debian, "6.1.0-56-cloud-amd64", goodBoot(), []byte(console))
	want := Sample{Kind: "boot", Variant: debian, InitStart: 4.047023, RootReady: 5.961884, RootMounted: 6.731201, EduBound: 5.739656, RealInit: 7.58, Wall: 8.8}
	if err != nil || s != want {
		t.Errorf("checkBoot(good Debian boot) = %+v, %v; want %+v", s, err, want)
	}
	for _, c := range []struct {
		name    string
		variant string
		break_  func(b *bootResult)
		want    string
	}{
		{"edu unbound", debian, func(b *bootResult) { b.RootInit.PCI[0].Driver = "" }, "not bound"},
		{"no probe line", debian, func(b *bootResult) { b.RootInit.Kmsg = nil }, "bound\" line"},
		{"no root init", debian, func(b *bootResult) { b.RootInit = nil }, "never reported"},
		{"root not vda", debian, func(b *bootResult) { b.RootInit.Root.BlockDevice = "/dev/ram0" }, "want pid 1 on /dev/vda"},
		{"other kernel", debian, func(b *bootResult) { b.RootInit.Kernel = "6.12.117+deb12-cloud-amd64" }, "booted"},
		{"panic", debian, func(b *bootResult) { b.Panicked = true }, "panicked"},
		{"kvm", debian, func(b *bootResult) { b.Accel = "kvm" }, "want tcg"},
		{"kpreload without report", kpreload, func(b *bootResult) {}, "no boot report came back"},
		{"late driver", debian, func(b *bootResult) { b.RootInit.Kmsg[0].Time = 8 }, "out of order"},
		{"root mounted after the real init", debian, func(b *bootResult) { b.RootInit.Start = 6.5 }, "out of order"},
	} {
		b := goodBoot()
		c.break_(b)
		if _, err := checkBoot(c.variant, "6.1.0-56-cloud-amd64", b, []byte(console)); errors.Is(err, errHung) {
			t.Errorf("checkBoot(%s) error = %v, a hang; want a broken boot", c.name, err)
		}
		_, err := checkBoot(c.variant, "6.1.0-56-cloud-amd64", b, []byte(console))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("checkBoot(%s) error = %v, want one saying %q", c.name, err, c.want)
		}
	}
}

func TestCheckBootHung(t *testing.T) {
	b := goodBoot()
	b.TimedOut, b.ExitCode, b.RootInit = true, -1, nil
	stalled := console + "[   23.497127] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:\n"
	_, err := checkBoot(kpreload, "", b, []byte(stalled))
	if !errors.Is(err, errHung) || !strings.Contains(err.Error(), "RCU stall") {
		t.Errorf("checkBoot(timed out after RCU stalls) error = %v, want errHung mentioning the RCU stall", err)
	}
}

func TestSummarizeTargets(t *testing.T) {
	var samples []Sample
	for run := 1; run <= 3; run++ {
		samples = append(samples,
			Sample{Kind: "boot", Variant: debian, Run: run, InitStart: 4, RootReady: 6, EduBound: 6, RealInit: 8, Wall: 9},
			Sample{Kind: "boot", Variant: kpreload, Run: run, InitStart: 2, RootReady: 3, EduBound: 2.9, RealInit: 4.1, Wall: 5},
			Sample{Kind: "build", Variant: debian, Run: run, Wall: 8, Bytes: 13_000_000},
			Sample{Kind: "build", Variant: kpreload, Run: run, Wall: 0.4, Bytes: 4_000_000})
	}
	res, err := summarize(Machine{}, append(samples, Sample{Kind: "hung", Variant: kpreload, Run: 2}))
	if err != nil {
		t.Fatal(err)
	}
	met := map[string]bool{}
	for _, r := range res.Rows {
		if r.Met != nil {
			met[r.Name] = *r.Met
		}
	}
	// Real init at 4.1 of 8 is over half; the rest are met.
	if met["kernel start → real init runs (/sbin/init)"] || !met["kernel start → test driver bound (kpreload_edu)"] ||
		!met["initramfs build time (wall clock)"] || !met["initramfs size"] || res.TargetsOK {
		t.Errorf("summarize targets = %v (all met %v), want only real init missed", met, res.TargetsOK)
	}
	if got := res.Machine.Hung; got[kpreload] != 1 || got[debian] != 0 {
		t.Errorf("summarize hung counts = %v, want kpreload 1, debian 0", got)
	}
	if _, err := summarize(Machine{}, samples[:3]); err == nil {
		t.Errorf("summarize(one kpreload boot sample missing) = nil error, want a count mismatch")
	}
}

// TestSummarizeRounds checks the round-by-round ratios: each round's kpreload
// boot over the Debian boot of the same round, whatever order the samples
// came in, beside the ratio of the medians the verdict is on.
func TestSummarizeRounds(t *testing.T) {
	deb := map[int]float64{1: 10, 2: 8, 3: 12}
	kp := map[int]float64{1: 4, 2: 4, 3: 3}
	early := map[int]float64{1: 3, 2: 2, 3: 6}
	var samples []Sample
	for _, run := range []int{3, 1, 2} {
		samples = append(samples,
			Sample{Kind: "boot", Variant: kpreloadEarly, Run: run, InitStart: 2, EduBound: early[run], RealInit: 7},
			Sample{Kind: "boot", Variant: debian, Run: run, InitStart: 4, EduBound: deb[run], RealInit: 14},
			Sample{Kind: "boot", Variant: kpreload, Run: run, InitStart: 2, EduBound: kp[run], RealInit: 7},
			Sample{Kind: "build", Variant: debian, Run: run, Wall: 8, Bytes: 13_000_000},
			Sample{Kind: "build", Variant: kpreloadEarly, Run: run, Wall: 0.4, Bytes: 4_000_000},
			Sample{Kind: "build", Variant: kpreload, Run: run, Wall: 0.4, Bytes: 4_000_000})
	}
	res, err := summarize(Machine{}, samples)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]Row{}
	for _, r := range res.Rows {
		rows[r.Name] = r
	}
	bound := rows["kernel start → test driver bound (kpreload_edu)"]
	if got, want := bound.Rounds, []float64{0.4, 0.5, 0.25}; !slices.Equal(got, want) {
		t.Errorf("bound round ratios = %v, want %v", got, want)
	}
	if got, want := bound.EarlyRounds, []float64{0.3, 0.25, 0.5}; !slices.Equal(got, want) {
		t.Errorf("bound early round ratios = %v, want %v", got, want)
	}
	if bound.RoundMedian != 0.4 || bound.EarlyRoundMedian != 0.3 {
		t.Errorf("bound round medians = %v, %v, want 0.4, 0.3", bound.RoundMedian, bound.EarlyRoundMedian)
	}
	// The verdict is on the ratio of the medians: 4 / 10 and 3 / 10.
	if bound.Ratio != 0.4 || bound.EarlyRatio != 0.3 {
		t.Errorf("bound ratios = %v, %v, want 0.4, 0.3", bound.Ratio, bound.EarlyRatio)
	}
	own := rows["initramfs /init → test driver bound (the initramfs's own part)"]
	if own.Debian != 6 || own.Kpreload != 2 || own.Early != 1 {
		t.Errorf("initramfs's own part = %v, %v, %v, want 6, 2, 1", own.Debian, own.Kpreload, own.Early)
	}
	if len(rows["initramfs build time (wall clock)"].Rounds) != 0 {
		t.Errorf("build rows have round ratios, want none (builds are not boots of one round)")
	}
	var out strings.Builder
	if err := writeMarkdown(&out, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Round by round (each round's three boots back to back), kernel start → test driver bound (kpreload_edu): after the root 0.400 (0.250–0.500): 0.400, 0.500, 0.250; early 0.300 (0.250–0.500): 0.300, 0.250, 0.500.",
		"| initramfs /init → test driver bound (the initramfs's own part) | 6.000 s | 2.000 s | 0.333 | 1.000 s | 0.167 |  |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, out.String())
		}
	}
}

func TestCheckBootNoRootMount(t *testing.T) {
	noMount := strings.ReplaceAll(console, "EXT4-fs (vda): mounted filesystem", "EXT4-fs (vdb): mounted filesystem")
	if _, err := checkBoot(debian, "", goodBoot(), []byte(noMount)); err == nil || !strings.Contains(err.Error(), "root mount") {
		t.Errorf("checkBoot(no root mount line) error = %v, want one about the root mount", err)
	}
}
