package dkms

import (
	"errors"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseConf(t *testing.T) {
	tests := []struct {
		name string
		in   string
		// want lists the Vars expected (only these keys are compared, plus
		// the total count when wantN > 0).
		want     map[string]string
		wantN    int
		unparsed []string
	}{
		{
			name:  "quoted and bare",
			in:    "PACKAGE_NAME=\"nvidia-current\"\nPACKAGE_VERSION=535.261.03\nAUTOINSTALL=yes\n",
			want:  map[string]string{"PACKAGE_NAME": "nvidia-current", "PACKAGE_VERSION": "535.261.03", "AUTOINSTALL": "yes"},
			wantN: 3,
		},
		{
			name:  "arrays",
			in:    "BUILT_MODULE_NAME[0]=\"nvidia\"\nBUILT_MODULE_NAME[2]='nvidia-uvm'\nDEST_MODULE_LOCATION[0]=/updates/dkms\n",
			want:  map[string]string{"BUILT_MODULE_NAME[0]": "nvidia", "BUILT_MODULE_NAME[2]": "nvidia-uvm", "DEST_MODULE_LOCATION[0]": "/updates/dkms"},
			wantN: 3,
		},
		{
			name: "variables kept raw",
			in:   `MAKE[0]="make -C ${kernel_source_dir} M=${dkms_tree}/${PACKAGE_NAME}/${PACKAGE_VERSION}/build KERNEL_UNAME=$kernelver modules"`,
			want: map[string]string{"MAKE[0]": "make -C ${kernel_source_dir} M=${dkms_tree}/${PACKAGE_NAME}/${PACKAGE_VERSION}/build KERNEL_UNAME=$kernelver modules"},
		},
		{
			name: "escapes in double quotes",
			in:   `CLEAN="echo \"a\\b\" \$x \n"`,
			want: map[string]string{"CLEAN": `echo "a\b" $x \n`},
		},
		{
			name: "single quotes are literal",
			in:   `CLEAN='make "clean" $x \'`,
			want: map[string]string{"CLEAN": `make "clean" $x \`},
		},
		{
			name:  "comments, blanks, semicolons, crlf",
			in:    "# a comment\n\n  PACKAGE_NAME=foo # trailing\r\nA=1; B=2\nC=3 D=4\n",
			want:  map[string]string{"PACKAGE_NAME": "foo", "A": "1", "B": "2", "C": "3", "D": "4"},
			wantN: 5,
		},
		{
			name:  "continuations and multi-line quotes",
			in:    "MAKE[0]=\"make \\\n  modules\"\nPOST_BUILD=\"a\nb\"\nX=one\\\ntwo\n",
			want:  map[string]string{"MAKE[0]": "make   modules", "POST_BUILD": "a\nb", "X": "onetwo"},
			wantN: 3,
		},
		{
			name:  "command substitution kept",
			in:    "PACKAGE_VERSION=$(cat VERSION | tr -d ' ')\nKV=`uname -r`\n",
			want:  map[string]string{"PACKAGE_VERSION": "$(cat VERSION | tr -d ' ')", "KV": "`uname -r`"},
			wantN: 2,
		},
		{
			name:     "shell logic is reported, not run",
			in:       "if [ \"$kernelver\" = x ]; then\n  MAKE[0]=special\nfi\nA=1 some-command\nexport B=2\n",
			want:     map[string]string{"MAKE[0]": "special", "B": "2"},
			wantN:    2,
			unparsed: []string{`1: if [ "$kernelver" = x ]; then`, "3: fi", "4: A=1 some-command"},
		},
		{
			name:  "later assignment wins",
			in:    "PACKAGE_VERSION=1\nPACKAGE_VERSION=2\n",
			want:  map[string]string{"PACKAGE_VERSION": "2"},
			wantN: 1,
		},
		{
			name:  "empty value",
			in:    "STRIP[0]=\nAUTOINSTALL=\"\"\n",
			want:  map[string]string{"STRIP[0]": "", "AUTOINSTALL": ""},
			wantN: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConf(strings.NewReader(tt.in))
			if err != nil {
				t.Fatalf("ParseConf(%q) error: %v", tt.in, err)
			}
			for k, want := range tt.want {
				got, ok := c.Vars[k]
				if !ok || got != want {
					t.Errorf("ParseConf(%q).Vars[%q] = %q (set %v), want %q", tt.in, k, got, ok, want)
				}
			}
			if tt.wantN > 0 && len(c.Vars) != tt.wantN {
				t.Errorf("ParseConf(%q) has %d vars %v, want %d", tt.in, len(c.Vars), c.Vars, tt.wantN)
			}
			if !reflect.DeepEqual(c.Unparsed, tt.unparsed) {
				t.Errorf("ParseConf(%q).Unparsed = %q, want %q", tt.in, c.Unparsed, tt.unparsed)
			}
		})
	}
}

func TestParseConfErrors(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"A=\"open\nB=1\n", "line 1: unterminated double quote"},
		{"A=1\nB='open\n", "line 2: unterminated single quote"},
		{"A=$(echo\n", "line 1: unterminated $("},
		{"A=`x\n", "line 1: unterminated backquote"},
		{"A[99999999]=1\n", "out of range"},
	}
	for _, tt := range tests {
		_, err := ParseConf(strings.NewReader(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseConf(%q) error = %v, want one containing %q", tt.in, err, tt.want)
		}
	}
}

func TestConfFieldsAndModules(t *testing.T) {
	in := `PACKAGE_NAME="nvidia-current"
PACKAGE_VERSION="535.261.03"
CLEAN="make clean"
BUILT_MODULE_NAME[0]="nvidia"
DEST_MODULE_NAME[0]="nvidia-current"
BUILT_MODULE_NAME[1]="nvidia-uvm"
BUILT_MODULE_LOCATION[1]="uvm/"
DEST_MODULE_LOCATION[0]="/updates/dkms"
DEST_MODULE_LOCATION[1]="/updates/dkms"
MAKE[0]="make modules"
MAKE[1]="make KBUILD=old modules"
MAKE_MATCH[1]="^4\."
BUILD_EXCLUSIVE_KERNEL="^(5|6)\."
BUILD_EXCLUSIVE_ARCH="x86_64"
BUILD_EXCLUSIVE_CONFIG="CONFIG_PCI !CONFIG_X"
AUTOINSTALL=yes
`
	c, err := ParseConf(strings.NewReader(in))
	if err != nil {
		t.Fatalf("ParseConf: %v", err)
	}
	got := Conf{
		PackageName: c.PackageName, PackageVersion: c.PackageVersion,
		BuiltModuleName: c.BuiltModuleName, BuiltModuleLocation: c.BuiltModuleLocation,
		DestModuleName: c.DestModuleName, DestModuleLocation: c.DestModuleLocation,
		Make: c.Make, MakeMatch: c.MakeMatch, Clean: c.Clean, Autoinstall: c.Autoinstall,
		BuildExclusiveKernel: c.BuildExclusiveKernel, BuildExclusiveArch: c.BuildExclusiveArch,
		BuildExclusiveConfig: c.BuildExclusiveConfig,
	}
	want := Conf{
		PackageName: "nvidia-current", PackageVersion: "535.261.03",
		BuiltModuleName:     []string{"nvidia", "nvidia-uvm"},
		BuiltModuleLocation: []string{"", "uvm/"},
		DestModuleName:      []string{"nvidia-current"},
		DestModuleLocation:  []string{"/updates/dkms", "/updates/dkms"},
		Make:                []string{"make modules", "make KBUILD=old modules"},
		MakeMatch:           []string{"", `^4\.`},
		Clean:               "make clean", Autoinstall: "yes",
		BuildExclusiveKernel: `^(5|6)\.`, BuildExclusiveArch: "x86_64",
		BuildExclusiveConfig: "CONFIG_PCI !CONFIG_X",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseConf fields = %+v, want %+v", got, want)
	}
	mods := c.Modules()
	wantMods := []Module{
		{BuiltName: "nvidia", DestName: "nvidia-current", DestLocation: "/updates/dkms"},
		{BuiltName: "nvidia-uvm", BuiltLocation: "uvm/", DestName: "nvidia-uvm", DestLocation: "/updates/dkms"},
	}
	if !reflect.DeepEqual(mods, wantMods) {
		t.Errorf("Modules() = %+v, want %+v", mods, wantMods)
	}

	// dkms's default: with one DEST_MODULE_LOCATION and no BUILT_MODULE_NAME
	// the module is named after the package.
	c2, err := ParseConf(strings.NewReader("PACKAGE_NAME=foo\nDEST_MODULE_LOCATION=/extra\n"))
	if err != nil {
		t.Fatalf("ParseConf: %v", err)
	}
	if got, want := c2.Modules(), []Module{{BuiltName: "foo", DestName: "foo", DestLocation: "/extra"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Modules() = %+v, want %+v", got, want)
	}
}

// TestReadConfTestDriver reads the project's own test driver dkms.conf.
func TestReadConfTestDriver(t *testing.T) {
	c, err := ReadConf(filepath.Join(testDriverDir(t), "dkms.conf"))
	if err != nil {
		t.Fatalf("ReadConf: %v", err)
	}
	if c.PackageName != "kpreload-edu" || c.PackageVersion != "1.0.0" {
		t.Errorf("ReadConf(testdriver) name/version = %q/%q, want kpreload-edu/1.0.0", c.PackageName, c.PackageVersion)
	}
	want := []Module{{BuiltName: "kpreload_edu", DestName: "kpreload_edu", DestLocation: "/updates/dkms"}}
	if got := c.Modules(); !reflect.DeepEqual(got, want) {
		t.Errorf("ReadConf(testdriver).Modules() = %+v, want %+v", got, want)
	}
	if len(c.Make) != 1 || !strings.Contains(c.Make[0], "KPRELOAD_EDU_VERSION=${PACKAGE_VERSION}") {
		t.Errorf("ReadConf(testdriver).Make = %q, want one MAKE passing KPRELOAD_EDU_VERSION=${PACKAGE_VERSION}", c.Make)
	}
	if c.Autoinstall != "yes" || len(c.Unparsed) != 0 {
		t.Errorf("ReadConf(testdriver) Autoinstall=%q Unparsed=%q, want yes and none", c.Autoinstall, c.Unparsed)
	}
}

func TestReadConfMissing(t *testing.T) {
	_, err := ReadConf(filepath.Join(t.TempDir(), "dkms.conf"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadConf(missing) error = %v, want a not-exist error", err)
	}
}
