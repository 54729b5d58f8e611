package devnodes

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Seeds copied from the H200 VM fixture (testdata/h200-gpu-vm:
// proc-devices.txt, proc-driver-nvidia-gpus.txt) and the capability files'
// format (nv-caps).
const (
	h200Devices = `Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
  4 ttyS
  5 /dev/tty
  5 /dev/console
  5 /dev/ptmx
  7 vcs
 10 misc
 13 input
128 ptm
136 pts
195 nvidia
195 nvidiactl
203 cpu/cpuid
231 infiniband_mad
231 infiniband_verbs
238 nvidia-uvm
239 nvidia-nvswitch
240 nvidia-nvlink
241 nvidia-caps
242 nvidia-caps-imex-channels
243 hidraw
244 infiniband_verbs
245 infiniband_mad
246 macvtap
247 mei
248 bsg
249 watchdog
250 ptp
251 pps
252 dax
253 dimmctl
254 ndctl

Block devices:
  7 loop
253 zram
254 virtblk
259 blkext
`
	h200Information = "Model: \t\t NVIDIA H200\nIRQ:   \t\t 41\nGPU UUID: \t GPU-7843b487-7c5d-bf32-e87d-73ef066a19c5\n" +
		"Video BIOS: \t 96.00.a5.00.1a\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n" +
		"Bus Location: \t 0000:00:06.0\nDevice Minor: \t 0\nGPU Firmware: \t 580.159.04\nGPU Excluded:\t No\n"
	migConfig  = "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n"
	migMonitor = "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
)

var gpuNodeRE = regexp.MustCompile(`^nvidia[0-9]+$`)

// FuzzPlan feeds Plan a fuzzed /proc/devices, two GPUs' information files and
// the two MIG capability files (empty strings leave a file out). Properties:
// no panic; without an "nvidia" (or "nvidia-frontend") character major, no
// nodes; otherwise nvidiactl (minor 255), one nvidia<minor> node per GPU with
// the minor its file gives, uvm nodes exactly when nvidia-uvm is registered,
// every node under the dev directory with only permission bits, sorted by path.
// The majors parsed re-parse to the same map when written back in
// /proc/devices form.
func FuzzPlan(f *testing.F) {
	f.Add(h200Devices, h200Information, "", migConfig, migMonitor)
	f.Add(h200Devices, h200Information, strings.Replace(h200Information, "Minor: \t 0", "Minor: \t 7", 1), "", "")
	f.Add("Character devices:\n195 nvidia-frontend\n510 nvidia-uvm\n", "Device Minor: 3\n", "Device Minor: 1\n", "", "")
	f.Add("Character devices:\n  1 mem\n\nBlock devices:\n195 nvidia\n", "", "", "", "")
	f.Add("Character devices:\n195 nvidia\n241 nvidia-caps\n", "Device Minor: x\n", "", "DeviceFileMinor: 1\nDeviceFileMode: 4096\n", "")
	f.Add("Character devices:\n195\n", "", "", "", "")
	f.Add("Character devices:\n99999999999 nvidia\n", "", "", "", "")
	f.Add("", "", "", "", "")
	// One tree per fuzzing process, rewritten for every input (a fresh
	// t.TempDir per input costs more than Plan itself).
	root := f.TempDir()
	proc, dev := filepath.Join(root, "proc"), filepath.Join(root, "dev")
	f.Fuzz(func(t *testing.T, devices, info0, info1, capConfig, capMonitor string) {
		put := func(rel, content string) {
			p := filepath.Join(proc, rel)
			if content == "" {
				if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
				return
			}
			writeFile(t, p, content)
		}
		put("devices", devices)
		gpus := 0
		for i, s := range []string{info0, info1} {
			put(filepath.Join("driver/nvidia/gpus", fmt.Sprintf("0000:00:%02x.0", 6+i), "information"), s)
			if s != "" {
				gpus++
			}
		}
		put("driver/nvidia/capabilities/mig/config", capConfig)
		put("driver/nvidia/capabilities/mig/monitor", capMonitor)

		majors, merr := readMajors(hostFiles, filepath.Join(proc, "devices"))
		nodes, err := Plan(proc, dev)
		if merr != nil {
			if err == nil {
				t.Fatalf("readMajors failed (%v) but Plan did not", merr)
			}
			return
		}
		// Written back in /proc/devices form, the majors parse to the same map.
		var b strings.Builder
		b.WriteString("Character devices:\n")
		for _, name := range slices.Sorted(maps.Keys(majors)) {
			if strings.ContainsAny(name, " \t\r\n\v\f") || name == "" {
				t.Fatalf("major name %q is not one word", name)
			}
			fmt.Fprintf(&b, "%3d %s\n", majors[name], name)
		}
		again := filepath.Join(root, "devices.again")
		writeFile(t, again, b.String())
		if m2, err := readMajors(hostFiles, again); err != nil || !maps.Equal(m2, majors) {
			t.Fatalf("majors %v written back as\n%s\nre-parse to %v, %v", majors, b.String(), m2, err)
		}

		gpuMajor, nvidia := first(majors, "nvidia", "nvidia-frontend")
		if err != nil {
			if !nvidia {
				t.Fatalf("Plan failed without an nvidia major: %v", err)
			}
			if !strings.Contains(err.Error(), proc) {
				t.Fatalf("Plan error %q does not name the file", err)
			}
			return
		}
		if !nvidia {
			if nodes != nil {
				t.Fatalf("no nvidia major, but nodes %v", nodes)
			}
			return
		}
		if !slices.IsSortedFunc(nodes, func(a, b Node) int { return strings.Compare(a.Path, b.Path) }) {
			t.Fatalf("nodes not sorted by path: %v", nodes)
		}
		var ctl, gpuNodes, uvm int
		for _, n := range nodes {
			rel, rerr := filepath.Rel(dev, n.Path)
			if rerr != nil || strings.HasPrefix(rel, "..") || n.Mode&^os.ModePerm != 0 {
				t.Fatalf("node %v: not under %s or not a permission mode", n, dev)
			}
			switch {
			case rel == "nvidiactl":
				ctl++
				if n.Minor != CtlMinor {
					t.Fatalf("nvidiactl minor %d", n.Minor)
				}
			case gpuNodeRE.MatchString(rel):
				gpuNodes++
				if n.Major != gpuMajor || rel != fmt.Sprintf("nvidia%d", n.Minor) {
					t.Fatalf("GPU node %v, want major %d and the minor in its name", n, gpuMajor)
				}
			case rel == "nvidia-uvm" || rel == "nvidia-uvm-tools":
				uvm++
				if n.Major != majors["nvidia-uvm"] {
					t.Fatalf("uvm node %v, want major %d", n, majors["nvidia-uvm"])
				}
			case strings.HasPrefix(rel, "nvidia-caps/nvidia-cap"):
				if n.Major != majors["nvidia-caps"] {
					t.Fatalf("caps node %v, want major %d", n, majors["nvidia-caps"])
				}
			default:
				t.Fatalf("unexpected node %v", n)
			}
		}
		_, hasUVM := majors["nvidia-uvm"]
		if ctl != 1 || gpuNodes != gpus || (uvm == 2) != hasUVM || (uvm != 0 && uvm != 2) {
			t.Fatalf("nodes %v: %d nvidiactl, %d GPU nodes for %d GPUs, %d uvm nodes (nvidia-uvm registered: %v)", nodes, ctl, gpuNodes, gpus, uvm, hasUVM)
		}
	})
}
