package plancmd

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
	"github.com/kpreload/kpreload/gpu/pci/pcitest"
	"github.com/kpreload/kpreload/internal/inroot/inroottest"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// planLists returns the real supported-gpus.json of nvidia-driver 535.261.03 and
// nvidia-tesla-470-driver 470.256.02, fetched by scripts/supported-gpus.sh when missing.
func planLists(t *testing.T) (l535, l470 string) {
	t.Helper()
	l535 = testenv.SupportedGPUs(t, "nvidia-driver_535.261.03-1")
	l470 = testenv.SupportedGPUs(t, "nvidia-tesla-470-driver_470.256.02-1~deb12u1")
	return l535, l470
}

func TestPlanH200Fixture(t *testing.T) {
	l535, l470 := planLists(t)
	cache := clitest.PlanCache(t, []bootindex.Set{
		{ID: "a535p", Driver: "nvidia", Version: "535.261.03", Flavor: "proprietary", SupportedGPUs: "l535/supported-gpus.json"},
		{ID: "a535o", Driver: "nvidia", Version: "535.261.03", Flavor: "open", SupportedGPUs: "l535/supported-gpus.json"},
		{ID: "a470p", Driver: "nvidia", Version: "470.256.02", Flavor: "proprietary", SupportedGPUs: "l470/supported-gpus.json"},
	}, map[string]string{"l535/supported-gpus.json": l535, "l470/supported-gpus.json": l470})
	root := pcitest.FromFixture(t, filepath.Join(pcitest.H200(t), "pci-sysfs.txt"))
	inst := filepath.Join(t.TempDir(), "instance.yaml")
	if err := os.WriteFile(inst, []byte("resources:\n  gpu:\n    type: h200\n    count: 1\n  driver:\n    version: \"535\"\n    cuda: 12.2\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	var out, errOut bytes.Buffer
	if code := cli.Execute([]string{"plan", "--sysfs", root, "--cache", cache, "--kernel", clitest.PlanKernel, "--instance", inst}, &out, &errOut); code != 0 {
		t.Fatalf("kpreload plan: exit %d: %s", code, errOut.String())
	}
	got := out.String()
	for _, want := range []string{
		"request from file (" + inst + "): version 535, flavour auto, cuda 12.2, gpu h200 x1\n",
		"NVIDIA GPU 0000:00:06.0 10de:2335 (subsystem 10de:18bf, class 0x030200): not named by any cached supported-gpus.json\n",
		"nvidia: load nothing [branch 535, request applies]\n",
		"no nvidia driver will be loaded: asked branch 535 with CUDA 12.2 (driver >= 535.54.03: CUDA 12.2 toolkit minimum), flavour auto, kernel " + clitest.PlanKernel,
		"nothing cached would work: no cached version's supported-gpus.json supports GPU 0000:00:06.0 10de:2335 (subsystem 10de:18bf)",
		"  535.261.03   proprietary  a535p  hardware: GPU 0000:00:06.0 10de:2335 (subsystem 10de:18bf) is not in 535.261.03's supported-gpus.json\n",
		"  470.256.02   proprietary  a470p  hardware: GPU 0000:00:06.0 10de:2335 (subsystem 10de:18bf) is not in 470.256.02's supported-gpus.json\n",
		"warning: resources.gpu.type h200 not checked for GPU 0000:00:06.0 10de:2335",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("kpreload plan output lacks %q; got:\n%s", want, got)
		}
	}

	out.Reset()
	if code := cli.Execute([]string{"plan", "--sysfs", filepath.Join(root, "sys"), "--cache", cache, "--kernel", clitest.PlanKernel, "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("kpreload plan --json: exit %d: %s", code, errOut.String())
	}
	var sel report.Selection
	if err := json.Unmarshal(out.Bytes(), &sel); err != nil {
		t.Fatalf("plan --json: %v\n%s", err, out.String())
	}
	if sel.Source != "default" || sel.Kernel != clitest.PlanKernel || sel.Request.Version != "latest" || sel.Request.Flavor != "auto" {
		t.Errorf("plan --json request = %s %s %+v", sel.Source, sel.Kernel, sel.Request)
	}
	if len(sel.GPUs) != 1 || sel.GPUs[0].ID != "10de:2335" || sel.GPUs[0].Subsystem != "10de:18bf" || sel.GPUs[0].Address != "0000:00:06.0" {
		t.Errorf("plan --json gpus = %+v", sel.GPUs)
	}
	if len(sel.Drivers) != 1 || sel.Drivers[0].Driver != "nvidia" || sel.Drivers[0].Chosen != nil || !sel.Drivers[0].Requested || len(sel.Drivers[0].Candidates) != 3 {
		t.Fatalf("plan --json drivers = %+v", sel.Drivers)
	}
	for _, c := range sel.Drivers[0].Candidates {
		if c.Excluded != "hardware" || c.From != cache {
			t.Errorf("candidate %+v: want excluded by hardware, from %s", c, cache)
		}
	}
	// The raw JSON keys other tools read.
	var raw map[string]any
	_ = json.Unmarshal(out.Bytes(), &raw)
	for _, k := range []string{"source", "origin", "request", "kernel", "gpus", "drivers"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("plan --json lacks key %q: %s", k, out.String())
		}
	}
}

func TestPlanTestDriverVersions(t *testing.T) {
	cache := clitest.PlanCache(t, []bootindex.Set{
		{ID: "edu1", Driver: "kpreload-edu", Version: "1.0.0", Flavor: "open"},
		{ID: "edu2", Driver: "kpreload-edu", Version: "2.0.0", Flavor: "open"},
	}, nil)
	root := pcitest.FromDevices(t)
	if err := os.MkdirAll(filepath.Join(root, "sys", "bus", "pci", "devices"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tt := range []struct{ yaml, chosen, refusal, fallback string }{
		{"", "2.0.0", "", ""},
		{"resources:\n  driver:\n    version: 1.0.0\n", "1.0.0", "", ""},
		// A version the cache lacks: the default, as /init does, and why.
		{"resources:\n  driver:\n    version: 3.0.0\n", "2.0.0", "", "asked version 3.0.0 (file i.yaml:3), which this image does not hold (it holds 2.0.0, 1.0.0): going on with the default"},
		{"resources:\n  driver:\n    version: 1.0.0\n    flavor: proprietary\n", "", "would work on this machine: 2.0.0 open, 1.0.0 open (e.g. kpreload.driver=2.0.0)", ""},
	} {
		args := []string{"plan", "--sysfs", root, "--cache", cache, "--kernel", clitest.PlanKernel, "--json"}
		if tt.yaml != "" {
			p := filepath.Join(dir, "i.yaml")
			if err := os.WriteFile(p, []byte(tt.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--instance", p)
		}
		var out, errOut bytes.Buffer
		if code := cli.Execute(args, &out, &errOut); code != 0 {
			t.Fatalf("plan %q: exit %d: %s", tt.yaml, code, errOut.String())
		}
		var sel report.Selection
		if err := json.Unmarshal(out.Bytes(), &sel); err != nil || len(sel.Drivers) != 1 {
			t.Fatalf("plan --json: %v\n%s", err, out.String())
		}
		got := ""
		if c := sel.Drivers[0].Chosen; c != nil {
			got = c.Version
		}
		if got != tt.chosen || !strings.Contains(sel.Drivers[0].Refusal, tt.refusal) {
			t.Errorf("plan %q: chosen %q, refusal %q; want %q, %q", tt.yaml, got, sel.Drivers[0].Refusal, tt.chosen, tt.refusal)
		}
		if fb := strings.ReplaceAll(sel.Drivers[0].Fallback, dir+"/", ""); !strings.HasPrefix(fb, tt.fallback) || (fb == "") != (tt.fallback == "") {
			t.Errorf("plan %q: fallback %q, want %q", tt.yaml, fb, tt.fallback)
		}
	}
}

func TestPlanErrors(t *testing.T) {
	cache := clitest.PlanCache(t, nil, nil)
	root := pcitest.FromDevices(t)
	_ = os.MkdirAll(filepath.Join(root, "sys", "bus", "pci", "devices"), 0o755)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	_ = os.WriteFile(bad, []byte("resources:\n  driver:\n    flavour: open\n"), 0o644)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "--sysfs", root}, "--sysfs, --cache and --kernel are required"},
		{[]string{"plan", "--sysfs", root, "--cache", cache, "--kernel", "6.12.117+deb12-cloud-amd64"}, "has no boot index for kernel 6.12.117+deb12-cloud-amd64 (" + cache + "/index/6.12.117+deb12-cloud-amd64.json); kernels it has: " + clitest.PlanKernel},
		{[]string{"plan", "--sysfs", root, "--cache", cache, "--kernel", clitest.PlanKernel, "--instance", bad}, bad + ":3: resources.driver.flavour: unknown field"},
		{[]string{"plan", "--sysfs", t.TempDir(), "--cache", cache, "--kernel", clitest.PlanKernel}, "no PCI devices directory"},
	} {
		var out, errOut bytes.Buffer
		if code := cli.Execute(tt.args, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), tt.want) {
			t.Errorf("kpreload %q = exit %d, stderr %q; want failure containing %q", tt.args, code, errOut.String(), tt.want)
		}
	}
}

// TestPlanSharingAndMIG runs plan on the real H200 VM's sysfs with an
// instance asking time-slicing and an H200 MIG layout, then an H100 one: the
// first shows the layout and both Kubernetes files (read back by the k8sconfig
// tests with NVIDIA's types), the second the refusal and no MIG file.
func TestPlanSharingAndMIG(t *testing.T) {
	l535, _ := planLists(t)
	cache := clitest.PlanCache(t, []bootindex.Set{
		{ID: "a535p", Driver: "nvidia", Version: "535.261.03", Flavor: "proprietary", SupportedGPUs: "l535/supported-gpus.json"},
	}, map[string]string{"l535/supported-gpus.json": l535})
	root := pcitest.FromFixture(t, filepath.Join(pcitest.H200(t), "pci-sysfs.txt"))
	for _, tc := range []struct {
		mig  string
		want []string
		not  []string
	}{
		{"all-1g.18gb", []string{
			"Kubernetes GPU sharing: time-slicing, 4 replicas per GPU\n",
			"MIG all-1g.18gb: GPU 0000:00:06.0 10de:2335 (H200 141GB): MIG on, 7 × 1g.18gb\n",
			"/etc/kpreload/k8s/device-plugin.yaml (kpreload-k8s.service writes it at boot):",
			"migStrategy: single", "timeSlicing:", "name: nvidia.com/gpu", "replicas: 4",
			"/etc/kpreload/k8s/mig-config.yaml (kpreload-k8s.service writes it at boot):",
			"all-1g.18gb:", "0x233510DE", "1g.18gb: 7", "mig-enabled: true",
		}, nil},
		{"all-1g.10gb", []string{
			"MIG all-1g.10gb: gpu.mig all-1g.10gb refused: GPU 0000:00:06.0 (10de:2335, H200 141GB) has no MIG profile 1g.10gb; it offers 1g.18gb, 1g.18gb+me, 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb (e.g. gpu.mig: all-1g.18gb)\n",
			"migStrategy: none",
		}, []string{"mig-config.yaml"}},
	} {
		inst := filepath.Join(t.TempDir(), "instance.yaml")
		doc := "resources:\n  gpu:\n    type: h200\n    sharing: {strategy: time-slicing, replicas: 4}\n    mig: " + tc.mig + "\n"
		if err := os.WriteFile(inst, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		if code := cli.Execute([]string{"plan", "--sysfs", root, "--cache", cache, "--kernel", clitest.PlanKernel, "--instance", inst}, &out, &errOut); code != 0 {
			t.Fatalf("kpreload plan: exit %d: %s", code, errOut.String())
		}
		got := out.String()
		t.Logf("kpreload plan (%s):\n%s", tc.mig, got)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: plan output lacks %q", tc.mig, w)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(got, w) {
				t.Errorf("%s: plan output has %q", tc.mig, w)
			}
		}
	}
}

