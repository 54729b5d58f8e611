package secureboot

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// procKeys is /proc/keys as a Debian kernel booted under Secure Boot with a
// MOK shows it (shortened).
const procKeys = `0a1b2c3d I------     1 perm 1f0b0000     0     0 keyring   .builtin_trusted_keys: 1
1f2e3d4c I------     1 perm 1f010000     0     0 asymmetri Debian Secure Boot CA: 6ccece7e4c6c0d1f6149f3dd27dfcc5cbb419ea1: X509.rsa cbb419ea []
2a2b2c2d I------     1 perm 1f030000     0     0 asymmetri Microsoft Corporation: Microsoft Corporation UEFI CA 2011: 13adbf4309bd82709c8cd54f316ed522988a1bd4: X509.rsa 988a1bd4 []
3a3b3c3d I------     1 perm 1f030000     0     0 asymmetri kpreload test module key: 5e9d2f0a11bb22cc33dd44ee55ff66a7b8c9d0e1: X509.rsa b8c9d0e1 []
`

func TestParseKeys(t *testing.T) {
	got := ParseKeys([]byte(procKeys))
	want := []Key{
		{"Debian Secure Boot CA", "6ccece7e4c6c0d1f6149f3dd27dfcc5cbb419ea1"},
		{"Microsoft Corporation: Microsoft Corporation UEFI CA 2011", "13adbf4309bd82709c8cd54f316ed522988a1bd4"},
		{"kpreload test module key", "5e9d2f0a11bb22cc33dd44ee55ff66a7b8c9d0e1"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseKeys = %+v, want %+v", got, want)
	}
}

// tree writes a sysfs and procfs fixture and returns their roots.
func tree(t *testing.T, sb byte, efi bool, lockdown, sigEnforce string) (sys, proc string) {
	t.Helper()
	dir := t.TempDir()
	sys, proc = filepath.Join(dir, "sys"), filepath.Join(dir, "proc")
	write := func(p string, b []byte) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bp := make([]byte, 4096)
	bp[secureBootOffset] = sb
	write(filepath.Join(sys, "kernel/boot_params/data"), bp)
	if efi {
		write(filepath.Join(sys, "firmware/efi/fw_platform_size"), []byte("64\n"))
	}
	if lockdown != "" {
		write(filepath.Join(sys, "kernel/security/lockdown"), []byte(lockdown+"\n"))
	}
	write(filepath.Join(sys, "module/module/parameters/sig_enforce"), []byte(sigEnforce+"\n"))
	write(filepath.Join(proc, "keys"), []byte(procKeys))
	return sys, proc
}

func TestRead(t *testing.T) {
	tests := []struct {
		name                   string
		sb                     byte
		efi                    bool
		lockdown, enforce      string
		wantSB, wantLock       string
		wantEnforced, wantKeys bool
	}{
		{"secure boot", 3, true, "none [integrity] confidentiality", "N", Enabled, "integrity", true, true},
		{"uefi without", 2, true, "[none] integrity confidentiality", "N", Disabled, "none", false, false},
		{"bios", 0, false, "[none] integrity confidentiality", "N", NotUEFI, "none", false, false},
		{"sig_enforce", 0, false, "[none] integrity confidentiality", "Y", NotUEFI, "none", true, true},
		{"uefi unrecorded, no securityfs", 0, true, "", "N", Unknown, "", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sys, proc := tree(t, tt.sb, tt.efi, tt.lockdown, tt.enforce)
			s := Read(sys, proc, "")
			if s.SecureBoot != tt.wantSB || s.Lockdown != tt.wantLock || s.Enforced != tt.wantEnforced || (len(s.Keys) > 0) != tt.wantKeys {
				t.Errorf("Read = %+v, want secure boot %s, lockdown %q, enforced %v, keys %v", s, tt.wantSB, tt.wantLock, tt.wantEnforced, tt.wantKeys)
			}
		})
	}
	// Without securityfs, the command line's lockdown= stands in.
	sys, proc := tree(t, 0, false, "", "N")
	if s := Read(sys, proc, "integrity"); s.Lockdown != "integrity" || !s.Enforced {
		t.Errorf("Read with lockdown=integrity = %+v, want lockdown integrity, enforced", s)
	}
}

func TestRefusal(t *testing.T) {
	sys, proc := tree(t, 3, true, "none [integrity] confidentiality", "N")
	on := Read(sys, proc, "")
	off := State{SecureBoot: Disabled, Lockdown: "none"}
	noKeys := on
	noKeys.Keys, noKeys.KeysError = nil, "permission denied"
	enrolled := Module{Name: "edu", Signer: "kpreload test module key", SigKey: "01:02:03"}
	byID := Module{Name: "edu", SigKey: "5E:9D:2F:0A:11:BB:22:CC:33:DD:44:EE:55:FF:66:A7:B8:C9:D0:E1"}
	stranger := Module{Name: "edu", Signer: "someone else", SigKey: "0A:0B"}
	unsigned := Module{Name: "edu", Unsigned: true}
	tests := []struct {
		name  string
		s     *State
		mods  []Module
		wants []string // "" means no refusal
	}{
		{"enrolled by subject", &on, []Module{enrolled}, nil},
		{"enrolled by key id", &on, []Module{byID}, nil},
		{"not enrolled", &on, []Module{enrolled, stranger}, []string{`"someone else" (sig_key 0A:0B), which no kernel keyring holds`, "Secure Boot is on (lockdown integrity)", "mokutil --import /usr/share/kpreload/module-keys/0a0b.der"}},
		{"unsigned", &on, []Module{enrolled, unsigned}, []string{"module edu is unsigned, and Secure Boot is on"}},
		{"nothing enforced", &off, []Module{unsigned, stranger}, nil},
		{"nil state", nil, []Module{unsigned}, nil},
		{"keys unreadable: only unsigned refused", &noKeys, []Module{stranger}, nil},
		{"keys unreadable, unsigned", &noKeys, []Module{unsigned}, []string{"is unsigned"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.s.Refusal(tt.mods)
			if (got == "") != (len(tt.wants) == 0) {
				t.Fatalf("Refusal = %q, want refusal %v", got, len(tt.wants) > 0)
			}
			for _, w := range tt.wants {
				if !strings.Contains(got, w) {
					t.Errorf("Refusal = %q, want it to contain %q", got, w)
				}
			}
		})
	}
}

func TestExpect(t *testing.T) {
	tests := []struct {
		name       string
		secureBoot string
		flag       string
		expected   bool
		fault      string // substring; "" for none
	}{
		{"built for Secure Boot, on", Enabled, ExpectValue, true, ""},
		{"built for Secure Boot, off", Disabled, ExpectValue, true, "built for Secure Boot (kpreload.secureboot=expected), but Secure Boot is disabled"},
		{"built for Secure Boot, BIOS", NotUEFI, ExpectValue, true, "but Secure Boot is not-uefi"},
		{"built for Secure Boot, state unreadable", Unknown, ExpectValue, true, "but the firmware's Secure Boot state cannot be read"},
		{"not built for it", Disabled, "", false, ""},
		{"another value", Disabled, "yes", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := State{SecureBoot: tt.secureBoot}
			got := s.Expect(tt.flag)
			if s.Expected != tt.expected || got != s.Fault || !strings.Contains(got, tt.fault) || (got == "") != (tt.fault == "") {
				t.Errorf("Expect(%q) = %q, expected %v; want fault containing %q, expected %v", tt.flag, got, s.Expected, tt.fault, tt.expected)
			}
		})
	}
}
