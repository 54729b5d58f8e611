package dkms

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// shellQuote quotes s for a shell assignment in single quotes, a single
// quote in s closing them, escaped with a backslash, and opening them again.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// arrayKeyRE matches a Vars key of an array element, "NAME[i]".
var arrayKeyRE = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\[([0-9]+)\]$`)

// FuzzParseConf checks the dkms.conf parser, fed the dkms.conf of a recipe's
// source directory or of a driver's source package from the archive: no
// panic; an error comes without a Conf; an accepted file's typed fields agree
// with its Vars (a field holds the last assignment of its name, an array
// element that of NAME[i] or, for element 0, of NAME), array indexes stay
// within maxArrayIndex, Unparsed lines carry a line number of the file; and
// the Vars written back as single-quoted assignments parse to the same Vars,
// with nothing unparsed.
func FuzzParseConf(f *testing.F) {
	for _, p := range []string{"../../recipes/testdriver/dkms.conf", "../../recipes/testdriver-2/dkms.conf"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	for _, s := range []string{
		"", "PACKAGE_NAME=\"nvidia-current\"\nPACKAGE_VERSION=535.261.03\nAUTOINSTALL=yes\n",
		"BUILT_MODULE_NAME[0]=\"nvidia\"\nBUILT_MODULE_NAME[2]='nvidia-uvm'\nDEST_MODULE_LOCATION[0]=/updates/dkms\n",
		`MAKE[0]="make -C ${kernel_source_dir} M=${dkms_tree}/${PACKAGE_NAME}/${PACKAGE_VERSION}/build KERNEL_UNAME=$kernelver modules"`,
		`CLEAN="echo \"a\\b\" \$x \n"`, `CLEAN='make "clean" $x \'`,
		"# a comment\n\n  PACKAGE_NAME=foo # trailing\r\nA=1; B=2\nC=3 D=4\n",
		"MAKE[0]=\"make \\\n  modules\"\nPOST_BUILD=\"a\nb\"\nX=one\\\ntwo\n",
		"PACKAGE_VERSION=$(cat VERSION | tr -d ' ')\nKV=`uname -r`\n",
		"if [ \"$kernelver\" = x ]; then\n  MAKE[0]=special\nfi\nA=1 some-command\nexport B=2\n",
		"MAKE=a\nMAKE[0]=b\nMAKE[3]=c\nMAKE=d\n", "A=\"open\nB=1\n", "A=$(echo\n", "A=`x\n", "A[99999999]=1\n",
		"A[4096]=x\n", "A=${x\n", "A=\\", "A='it'\\''s'\n", "export  X=1\nexport=2\n", "A=1#x\nB=2 #y\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		c, err := ParseConf(strings.NewReader(in))
		if err != nil {
			if c != nil {
				t.Fatalf("ParseConf returned %+v and error %v", c, err)
			}
			return
		}
		checkConf(t, in, c)
		var b strings.Builder
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range c.Vars {
				if !yield(k) {
					return
				}
			}
		}) {
			fmt.Fprintf(&b, "%s=%s\n", k, shellQuote(c.Vars[k]))
		}
		again, err := ParseConf(strings.NewReader(b.String()))
		if err != nil {
			t.Fatalf("ParseConf of the Vars written back:\n%s\nerror %v", b.String(), err)
		}
		if !reflect.DeepEqual(again.Vars, c.Vars) || len(again.Unparsed) > 0 {
			t.Fatalf("Vars written back\n%s\nparse to %q (unparsed %q), want %q", b.String(), again.Vars, again.Unparsed, c.Vars)
		}
	})
}

// checkConf checks that c's typed fields agree with its Vars (see FuzzParseConf).
func checkConf(t *testing.T, in string, c *Conf) {
	t.Helper()
	scalars := map[string]string{
		"PACKAGE_NAME": c.PackageName, "PACKAGE_VERSION": c.PackageVersion, "CLEAN": c.Clean, "AUTOINSTALL": c.Autoinstall,
		"BUILD_EXCLUSIVE_KERNEL": c.BuildExclusiveKernel, "BUILD_EXCLUSIVE_ARCH": c.BuildExclusiveArch, "BUILD_EXCLUSIVE_CONFIG": c.BuildExclusiveConfig,
	}
	for name, got := range scalars {
		if got != c.Vars[name] {
			t.Fatalf("%s = %q, but Vars[%s] = %q", name, got, name, c.Vars[name])
		}
	}
	arrays := map[string][]string{
		"BUILT_MODULE_NAME": c.BuiltModuleName, "BUILT_MODULE_LOCATION": c.BuiltModuleLocation,
		"DEST_MODULE_NAME": c.DestModuleName, "DEST_MODULE_LOCATION": c.DestModuleLocation,
		"MAKE": c.Make, "MAKE_MATCH": c.MakeMatch,
	}
	for name, arr := range arrays {
		if len(arr) > maxArrayIndex+1 {
			t.Fatalf("%s has %d elements, more than maxArrayIndex allows", name, len(arr))
		}
		for i, got := range arr {
			elem, isElem := c.Vars[fmt.Sprintf("%s[%d]", name, i)]
			whole, isWhole := c.Vars[name]
			switch {
			case isElem && got == elem, i == 0 && isWhole && got == whole, !isElem && !(i == 0 && isWhole) && got == "":
			default:
				t.Fatalf("%s[%d] = %q, but Vars[%s[%d]] = %q (set %v), Vars[%s] = %q (set %v)", name, i, got, name, i, elem, isElem, name, whole, isWhole)
			}
		}
	}
	if n := max(len(c.BuiltModuleName), len(c.BuiltModuleLocation), len(c.DestModuleName), len(c.DestModuleLocation)); len(c.Modules()) != n {
		t.Fatalf("Modules() = %+v, want %d modules", c.Modules(), n)
	}
	for k := range c.Vars {
		if m := arrayKeyRE.FindStringSubmatch(k); m != nil {
			if i, err := strconv.Atoi(m[2]); err != nil || i > maxArrayIndex || m[2] != strconv.Itoa(i) {
				t.Fatalf("Vars key %q: index not a canonical number within %d", k, maxArrayIndex)
			}
		}
	}
	lines := strings.Count(in, "\n") + 1
	for _, u := range c.Unparsed {
		n, _, ok := strings.Cut(u, ": ")
		if i, err := strconv.Atoi(n); !ok || err != nil || i < 1 || i > lines {
			t.Fatalf("Unparsed line %q has no line number of the file (1..%d)", u, lines)
		}
	}
}