// TestPlanHostileSysfs: plan reads --sysfs inside it, only regular files,
// bounded: a link to the host's /sys, a FIFO or a huge attribute is an error
// naming the file, never the host's devices or a hang.
func TestPlanHostileSysfs(t *testing.T) {
	cache := clitest.PlanCache(t, nil, nil)
	dev := "sys/bus/pci/devices/0000:00:06.0/"
	tests := []struct {
		name  string
		setup func(t *testing.T, root string)
		want  string // in stderr, after the root
	}{
		{"sys linked to the host's sys", func(t *testing.T, root string) {
			inroottest.Remake(t, "", filepath.Join(root, "sys"), func(p string) error { return os.Symlink("/sys", p) })
		}, "/sys/bus/pci/devices: too many levels of symbolic links"},
		{"modalias and vendor are FIFOs", func(t *testing.T, root string) {
			for _, f := range []string{"modalias", "vendor"} {
				inroottest.Remake(t, "", filepath.Join(root, dev, f), func(p string) error { return unix.Mkfifo(p, 0o644) })
			}
		}, "/" + dev + "vendor: not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := pcitest.FromFixture(t, filepath.Join(pcitest.H200(t), "pci-sysfs.txt"))
			tt.setup(t, root)
			var out, errOut bytes.Buffer
			done := make(chan int)
			go func() {
				done <- cli.Execute([]string{"plan", "--sysfs", root, "--cache", cache, "--kernel", clitest.PlanKernel}, &out, &errOut)
			}()
			select {
			case code := <-done:
				if want := root + tt.want; code != 1 || !strings.Contains(errOut.String(), want) {
					t.Errorf("plan: exit %d, stderr %q; want 1 and %q", code, errOut.String(), want)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("plan hung")
			}
		})
	}
}

