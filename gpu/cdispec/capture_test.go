package cdispec

import (
	"path"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"
)

// The captures in testdata/h100-capture are real: nvidia-ctk 1.20.1 and kpreload
// on the device machine (H100, NVIDIA open 580.159.04, libraries under
// /usr/local/nvidia/lib64). This test validates them with the CDI library and
// holds the differences to the list explained in docs/containers.md ("Comparison
// with nvidia-ctk on the real GPU").

// summary is what the comparison looks at in one spec.
type summary struct {
	names     []string          // device names
	nodes     map[string]string // path -> "major,minor", over the spec and its devices
	libs      []string          // host paths of mounted *.so.<version> files
	bins      []string          // host paths of mounted driver binaries
	firmware  []string          // host directories of mounted GSP firmware
	other     []string          // other mounts (host paths)
	hooks     []string          // "<hookName> <subcommand>"
	ldFolders []string          // update-ldcache --folder values
	env       []string
}

func summarize(t *testing.T, s *specs.Spec, version string) summary {
	t.Helper()
	sum := summary{nodes: map[string]string{}}
	edits := []specs.ContainerEdits{s.ContainerEdits}
	for _, d := range s.Devices {
		sum.names = append(sum.names, d.Name)
		edits = append(edits, d.ContainerEdits)
	}
	bins := map[string]bool{}
	for _, b := range Binaries {
		bins[b] = true
	}
	seenHook := map[string]bool{}
	for _, e := range edits {
		for _, n := range e.DeviceNodes {
			sum.nodes[n.Path] = strings.Join([]string{itoa(n.Major), itoa(n.Minor)}, ",")
		}
		for _, m := range e.Mounts {
			base := path.Base(m.HostPath)
			switch {
			case strings.HasSuffix(base, ".so."+version):
				sum.libs = append(sum.libs, m.HostPath)
			case bins[base]:
				sum.bins = append(sum.bins, m.HostPath)
			case strings.Contains(m.HostPath, "/nvidia/"+version) && strings.HasPrefix(base, "gsp_"):
				sum.firmware = appendOnce(sum.firmware, path.Dir(m.HostPath))
			case strings.HasSuffix(m.HostPath, "/nvidia/"+version):
				sum.firmware = appendOnce(sum.firmware, m.HostPath)
			default:
				sum.other = append(sum.other, m.HostPath)
			}
		}
		for _, h := range e.Hooks {
			if len(h.Args) < 2 {
				t.Fatalf("hook %s without a subcommand", h.Path)
			}
			sub := h.Args[1]
			if h.Args[0] == "kpreload" {
				sub = h.Args[3] // kpreload cdi hook <sub>
			}
			if k := h.HookName + " " + sub; !seenHook[k] {
				seenHook[k] = true
				sum.hooks = append(sum.hooks, k)
			}
			if sub == "update-ldcache" {
				for i, a := range h.Args {
					if a == "--folder" && i+1 < len(h.Args) {
						sum.ldFolders = append(sum.ldFolders, h.Args[i+1])
					}
				}
			}
		}
		sum.env = append(sum.env, e.Env...)
	}
	for _, l := range [][]string{sum.libs, sum.bins, sum.other, sum.hooks, sum.env} {
		sort.Strings(l)
	}
	return sum
}

