package cli

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
)

// misspell returns name with its last letter changed: one edit away.
func misspell(name string) string {
	last := byte('x')
	if name[len(name)-1] == 'x' {
		last = 'q'
	}
	return name[:len(name)-1] + string(last)
}

// TestCommandTree walks the whole command tree: every group refuses a
// misspelled child (non-zero, "Did you mean" and the child), every command
// answers a misspelled flag with the flag it meant, every argument check
// names the usage instead of cobra's "accepts 1 arg(s)", and every command's
// --help has an Examples section.
func TestCommandTree(t *testing.T) {
	for _, c := range treeCommands() {
		path := c.CommandPath()
		if c.HasAvailableSubCommands() {
			child := c.Commands()[0]
			for _, s := range c.Commands() {
				if s.IsAvailableCommand() && s.Name() != "help" {
					child = s
					break
				}
			}
			typo := misspell(child.Name())
			code, out, errOut := runCLI(append(clitest.Words(c), typo)...)
			if code == 0 || out != "" || !strings.Contains(errOut, "Did you mean this?\n\t"+child.Name()+"\n") {
				t.Errorf("%s %s: exit %d, stdout %q, stderr %q; want a non-zero exit and \"Did you mean\" %s", path, typo, code, out, errOut, child.Name())
			}
		}
		// An unknown flag: one of the command's own, misspelled.
		var flag *pflag.Flag
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if flag == nil && !f.Hidden && f.Name != "help" && len(f.Name) > 3 {
				flag = f
			}
		})
		name := "help"
		if flag != nil {
			name = flag.Name
		}
		typo := misspell(name)
		code, _, errOut := runCLI(append(clitest.Words(c), "--"+typo)...)
		if want := "unknown flag: --" + typo + "; did you mean --" + name + "?"; code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("%s --%s: exit %d, stderr %q; want a non-zero exit and %q", path, typo, code, errOut, want)
		}
		// Arguments: the checks are called, not the commands (which would
		// do their work when the arguments are right).
		if c.Args != nil && !c.HasSubCommands() && c.Name() != "help" {
			for _, args := range [][]string{nil, strings.Fields("a b c d e f g h i")} {
				if err := c.Args(c, args); err != nil && (strings.Contains(err.Error(), "arg(s)") || !strings.Contains(err.Error(), strings.Join(clitest.Words(c), " "))) {
					t.Errorf("%s with %d arguments: %v; want the usage (%s …), not cobra's count", path, len(args), err, path)
				}
			}
		}
		if !strings.Contains(helpOf(t, c), "\nExamples:\n") {
			t.Errorf("%s --help has no Examples section", path)
		}
	}
	code, _, errOut := runCLI("build", "--jobs", "x", "testdriver")
	if want := "kpreload: build: invalid argument \"x\" for \"--jobs\" flag"; code == 0 || !strings.HasPrefix(errOut, want) {
		t.Errorf("kpreload build --jobs x: exit %d, %q; want %q…", code, errOut, want)
	}
	code, _, errOut = runCLI("completion", "bash", "extra")
	if want := "kpreload: completion bash takes no arguments, got \"extra\": kpreload completion bash\n"; code == 0 || errOut != want {
		t.Errorf("kpreload completion bash extra: exit %d, %q; want %q", code, errOut, want)
	}
	code, _, errOut = runCLI("switch")
	if want := "kpreload: switch needs the driver version or branch to switch to (VERSION|BRANCH): kpreload switch VERSION|BRANCH [flags]\n"; code == 0 || errOut != want {
		t.Errorf("kpreload switch: exit %d, %q; want %q", code, errOut, want)
	}
}

