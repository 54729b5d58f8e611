package provisioner

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/builder/image/stage"
)

const (
	recipesDir = "../../../recipes"
	testKernel = "6.1.0-56-cloud-amd64"
)

// binaries writes placeholder kpreload binaries for Prepare's existence checks.
func fakeBinaries(t *testing.T) (kpreload, initBin string) {
	t.Helper()
	dir := t.TempDir()
	kpreload, initBin = filepath.Join(dir, "kpreload"), filepath.Join(dir, "kpreload-init")
	for _, p := range []string{kpreload, initBin} {
		if err := os.WriteFile(p, []byte("#!/bin/false\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return kpreload, initBin
}

func TestPrepareAllProblems(t *testing.T) {
	kpreload, _ := fakeBinaries(t)
	bad := filepath.Join(t.TempDir(), "instance.yaml")
	if err := os.WriteFile(bad, []byte("resources:\n  driver:\n    flavour: open\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var p Provisioner
	err := p.Prepare(map[string]interface{}{
		"recipes":         []string{"testdriver", "nvidia-999"},
		"recipes_dir":     recipesDir,
		"kpreload_binary": kpreload,
		"init_binary":     filepath.Join(t.TempDir(), "missing-init"),
		"instance_file":   bad,
		"target_root":     "relative/root",
		"cache_dir":       t.TempDir(),
	})
	if err == nil {
		t.Fatal("Prepare accepted a bad configuration")
	}
	for _, want := range []string{
		"kernels: name the target's kernel releases",
		`recipes[1]: unknown recipe "nvidia-999"`,
		"init_binary:",
		"instance.yaml:3",
		`target_root "relative/root"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestPrepareDefaults(t *testing.T) {
	kpreload, initBin := fakeBinaries(t)
	var p Provisioner
	if err := p.Prepare(map[string]interface{}{
		"kernels": []string{testKernel}, "recipes": []string{"testdriver"}, "recipes_dir": recipesDir,
		"kpreload_binary": kpreload, "init_binary": initBin, "cache_dir": t.TempDir(),
	}); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if got, want := p.config.TargetRoot, "/"; got != want {
		t.Errorf("TargetRoot = %q, want %q", got, want)
	}
	if got, want := p.config.RemoteStagingDir, "/tmp/kpreload-provision"; got != want {
		t.Errorf("RemoteStagingDir = %q, want %q", got, want)
	}
	if len(p.config.LoadedRecipes()) != 1 || p.config.LoadedRecipes()[0].Name != "testdriver" {
		t.Errorf("recipes = %v, want testdriver", p.config.LoadedRecipes())
	}
}

// recordingComm is the SDK's mock communicator, remembering every command.
type recordingComm struct {
	*packersdk.MockCommunicator
	mu   sync.Mutex
	cmds []string
}

func (c *recordingComm) Start(ctx context.Context, rc *packersdk.RemoteCmd) error {
	c.mu.Lock()
	c.cmds = append(c.cmds, rc.Command)
	c.mu.Unlock()
	return c.MockCommunicator.Start(ctx, rc)
}

// fakeStage writes a small staged tree, standing in for stage.Stage.
func fakeStage(t *testing.T, got *stage.Options) func(context.Context, stage.Options, string) (*stage.Result, error) {
	return func(_ context.Context, o stage.Options, root string) (*stage.Result, error) {
		*got = o
		for p, data := range map[string]string{
			image.ImageKpreload:                                    "kpreload",
			image.ImagePostinstHook:                                "#!/bin/sh\n",
			"lib/systemd/system/kpreload-drivers.target":           "[Unit]\n",
			"lib/systemd/system/kpreload-persistenced.service":     "[Unit]\n",
			"lib/systemd/system/getty@.service":                    "[Unit]\n",
			"var/lib/kpreload/cache/index/" + testKernel + ".json": "{}",
		} {
			f := filepath.Join(root, p)
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				return nil, err
			}
			if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
				return nil, err
			}
		}
		if err := os.Symlink("kpreload", filepath.Join(root, "usr/bin/kp")); err != nil {
			return nil, err
		}
		return &stage.Result{Drivers: []stage.Driver{{Recipe: "testdriver", Driver: "kpreload-edu", Version: "1.0.0", Kernel: testKernel, SetID: "f0b28c9ee728"}}}, nil
	}
}

// TestProvisionMockCommunicator checks what goes through the communicator: the
// staged tree as one root-owned gzip tar, and the install script.
func TestProvisionMockCommunicator(t *testing.T) {
	kpreload, initBin := fakeBinaries(t)
	p := &Provisioner{}
	if err := p.Prepare(map[string]interface{}{
		"kernels": []string{testKernel}, "recipes": []string{"testdriver"}, "recipes_dir": recipesDir,
		"kpreload_binary": kpreload, "init_binary": initBin, "cache_dir": t.TempDir(),
		"use_sudo": true, "kernel_cmdline": "console=ttyS0",
	}); err != nil {
		t.Fatal(err)
	}
	var staged stage.Options
	p.stage = fakeStage(t, &staged)
	comm := &recordingComm{MockCommunicator: new(packersdk.MockCommunicator)}
	if err := p.Provision(context.Background(), packersdk.TestUi(t), comm, nil); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if !staged.NoInitramfs || staged.Cmdline != "console=ttyS0" || !staged.BuildMissing || len(staged.Recipes) != 1 {
		t.Errorf("stage options = %+v, want NoInitramfs, the cmdline, BuildMissing and the recipe", staged)
	}
	if got, want := comm.UploadPath, "/tmp/kpreload-provision/"+ArchiveName; got != want {
		t.Errorf("upload path = %q, want %q", got, want)
	}
	zr, err := gzip.NewReader(strings.NewReader(comm.UploadData))
	if err != nil {
		t.Fatalf("uploaded data is not gzip: %v", err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s owned by %d:%d, want root", h.Name, h.Uid, h.Gid)
		}
		if h.Name == "usr/bin/kp" && (h.Typeflag != tar.TypeSymlink || h.Linkname != "kpreload") {
			t.Errorf("usr/bin/kp = type %c -> %q, want a symlink to kpreload", h.Typeflag, h.Linkname)
		}
		names = append(names, h.Name)
	}
	for _, want := range []string{image.ImageKpreload, image.ImagePostinstHook, "usr/bin/kp", "lib/systemd/system/"} {
		if !slices.Contains(names, want) {
			t.Errorf("archive lacks %s; has %q", want, names)
		}
	}
	if got, want := len(comm.cmds), 2; got != want {
		t.Fatalf("%d remote commands, want %d: %q", got, want, comm.cmds)
	}
	// The staging directory is made as the communicator's user, so that the
	// upload (which runs as that user) can write into it; the install goes
	// through sudo.
	if strings.HasPrefix(comm.cmds[0], "sudo") || !strings.Contains(comm.cmds[0], "mkdir -p") || !strings.Contains(comm.cmds[0], "is not writable by") {
		t.Errorf("first command = %q, want mkdir of the staging dir without sudo, and a writability check", comm.cmds[0])
	}
	install := comm.cmds[1]
	if !strings.HasPrefix(install, "sudo -n sh -c ") {
		t.Errorf("install command = %q, want it through sudo -n", install)
	}
	for _, want := range []string{
		"tar -xzf", "ldconfig -r",
		`enable '\''kpreload-drivers.target'\'' '\''kpreload-persistenced.service'\''`,
		`"$root/usr/bin/kpreload" install --root "$root" --kernel '\''` + testKernel + `'\''`,
		`trap '\''rm -rf "$staging"'\'' EXIT`,
	} {
		if !strings.Contains(install, want) {
			t.Errorf("install command lacks %q:\n%s", want, install)
		}
	}
	if strings.Contains(install, "getty@") {
		t.Errorf("install command enables a template unit:\n%s", install)
	}
}

// TestProvisionRemoteFailure checks that a failing install is an error that
// says so.
func TestProvisionRemoteFailure(t *testing.T) {
	kpreload, initBin := fakeBinaries(t)
	p := &Provisioner{}
	if err := p.Prepare(map[string]interface{}{
		"kernels": []string{testKernel}, "recipes_dir": recipesDir,
		"kpreload_binary": kpreload, "init_binary": initBin, "cache_dir": t.TempDir(),
	}); err != nil {
		t.Fatal(err)
	}
	var staged stage.Options
	p.stage = fakeStage(t, &staged)
	comm := &packersdk.MockCommunicator{StartExitStatus: 3, StartStderr: "kpreload: kernel 6.1.0-56-cloud-amd64 is not installed on the target\n"}
	err := p.Provision(context.Background(), packersdk.TestUi(t), comm, nil)
	if err == nil || !strings.Contains(err.Error(), "exited with status 3") {
		t.Fatalf("Provision = %v, want an error with the exit status", err)
	}
}

func TestInstallScriptSkipHook(t *testing.T) {
	s := InstallScript("/", "/tmp/x", nil, []string{testKernel}, false)
	if strings.Contains(s, `kpreload" install`) || strings.Contains(s, "systemctl") {
		t.Errorf("script without hook and units runs them:\n%s", s)
	}
	if !strings.Contains(s, "ldconfig") || !strings.Contains(s, `rm -rf "$staging"`) {
		t.Errorf("script lacks ldconfig or the staging cleanup:\n%s", s)
	}
}

// TestInstallScriptNeedsRoot runs the real install script for the target
// "/" as a user that is not root (nobody, through setpriv, when the test
// runs as root), as a communicator's login user without use_sudo would: it
// stops before unpacking anything, saying to set use_sudo. Another target
// root may belong to the user (chroot-style builders): no such check there.
func TestInstallScriptNeedsRoot(t *testing.T) {
	// The staging directory belongs to the user, as the provisioner makes it.
	// (os.MkdirTemp: t.TempDir's parent is closed to other users.)
	base, err := os.MkdirTemp("", "kpreload-needs-root-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	staging := filepath.Join(base, "staging")
	if err := os.Mkdir(staging, 0o700); err != nil {
		t.Fatal(err)
	}
	script := InstallScript("/", staging, nil, []string{testKernel}, true)
	argv := []string{"sh", "-c", script}
	if os.Getuid() == 0 {
		if err := os.Chmod(base, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(staging, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Fatalf("no setpriv (util-linux) to run the script as nobody: %v", err)
		}
		argv = append([]string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"}, argv...)
	}
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("install script into / as a non-root user: %v, want exit status 2\n%s", err, out)
	}
	for _, want := range []string{"kpreload: installing into / needs root", "set use_sudo = true"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("install script output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "unpacked") || strings.Contains(string(out), "tar") {
		t.Errorf("install script went on after the check:\n%s", out)
	}
	if _, err := os.Stat(staging); !os.IsNotExist(err) {
		t.Errorf("the staging directory is still there (%v): the script's exit should remove it", err)
	}
	if other := InstallScript("/mnt/target", "/tmp/x", nil, nil, false); strings.Contains(other, "id -u") {
		t.Errorf("the script for another target root checks the user:\n%s", other)
	}
}

// TestInstallScriptRunsNoRootProgram: into a root other than /, install is
// run from the uploaded kpreload, never from the copy inside the root (the
// root's files are its maker's); into /, from the installed one.
func TestInstallScriptRunsNoRootProgram(t *testing.T) {
	for _, c := range []struct{ root, want, never string }{
		{"/mnt/target", `"$staging/tree/` + image.ImageKpreload + `" install --root "$root"`, `"$root/` + image.ImageKpreload + `"`},
		{"/", `"$root/` + image.ImageKpreload + `" install --root "$root"`, `"$staging/tree/`},
	} {
		s := InstallScript(c.root, "/tmp/x", nil, []string{testKernel}, true)
		if !strings.Contains(s, c.want) || strings.Contains(s, c.never) {
			t.Errorf("InstallScript(%s): want %s and no %s:\n%s", c.root, c.want, c.never, s)
		}
	}
}
