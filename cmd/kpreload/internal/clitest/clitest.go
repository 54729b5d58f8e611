// Package clitest runs kpreload command lines in a command group's tests:
// a tree of the commands a test names, assembled and run as kpreload runs
// its whole tree (internal/clirun), and the helpers the tests of several
// groups share (their --help examples, the files they write, hostile
// names, a cache for the driver decision).
package clitest

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/clirun"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/report"
)

// CLI is a kpreload command tree of some of its commands.
type CLI struct{ commands []func() *cobra.Command }

// New is the tree of the commands the constructors make, under the root.
func New(commands ...func() *cobra.Command) *CLI { return &CLI{commands: commands} }

// Root builds the tree, its completion command included.
func (c *CLI) Root() *cobra.Command { return clirun.WithCompletion(clirun.NewRoot(c.commands...)) }

// Run runs the command line as kpreload does and returns its exit status
// and output.
func (c *CLI) Run(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = c.Execute(args, &o, &e)
	return code, o.String(), e.String()
}

// Execute runs the command line as kpreload does, writing its output to
// stdout and stderr, and returns its exit status.
func (c *CLI) Execute(args []string, stdout, stderr io.Writer) int {
	return clirun.Execute(func() *cobra.Command { return clirun.NewRoot(c.commands...) }, args, stdout, stderr)
}

// MustRun runs the command line and fails unless it exits with code; it
// returns stdout and stderr.
func (c *CLI) MustRun(t *testing.T, code int, args ...string) (stdout, stderr string) {
	t.Helper()
	got, out, errOut := c.Run(args...)
	if got != code {
		t.Fatalf("kpreload %s = exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), got, code, out, errOut)
	}
	return out, errOut
}

// Commands returns every visible command of the tree, root first.
func (c *CLI) Commands() []*cobra.Command {
	var out []*cobra.Command
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == cobra.ShellCompRequestCmd || c.Name() == cobra.ShellCompNoDescRequestCmd {
			return
		}
		out = append(out, c)
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(c.Root())
	return out
}

// Words is a command's path without the root's name.
func Words(c *cobra.Command) []string { return strings.Fields(c.CommandPath())[1:] }

// HelpOf returns cmd's --help.
func (c *CLI) HelpOf(t *testing.T, cmd *cobra.Command) string {
	t.Helper()
	code, out, errOut := c.Run(append(Words(cmd), "--help")...)
	if code != 0 {
		t.Fatalf("%s --help: exit %d: %s", cmd.CommandPath(), code, errOut)
	}
	return out
}

// ExampleLines returns the kpreload command lines of the Examples section
// of cmd's --help (sudo dropped; lines of other tools, such as docker run,
// and comments skipped).
func (c *CLI) ExampleLines(t *testing.T, cmd *cobra.Command) []string {
	_, ex, _ := strings.Cut(c.HelpOf(t, cmd), "Examples:\n")
	ex, _, _ = strings.Cut(ex, "\n\n")
	var out []string
	for _, l := range strings.Split(ex, "\n") {
		l = strings.TrimPrefix(strings.TrimSpace(l), "sudo ")
		if strings.HasPrefix(l, "kpreload ") {
			out = append(out, l)
		}
	}
	return out
}

// ExamplesOf returns the example lines of the command at path ("kpreload plan").
func (c *CLI) ExamplesOf(t *testing.T, path string) []string {
	t.Helper()
	for _, cmd := range c.Commands() {
		if cmd.CommandPath() == path {
			lines := c.ExampleLines(t, cmd)
			if len(lines) == 0 {
				t.Fatalf("%s --help has no examples", path)
			}
			return lines
		}
	}
	t.Fatalf("no command %s", path)
	return nil
}

// RunLine runs one example line as a shell would split it (none of these
// quote anything) and fails the test unless it exits 0.
func (c *CLI) RunLine(t *testing.T, line string) string {
	t.Helper()
	code, out, errOut := c.Run(strings.Fields(line)[1:]...)
	if code != 0 {
		t.Fatalf("%s: exit %d: %s", line, code, errOut)
	}
	return out
}

// HelpExamples returns the example command lines of `kpreload ARGS --help`,
// each without "kpreload"; args are a group and its child, and every line
// must run that child.
func (c *CLI) HelpExamples(t *testing.T, args ...string) [][]string {
	t.Helper()
	code, help, _ := c.Run(append(args, "--help")...)
	if code != 0 {
		t.Fatalf("%v --help: exit %d", args, code)
	}
	_, ex, ok := strings.Cut(help, "Examples:\n")
	if !ok {
		t.Fatalf("%v --help has no Examples:\n%s", args, help)
	}
	ex, _, _ = strings.Cut(ex, "\n\n")
	var out [][]string
	for _, line := range strings.Split(strings.TrimSpace(ex), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "kpreload" || f[1] != args[0] || f[2] != args[1] {
			t.Fatalf("example %q is not a kpreload %s command", line, strings.Join(args, " "))
		}
		out = append(out, f[1:])
	}
	return out
}

// InCheckout makes a fresh working directory that looks like the
// repository's root (repo) to a command (testdata/ and images/ are the
// repository's), so the examples that name committed files run exactly as
// written without writing into the checkout.
func InCheckout(t *testing.T, repo string) {
	t.Helper()
	t.Chdir(t.TempDir())
	for _, d := range []string{"testdata", "images"} {
		if err := os.Symlink(filepath.Join(repo, d), d); err != nil {
			t.Fatal(err)
		}
	}
}

// WantIn fails unless s holds each of wants.
func WantIn(t *testing.T, what, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, s)
		}
	}
}

// MustWrite writes content to p, making its directory.
func MustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// HostileNames are driver names and versions that would drive a terminal
// printed raw: set its title and clear it, or forge a line of output.
var HostileNames = []struct{ Driver, Version string }{
	{"evil\x1b]0;PWNED\a\x1b[2J", "1.0"},
	{"nvidia", "1\r\nFAKE: line"},
	{"c1\u009b2J", "1"},
}

// RawControl returns the first control byte in s that a terminal acts on
// (newline and tab aside), or -1.
func RawControl(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\n' && c != '\t') || c == 0x7f {
			return int(c)
		}
	}
	if strings.ContainsRune(s, '\u009b') {
		return 0x9b
	}
	return -1
}

// PlanKernel is the kernel release PlanCache's boot index is for.
const PlanKernel = "6.1.0-56-cloud-amd64"

// PlanCache writes a cache directory holding only a boot index for PlanKernel
// (what plan reads) with the given sets; lists are copied beside the sets.
func PlanCache(t *testing.T, sets []bootindex.Set, lists map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	objs := filepath.Join(dir, "objects", "sha256")
	if err := os.MkdirAll(filepath.Join(dir, "index"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range lists {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(objs, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(objs, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range sets {
		sets[i].Dir = "../objects/sha256"
		sets[i].Modules = []bootindex.Module{{Name: "nvidia", Path: "aa/" + sets[i].ID, Vermagic: PlanKernel + " SMP mod_unload modversions "}}
	}
	if err := bootindex.Write(filepath.Join(dir, "index", PlanKernel+".json"), &bootindex.Index{Format: 1, Kernel: PlanKernel, Sets: sets}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// ChosenText names a driver decision's chosen set as testdata/decisions'
// table does: driver, version and flavour, or "" when none was chosen.
func ChosenText(dd *report.SelectionDriver) string {
	if dd == nil || dd.Chosen == nil {
		return ""
	}
	return dd.Driver + " " + dd.Chosen.Version + " " + dd.Chosen.Flavor
}