// exampleTests names, for each command whose examples a test of its own runs
// exactly as written, that test (a function of this package, or
// "package-dir:function" elsewhere), or the tests, space-separated, that run
// them between them.
var exampleTests = map[string]string{
	"kpreload switch":                "cmd/kpreload/internal/switchcmd:TestSwitchHelpExamples",
	"kpreload plan":                  "cmd/kpreload/internal/plancmd:TestPlanHelpExamples",
	"kpreload xorg":                  "cmd/kpreload/internal/xorgcmd:TestXorgHelpExamples",
	"kpreload match":                 "cmd/kpreload/internal/matchcmd:TestMatchHelpExamples",
	"kpreload cdi generate":          "cmd/kpreload/internal/cdicmd:TestCDIGenerateHelpExamples",
	"kpreload follow":                "TestFollowHelpExamples",
	"kpreload keys show":             "cmd/kpreload/internal/keyscmd:TestKeysHelpExamples",
	"kpreload keys export":           "cmd/kpreload/internal/keyscmd:TestKeysHelpExamples",
	"kpreload keys rotate":           "cmd/kpreload/internal/keyscmd:TestKeysHelpExamples",
	"kpreload recipe supported-gpus": "cmd/kpreload/internal/recipecmd:TestRecipeHelpExamples",
	"kpreload report":                "cmd/kpreload/internal/reportcmd:TestReportHelpExamples",
	"kpreload rootdisk":              "cmd/kpreload/internal/rootdiskcmd:TestRootdiskHelpExamples",
	"kpreload cdi refresh":           "cmd/kpreload/internal/cdicmd:TestCDIRefreshHelpExamples",
	"kpreload status":                "cmd/kpreload/internal/installcmd:TestStatusHelpExamples",
	"kpreload kernel-hook":           "builder/follow/e2e:checkRefreshExample",
	// TestGenericHelpExamples runs these in a directory holding ./cache.
	"kpreload help":                    "TestGenericHelpExamples",
	"kpreload completion":              "TestGenericHelpExamples",
	"kpreload completion bash":         "TestGenericHelpExamples",
	"kpreload completion zsh":          "TestGenericHelpExamples",
	"kpreload completion fish":         "TestGenericHelpExamples",
	"kpreload completion powershell":   "TestGenericHelpExamples",
	"kpreload cache keygen":            "TestCacheHelpExamples",
	"kpreload kernels fetch":           "TestCacheHelpExamples",
	"kpreload cache add":               "TestCacheHelpExamples",
	"kpreload build":                   "TestCacheHelpExamples",
	"kpreload cache ls":                "TestCacheHelpExamples",
	"kpreload cache index":             "TestCacheHelpExamples",
	"kpreload cache verify":            "TestCacheHelpExamples",
	"kpreload cache push":              "TestCacheHelpExamples",
	"kpreload cache pull":              "TestCacheHelpExamples",
	"kpreload modinfo":                 "TestCacheHelpExamples",
	"kpreload cdi hook update-ldcache": "cmd/kpreload/internal/cdicmd:TestHookHelpExamples",
	"kpreload k8s refresh":             "cmd/kpreload/internal/k8scmd:TestK8sRefreshHelpExamples",
	"kpreload cache rm":                "cmd/kpreload/internal/cachecmd:TestCacheRmHelpExamples",
	"kpreload copy-in":                 "cmd/kpreload/internal/copyincmd:TestCopyInHelpExamples",
	"kpreload boot":                    "cmd/kpreload/internal/bootcmd:TestBootHelpExamples",
	"kpreload user-data apply":         "cmd/kpreload/internal/userdatacmd:TestUserDataHelpExamples",
	"kpreload initramfs":               "cmd/kpreload/internal/initramfscmd:TestInitramfsHelpExamples",
	"kpreload install":                 "cmd/kpreload/internal/installcmd:TestInstallHelpExamples builder/adopt:adoptBootUpdate", // --stage: a diskimage-builder image
	"kpreload image build":             "cmd/kpreload/internal/imagecmd:TestImageBuildHelpExamples",
}

// TestEveryExampleHasItsTest: each command's example lines are run by the
// test exampleTests names (which must exist), or are each one of another
// command's example lines that is (a group showing its child's).
func TestEveryExampleHasItsTest(t *testing.T) {
	funcs := map[string]bool{}
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for name, o := range f.Scope.Objects {
				if o.Kind == 5 { // ast.Fun
					funcs[name] = true
				}
			}
		}
	}
	run := map[string]bool{} // example lines some test runs
	cmds := treeCommands()
	for _, c := range cmds {
		tests, ok := exampleTests[c.CommandPath()]
		if !ok {
			continue
		}
		for _, test := range strings.Fields(tests) {
			if dir, fn, ok := strings.Cut(test, ":"); ok {
				matches, _ := filepath.Glob(filepath.Join("../../..", dir, "*_test.go"))
				found := false
				for _, m := range matches {
					b, _ := os.ReadFile(m)
					found = found || strings.Contains(string(b), "func "+fn+"(")
				}
				if !found {
					t.Errorf("%s: %s has no function %s", c.CommandPath(), dir, fn)
				}
			} else if !funcs[test] {
				t.Errorf("%s: no test function %s in this package", c.CommandPath(), test)
			}
		}
		for _, l := range exampleLines(t, c) {
			run[l] = true
		}
	}
	var missing []string
	for _, c := range cmds {
		p := c.CommandPath()
		lines := exampleLines(t, c)
		if _, ok := exampleTests[p]; ok {
			continue
		}
		copied := len(lines) > 0
		for _, l := range lines {
			copied = copied && run[l]
		}
		if !copied {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("no test runs the examples of: %s (name the test in exampleTests)", strings.Join(missing, ", "))
	}
}

// TestGenericHelpExamples runs, exactly as written, the examples of the
// commands exampleTests gives it, in a directory holding ./cache (the sets of
// testdata/decisions): each exits 0 and prints something.
func TestGenericHelpExamples(t *testing.T) {
	tab := readDecisionTable(t)
	cache := tab.cache(t)
	cmds := treeCommands()
	t.Chdir(t.TempDir())
	if err := os.Symlink(cache, "cache"); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range cmds {
		if exampleTests[c.CommandPath()] != "TestGenericHelpExamples" {
			continue
		}
		for _, l := range exampleLines(t, c) {
			code, out, errOut := runCLI(strings.Fields(l)[1:]...)
			if code != 0 || out == "" {
				t.Errorf("example %q of %s: exit %d, stdout %d bytes: %s", l, c.CommandPath(), code, len(out), errOut)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no example run")
	}
}
