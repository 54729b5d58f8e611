package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/testsupport/dibtest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// qemuProvisionTemplate is the template that adds kpreload to a disk image
// another tool made, through Packer's QEMU builder.
const qemuProvisionTemplate = "images/qemu-provision.pkr.hcl"

// qemuProvisionFlow reads docs/packer.md's block that runs
// qemuProvisionTemplate: the ```sh block of the section "Adding kpreload to
// an image Packer's QEMU builder boots".
func qemuProvisionFlow(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "packer.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Adding kpreload to an image Packer's QEMU builder boots\n")
	if !ok {
		t.Fatal("docs/packer.md has no section \"Adding kpreload to an image Packer's QEMU builder boots\"")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	_, rest, ok := strings.Cut(sec, "```sh\n")
	if !ok {
		t.Fatal("docs/packer.md's QEMU builder section has no ```sh block")
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("docs/packer.md's QEMU builder section: its ```sh block does not end")
	}
	block = strings.TrimSpace(block)
	for _, want := range []string{"scripts/packer.sh --qemu --install", "packer init " + qemuProvisionTemplate, "packer validate " + qemuProvisionTemplate, "packer build " + qemuProvisionTemplate} {
		if !slices.Contains(strings.Split(block, "\n"), want) {
			t.Fatalf("docs/packer.md's QEMU builder block lacks the line %q:\n%s", want, block)
		}
	}
	return block
}