func appendOnce(l []string, s string) []string {
	for _, x := range l {
		if x == s {
			return l
		}
	}
	return append(l, s)
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// only returns the elements of a not in b.
func only(a, b []string) []string {
	in := map[string]bool{}
	for _, x := range b {
		in[x] = true
	}
	var out []string
	for _, x := range a {
		if !in[x] {
			out = append(out, x)
		}
	}
	return out
}

func keys(m map[string]string) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

func TestCapturesH100(t *testing.T) {
	const version = "580.159.04"
	ctkSpec, err := ValidateFile("testdata/h100-capture/ctk.yaml")
	if err != nil {
		t.Fatalf("nvidia-ctk's spec: %v", err)
	}
	kpSpec, err := ValidateFile("testdata/h100-capture/kp.yaml")
	if err != nil {
		t.Fatalf("kpreload's spec: %v", err)
	}
	run1Spec, err := ValidateFile("testdata/h100-capture/kp-run1.yaml")
	if err != nil {
		t.Fatalf("kpreload's spec (run 1): %v", err)
	}
	ctk, kp, run1 := summarize(t, ctkSpec, version), summarize(t, kpSpec, version), summarize(t, run1Spec, version)

	// Device names: index, UUID, all. Run 1 ran on the VM ctk.yaml comes from, so
	// its UUID is the same; run 2 got another VM (another UUID).
	if !reflect.DeepEqual(run1.names, ctk.names) {
		t.Errorf("device names: kpreload %q, nvidia-ctk %q", run1.names, ctk.names)
	}
	if len(kp.names) != 3 || kp.names[0] != "0" || !strings.HasPrefix(kp.names[1], "GPU-") || kp.names[2] != "all" {
		t.Errorf("device names (run 2) = %q, want 0, GPU-<uuid>, all", kp.names)
	}

	for _, c := range []struct {
		what      string
		got, want []string
	}{
		// Device nodes: kpreload's captures (made before the MIG capabilities
		// became devices of their own, see TestGenerateMIGCapabilities) add the
		// MIG config/monitor capabilities; the summary counts every device's
		// nodes, so the list is the same for today's specs.
		{"nodes only in kpreload", only(keys(kp.nodes), keys(ctk.nodes)), []string{"/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"}},
		{"nodes only in nvidia-ctk", only(keys(ctk.nodes), keys(kp.nodes)), nil},
		// The same 26 libraries, the same five binaries (by host path), the same firmware.
		{"libraries only in kpreload", only(kp.libs, ctk.libs), nil},
		{"libraries only in nvidia-ctk", only(ctk.libs, kp.libs), nil},
		{"binaries only in kpreload", only(kp.bins, ctk.bins), nil},
		{"binaries only in nvidia-ctk", only(ctk.bins, kp.bins), nil},
		{"firmware (kpreload)", kp.firmware, []string{"/usr/local/nvidia/firmware/nvidia/" + version}},
		{"firmware (nvidia-ctk)", ctk.firmware, []string{"/usr/local/nvidia/firmware/nvidia/" + version}},
		// Graphics configuration files: nvidia-ctk only.
		{"other mounts (kpreload)", kp.other, nil},
		{"other mounts (nvidia-ctk)", ctk.other, []string{"/usr/share/glvnd/egl_vendor.d/10_nvidia.json", "/usr/share/vulkan/icd.d/nvidia_icd.json"}},
		{"hooks (kpreload)", kp.hooks, []string{"createContainer update-ldcache"}},
		{"hooks (nvidia-ctk)", ctk.hooks, []string{
			"createContainer create-symlinks", "createContainer disable-device-node-modification",
			"createContainer enable-cuda-compat", "createContainer update-application-profile",
			"createContainer update-ldcache", "createRuntime apply-cuda-memory-limits"}},
		{"ld cache folders (kpreload)", kp.ldFolders, []string{"/usr/local/nvidia/lib64"}},
		{"ld cache folders (nvidia-ctk)", ctk.ldFolders, []string{"/usr/local/nvidia/lib64"}},
		{"env (kpreload)", kp.env, []string{"NVIDIA_VISIBLE_DEVICES=void"}},
		{"env (nvidia-ctk)", ctk.env, []string{"NVIDIA_CTK_LIBCUDA_DIR=/usr/local/nvidia/lib64", "NVIDIA_VISIBLE_DEVICES=void"}},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
		}
	}
	if got := len(kp.libs); got != 26 {
		t.Errorf("kpreload mounts %d libraries, want the 26 *.so.%s of /usr/local/nvidia/lib64", got, version)
	}
	// The numbers of the nodes both have agree.
	for p, n := range ctk.nodes {
		if kp.nodes[p] != n {
			t.Errorf("%s: kpreload %s, nvidia-ctk %s", p, kp.nodes[p], n)
		}
	}
	// Run 1 mounted the /usr/bin wrapper scripts and found no firmware; run 2 (the
	// current code) resolves links and follows firmware_class.path.
	if got, want := run1.bins[0], "/usr/bin/nvidia-cuda-mps-control"; got != want {
		t.Errorf("run 1 binaries[0] = %q, want %q", got, want)
	}
	if len(run1.firmware) != 0 {
		t.Errorf("run 1 firmware = %q, want none", run1.firmware)
	}
}
