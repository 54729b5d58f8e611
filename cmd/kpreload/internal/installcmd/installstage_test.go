package installcmd

import (
	"strings"
	"testing"
)

// TestInstallStageRefuses: --stage's flags without --stage, --stage on this
// system, --image with --root, --partition without --image and --remote
// without --trust are refused before anything is touched, naming the flag.
func TestInstallStageRefuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"install", "--root", "/nonexistent", "--recipe", "testdriver"}, "--recipe needs --stage"},
		{[]string{"install", "--root", "/nonexistent", "--image", "x.raw"}, "--image needs --stage"},
		{[]string{"install", "--stage", "--recipe", "testdriver"}, "--stage needs --root DIR"},
		{[]string{"install", "--stage", "--image", "x.raw", "--root", "/mnt"}, "--image and --root: give one"},
		{[]string{"install", "--stage", "--root", "/mnt", "--partition", "2"}, "--partition needs --image"},
		{[]string{"install", "--stage", "--root", "/mnt", "--remote", "oci://localhost:5000/cells"}, "without --trust"},
	} {
		code, _, errOut := runCLI(c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("kpreload %s: exit %d, stderr %s\nwant a failure holding %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
}

// TestInstallHelpCmdline: install --help says what GRUB's entries take from
// /etc/default/grub (both variables, as GrubEntries writes them), and that
// --stage is there for roots kpreload never staged.
func TestInstallHelpCmdline(t *testing.T) {
	_, out, _ := runCLI("install", "--help")
	for _, want := range []string{"GRUB_CMDLINE_LINUX and GRUB_CMDLINE_LINUX_DEFAULT", "GRUB_CMDLINE_LINUX_DEFAULT from /etc/default/grub", "--stage", "kpreload install --stage --image debian.raw --recipe testdriver"} {
		if !strings.Contains(out, want) {
			t.Errorf("install --help lacks %q:\n%s", want, out)
		}
	}
}