// imageRecipes makes a recipes directory whose testdriver recipe is the
// repository's with the kernel matrix of the image's kernel only (a user
// writes such a recipe for an image whose kernel the project's recipes do
// not list): the recipe file and copies of the source directories it names.
func imageRecipes(t *testing.T, kernel string) string {
	t.Helper()
	src := filepath.Join(repoRoot(t), "recipes")
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(src, "testdriver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	head, _, ok := strings.Cut(string(b), "\nkernels:\n")
	if !ok {
		t.Fatal("recipes/testdriver.yaml has no top-level kernels: block")
	}
	p := filepath.Join(dir, "testdriver.yaml")
	if err := os.WriteFile(p, []byte(head+"\nkernels:\n  releases:\n    - "+kernel+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"testdriver", "testdriver-userspace"} {
		if out, err := exec.Command("cp", "-a", filepath.Join(src, d), dir).CombinedOutput(); err != nil {
			t.Fatalf("cp -a recipes/%s: %v\n%s", d, err, out)
		}
	}
	r, err := recipe.Load(p)
	if err != nil {
		t.Fatalf("the image's testdriver recipe: %v", err)
	}
	if r.Name != "testdriver" || !slices.Equal(r.Kernels.Releases, []string{kernel}) || len(r.Kernels.Select) > 0 {
		t.Fatalf("the image's testdriver recipe: name %q, kernels %+v; want testdriver for %s only (did recipes/testdriver.yaml gain fields after kernels:?)", r.Name, r.Kernels, kernel)
	}
	return dir
}

// TestQEMUBuilderProvisioner adds kpreload to the image diskimage-builder
// made (dibtest: Debian 12, its generic kernel, GRUB on BIOS, a non-root
// user with a password and passwordless sudo, sshd, DHCP) the way
// docs/packer.md shows, its block run as written: Packer's QEMU builder
// (packer-plugin-qemu, installed by `scripts/packer.sh --qemu --install`,
// TCG) boots a copy of the raw disk, logs in as that user with its
// password, and provisioner "kpreload" with use_sudo installs the test
// driver, built by the real dkms for the image's kernel, and makes the
// image's own GRUB boot kpreload. The output disk then boots under SeaBIOS
// through kpreload's GRUB entry with kpreload_edu bound before switch_root.
func TestQEMUBuilderProvisioner(t *testing.T) {
	testenv.SkipShort(t, "a diskimage-builder image (built once per machine), a packer build with the QEMU builder and a boot, both under TCG")
	if os.Getuid() != 0 {
		t.Fatal("this test needs root (diskimage-builder, the dkms build)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 40*time.Minute))
	defer cancel()
	start := time.Now()
	img := dibtest.Image(ctx, t)
	kernel := dibtest.Kernel(t, img)
	t.Logf("the image's kernel: %s", kernel)
	flow := qemuProvisionFlow(t)

	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	serial := filepath.Join(dir, "serial.log")
	packerLog := filepath.Join(dir, "packer.log")
	// The documented block as written, after the line that puts Packer on
	// PATH; the template's variables come from the environment.
	script := documentedFlow(t).build
	script = script[:strings.Index(script, "\n")+1] + flow
	env := append(packerEnv(plugins(t)),
		"PACKER_VERSION="+PackerVersion, "PACKER_QEMU_VERSION="+QEMUPluginVersion,
		"PACKER_CACHE_DIR="+filepath.Join(dir, "packer_cache"),
		"PACKER_LOG=1", "PACKER_LOG_PATH="+packerLog,
		"PKR_VAR_disk_image="+img,
		"PKR_VAR_kernel="+kernel,
		"PKR_VAR_recipes_dir="+imageRecipes(t, kernel),
		"PKR_VAR_cache_dir="+moduleCache(t),
		"PKR_VAR_output_directory="+out,
		"PKR_VAR_ssh_username="+dibtest.User,
		"PKR_VAR_ssh_password="+dibtest.Password,
		"PKR_VAR_ssh_timeout="+testenv.Deadline(t, 10*time.Minute).String(),
		"PKR_VAR_shutdown_timeout="+testenv.Deadline(t, 5*time.Minute).String(),
		"PKR_VAR_accelerator=tcg",
		"PKR_VAR_serial_log="+serial,
	)
	buildStart := time.Now()
	pout, err := runScript(ctx, t, script, env)
	if err != nil {
		c, _ := os.ReadFile(serial)
		l, _ := os.ReadFile(packerLog)
		t.Fatalf("docs/packer.md's QEMU builder block\n%s\nfailed after %s: %v\n%s\nguest serial console %s (last lines):\n%s\nPacker's log %s (last lines):\n%s",
			script, time.Since(buildStart).Round(time.Second), err, lastLines(pout, 60), serial, lastLines(string(c), 30), packerLog, lastLines(string(l), 40))
	}
	t.Logf("the documented block (plugin install, init, validate, packer build with the QEMU builder) took %s", time.Since(buildStart).Round(time.Second))
	for _, l := range strings.Split(pout, "\n") {
		if packerMilestone.MatchString(l) || strings.Contains(l, "driver kpreload-edu") {
			t.Log(strings.TrimSpace(l))
		}
	}
	for _, want := range []string{
		"The configuration is valid.",
		"Builds finished. The artifacts of successful builds are:",
		"Using SSH communicator to connect",
		"upload kpreload.tar.gz",
		"driver kpreload-edu 1.0.0 (testdriver) for " + kernel,
		"kpreload: built /boot/kpreload/initrd.img-" + kernel,
		"grub boots kernel " + kernel + " with kpreload by default",
		"kpreload installed on the target",
	} {
		if !strings.Contains(pout, want) {
			t.Errorf("packer output lacks %q:\n%s", want, lastLines(pout, 60))
		}
	}

	// One boot of the output disk: kpreload's GRUB entry, its /init, the
	// test driver bound before the real init.
	disk := filepath.Join(out, "disk.raw")
	res := dibtest.Boot(ctx, t, filepath.Join(repoRoot(t), "bin", "kpreload"), disk, 1)
	dibtest.CheckBoundBeforeSystemd(t, 1, res, kernel, install.FallbackFlag)
	if res.Up == "" {
		t.Errorf("the boot ended by %q, which is none of the marks of an image that is up", res.UntilMatch)
	}
	t.Logf("whole test: %s", time.Since(start).Round(time.Second))
}