// TestPlanVermagic: plan compares the kernel's full vermagic (from the
// kernel's own set in the index), as /init does, not only its release: a set
// built for the same release with other options is excluded.
func TestPlanVermagic(t *testing.T) {
	cache := clitest.PlanCache(t, []bootindex.Set{{ID: "a1", Driver: "kpreload-edu", Version: "1.0.0", Flavor: "open"}}, nil)
	ixPath := filepath.Join(cache, "index", clitest.PlanKernel+".json")
	ix, err := bootindex.Read(ixPath)
	if err != nil {
		t.Fatal(err)
	}
	// The kernel's own modules say "SMP preempt"; the set's say "SMP".
	ix.Sets = append(ix.Sets, bootindex.Set{ID: "kernel", Modules: []bootindex.Module{{Name: "virtio_blk", Path: "k/virtio_blk.ko", Vermagic: clitest.PlanKernel + " SMP preempt mod_unload modversions "}}})
	if err := bootindex.Write(ixPath, ix); err != nil {
		t.Fatal(err)
	}
	root := pcitest.FromFixture(t, filepath.Join(pcitest.H200(t), "pci-sysfs.txt"))
	var out, errOut bytes.Buffer
	if code := cli.Execute([]string{"plan", "--sysfs", root, "--cache", cache, "--kernel", clitest.PlanKernel, "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("plan: exit %d: %s", code, errOut.String())
	}
	var sel report.Selection
	if err := json.Unmarshal(out.Bytes(), &sel); err != nil {
		t.Fatal(err)
	}
	if len(sel.Drivers) != 1 || len(sel.Drivers[0].Candidates) != 1 || sel.Drivers[0].Candidates[0].Excluded != "vermagic" {
		t.Errorf("plan with a set built with other kernel options: %+v, want it excluded by vermagic", sel.Drivers)
	}
}

// TestPlanHelpExamples runs the examples of `kpreload plan --help` exactly as
// written in a checkout: the committed H100 and H200 captures, read as they
// are, against the committed bundle of real 535 and 550 sets.
func TestPlanHelpExamples(t *testing.T) {
	clitest.InCheckout(t, testenv.RepoRoot(t))
	lines := cli.ExamplesOf(t, "kpreload plan")
	if len(lines) != 2 {
		t.Fatalf("plan examples: %q, want two", lines)
	}
	out := cli.RunLine(t, lines[0])
	for _, want := range []string{"NVIDIA GPU 0000:00:06.0 10de:2330 (subsystem 10de:16c1, class 0x030200): NVIDIA H100 80GB HBM3",
		"nvidia: load 550.163.01 open (set 8fc8ee5187ef, testdata/plan-bundle) [latest, request applies]"} {
		if !strings.Contains(out, want) {
			t.Errorf("%s printed\n%s\nwant %q", lines[0], out, want)
		}
	}
	var res planJSON
	if err := json.Unmarshal([]byte(cli.RunLine(t, lines[1])), &res); err != nil || res.Selection == nil {
		t.Fatalf("%s: %v", lines[1], err)
	}
	if len(res.GPUs) != 1 || res.GPUs[0].Name != "NVIDIA H200" || len(res.Drivers) != 1 || res.Drivers[0].Chosen == nil ||
		clitest.ChosenText(&res.Drivers[0]) != "nvidia 550.163.01 open" || res.Request.CUDA != "12.4" {
		t.Errorf("%s: %+v, want the H200 and nvidia 550.163.01 open for CUDA 12.4", lines[1], res.Selection)
	}
}

// TestREADMEPlanExample runs the README's `kpreload plan` example exactly as
// written in a checkout and compares what it prints with what the README
// shows, line for line.
func TestREADMEPlanExample(t *testing.T) {
	b, err := os.ReadFile("../../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "\n$ kpreload plan ")
	if !ok {
		t.Fatal("README.md has no `$ kpreload plan` example")
	}
	block, _, _ = strings.Cut(block, "\n```")
	cmdLine, want, _ := strings.Cut(block, "\n")
	clitest.InCheckout(t, testenv.RepoRoot(t))
	got := cli.RunLine(t, "kpreload plan "+cmdLine)
	if got != want+"\n" {
		t.Errorf("README.md: kpreload plan %s printed\n%s\nthe README shows\n%s", cmdLine, got, want)
	}
}
