package installcmd

import (
	"strings"
	"testing"
)

// TestKernelHookRefreshArgs: refresh takes no arguments, and a root with no
// boot loader is refused, saying what was looked for; the help documents it.
func TestKernelHookRefreshArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"kernel-hook", "refresh", "6.1.0-56-cloud-amd64"}, "refresh takes no arguments"},
		{[]string{"kernel-hook", "refresh", "--root", t.TempDir()}, "kernel-hook refresh: "},
		{[]string{"kernel-hook", "nonsense", "x"}, "postinst, postrm, grub-entries, boot-ok, up or refresh"},
		{[]string{"kernel-hook", "up", "x"}, "up takes no arguments"},
	} {
		code, _, errOut := runCLI(c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, %q; want a failure saying %q", c.args, code, errOut, c.want)
		}
	}
	_, help, _ := runCLI("kernel-hook", "--help")
	for _, want := range []string{"| refresh", "kpreload kernel-hook refresh", "newest kernel with\nits driver cells", "| up |", "kpreload kernel-hook up\n\nis run by kpreload-up.service"} {
		if !strings.Contains(help, want) {
			t.Errorf("kernel-hook --help lacks %q", want)
		}
	}
}
