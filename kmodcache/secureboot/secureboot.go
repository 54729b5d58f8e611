// Package secureboot reads what the running kernel enforces about module
// signatures, and why: UEFI Secure Boot (as the EFI stub recorded it), the
// lockdown mode, module.sig_enforce, and the certificates on the kernel's
// keyrings (/proc/keys). /init, `kpreload plan` and `kpreload switch` give it
// to gpu/selection, which refuses a driver set the kernel would refuse
// (unsigned, or signed by a key no keyring holds) before the kernel is called.
//
// It only reads files; its roots are values, so tests run on fixture trees.
package secureboot

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Secure Boot states, as State.SecureBoot records them.
const (
	// Enabled: the firmware booted with Secure Boot on.
	Enabled = "enabled"
	// Disabled: UEFI with Secure Boot off.
	Disabled = "disabled"
	// NotUEFI: the kernel was not booted by UEFI firmware (BIOS).
	NotUEFI = "not-uefi"
	// Unknown: UEFI, but the state was not recorded or cannot be read.
	Unknown = "unknown"
)

// KeyDir is where an image keeps the certificates its driver sets are
// signed with, one DER file per key (KeyFile), for `mokutil --import`.
const KeyDir = "/usr/share/kpreload/module-keys"

// KeyFile is the path in an image of the certificate a module names by
// sig_key (modinfo's form, "1A:2B:..."): KeyDir/<lower-case hex>.der.
func KeyFile(sigKey string) string {
	return KeyDir + "/" + keyHex(sigKey) + ".der"
}

// keyHex is sigKey as the kernel writes key ids: lower-case hex, no colons.
func keyHex(sigKey string) string {
	return strings.ToLower(strings.ReplaceAll(sigKey, ":", ""))
}

// Key is one certificate on a kernel keyring, as /proc/keys describes it.
type Key struct {
	// Subject is the certificate's subject as the kernel names it (its
	// common name, or "organisation: common name").
	Subject string `json:"subject"`
	// ID is the certificate's subject key identifier (or, lacking one, its
	// serial number) in lower-case hex.
	ID string `json:"id"`
}

// State is what the running kernel enforces about module signatures.
type State struct {
	// SecureBoot is Enabled, Disabled, NotUEFI or Unknown.
	SecureBoot string `json:"secure_boot"`
	// Lockdown is the kernel's lockdown mode (none, integrity,
	// confidentiality), "" when it cannot be read.
	Lockdown string `json:"lockdown,omitempty"`
	// SigEnforce is the module.sig_enforce parameter.
	SigEnforce bool `json:"sig_enforce,omitempty"`
	// Enforced says the kernel refuses modules without a valid signature
	// from a key on its keyrings: sig_enforce, or any lockdown.
	Enforced bool `json:"enforced"`
	// Keys are the X.509 certificates on the kernel's keyrings; read only
	// when Enforced.
	Keys []Key `json:"keys,omitempty"`
	// KeysError says why Keys could not be read; a set's signer is then
	// not checked (the kernel still is).
	KeysError string `json:"keys_error,omitempty"`
	// Expected is true when the image was built for Secure Boot (the
	// kernel command line carries ExpectFlag=ExpectValue).
	Expected bool `json:"expected,omitempty"`
	// Fault says what is wrong when an image built for Secure Boot runs
	// without it; the boot goes on.
	Fault string `json:"fault,omitempty"`
}

// ExpectFlag and ExpectValue are the kernel command line parameter an image
// built with --secure-boot boots with: kpreload.secureboot=expected.
const (
	ExpectFlag  = "kpreload.secureboot"
	ExpectValue = "expected"
)

// Expect records the value of the command line's ExpectFlag ("" when absent)
// and, when it asks for Secure Boot and the firmware did not turn it on,
// the fault: the modules' signatures go unchecked. It returns the fault.
func (s *State) Expect(flag string) string {
	s.Expected = flag == ExpectValue
	s.Fault = ""
	switch {
	case !s.Expected || s.SecureBoot == Enabled:
	case s.SecureBoot == Unknown:
		s.Fault = fmt.Sprintf("this image was built for Secure Boot (%s=%s), but the firmware's Secure Boot state cannot be read: module signatures may go unchecked", ExpectFlag, ExpectValue)
	default:
		s.Fault = fmt.Sprintf("this image was built for Secure Boot (%s=%s), but Secure Boot is %s: the kernel does not check module signatures and the boot goes on; turn Secure Boot on for the instance (UEFI firmware with Secure Boot: GCE Shielded VM, Azure Trusted Launch, EC2 UEFI Secure Boot, kpreload boot --firmware uefi-secure)", ExpectFlag, ExpectValue, s.SecureBoot)
	}
	return s.Fault
}

// secureBootOffset is struct boot_params' secure_boot byte (x86,
// arch/x86/include/uapi/asm/bootparam.h), which the EFI stub sets from enum
// efi_secureboot_mode: 2 disabled, 3 enabled.
const secureBootOffset = 0x1ec

// Read reads the state under the sysfs root sys and the procfs root proc
// (normally "/sys" and "/proc"); lockdownFlag is the command line's
// lockdown= value, used when securityfs cannot be read.
func Read(sys, proc, lockdownFlag string) State {
	var s State
	s.SecureBoot = NotUEFI
	if _, err := os.Stat(filepath.Join(sys, "firmware/efi")); err == nil {
		s.SecureBoot = Unknown
	}
	if bp, err := os.ReadFile(filepath.Join(sys, "kernel/boot_params/data")); err == nil && len(bp) > secureBootOffset {
		switch bp[secureBootOffset] {
		case 2:
			s.SecureBoot = Disabled
		case 3:
			s.SecureBoot = Enabled
		}
	}
	if b, err := os.ReadFile(filepath.Join(sys, "kernel/security/lockdown")); err == nil {
		s.Lockdown = selected(string(b))
	} else if lockdownFlag == "integrity" || lockdownFlag == "confidentiality" {
		s.Lockdown = lockdownFlag
	}
	if b, err := os.ReadFile(filepath.Join(sys, "module/module/parameters/sig_enforce")); err == nil {
		s.SigEnforce = strings.TrimSpace(string(b)) == "Y"
	}
	s.Enforced = s.SigEnforce || (s.Lockdown != "" && s.Lockdown != "none")
	if s.Enforced {
		b, err := os.ReadFile(filepath.Join(proc, "keys"))
		if err != nil {
			s.KeysError = err.Error()
		} else {
			s.Keys = ParseKeys(b)
		}
	}
	return s
}

// selected returns the bracketed word of a securityfs list such as
// "none [integrity] confidentiality".
func selected(list string) string {
	for _, w := range strings.Fields(list) {
		if strings.HasPrefix(w, "[") && strings.HasSuffix(w, "]") {
			return strings.Trim(w, "[]")
		}
	}
	return ""
}

// ParseKeys returns the X.509 certificates /proc/keys lists: lines of type
// "asymmetric" (shown cut to nine characters) whose description is
// "<subject>: <hex id>", followed by ": X509.<algorithm> ...".
func ParseKeys(procKeys []byte) []Key {
	var keys []Key
	for _, line := range bytes.Split(procKeys, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) < 9 || !strings.HasPrefix(f[7], "asymmetri") {
			continue
		}
		desc := strings.Join(f[8:], " ")
		if i := strings.LastIndex(desc, ": X509."); i >= 0 {
			desc = desc[:i]
		}
		i := strings.LastIndex(desc, ": ")
		if i < 0 {
			continue
		}
		id := desc[i+2:]
		if !isHex(id) {
			continue
		}
		keys = append(keys, Key{Subject: desc[:i], ID: strings.ToLower(id)})
	}
	return keys
}

func isHex(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return false
		}
	}
	return true
}

// Enrolled reports whether a keyring holds the certificate a module's
// signature names: one whose id is sigKey (a signature naming its key by
// subject key identifier, or a certificate without one, whose id is its
// serial), or whose subject is signer (sign-file's certificates are
// self-signed, so the issuer a signature names is the subject).
func (s *State) Enrolled(signer, sigKey string) bool {
	id := keyHex(sigKey)
	for _, k := range s.Keys {
		if (id != "" && k.ID == id) || (signer != "" && (k.Subject == signer || strings.HasSuffix(k.Subject, ": "+signer))) {
			return true
		}
	}
	return false
}

// Module is what Refusal needs to know of a module of a driver set.
type Module struct {
	Name           string
	Unsigned       bool
	Signer, SigKey string
}

// Refusal returns why the kernel would refuse a set of modules, or "" when
// it would not (or nothing is enforced): the first module that is unsigned,
// or signed with a certificate no keyring holds, with the command that
// enrolls it.
func (s *State) Refusal(mods []Module) string {
	if s == nil || !s.Enforced {
		return ""
	}
	why := s.why()
	for _, m := range mods {
		if m.Unsigned {
			return fmt.Sprintf("module %s is unsigned, and %s: the kernel refuses unsigned modules (sign the recipe's modules: its signing: key)", m.Name, why)
		}
	}
	if s.KeysError != "" {
		return ""
	}
	for _, m := range mods {
		if m.SigKey == "" && m.Signer == "" {
			continue
		}
		if !s.Enrolled(m.Signer, m.SigKey) {
			return fmt.Sprintf("module %s is signed by %q (sig_key %s), which no kernel keyring holds, and %s: "+
				"enroll that certificate as a Machine Owner Key with `mokutil --import %s`, reboot and confirm it at the console (MokManager)",
				m.Name, m.Signer, m.SigKey, why, KeyFile(m.SigKey))
		}
	}
	return ""
}

// why says what enforces signatures, such as "Secure Boot is on (lockdown
// integrity)".
func (s *State) why() string {
	switch {
	case s.SecureBoot == Enabled && s.Lockdown != "" && s.Lockdown != "none":
		return "Secure Boot is on (lockdown " + s.Lockdown + ")"
	case s.Lockdown != "" && s.Lockdown != "none":
		return "the kernel is locked down (" + s.Lockdown + ")"
	}
	return "module.sig_enforce=1"
}

// Summary is a one-line description for the console and the report's events.
func (s *State) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Secure Boot %s", s.SecureBoot)
	if s.Lockdown != "" {
		fmt.Fprintf(&b, ", lockdown %s", s.Lockdown)
	}
	if s.SigEnforce {
		b.WriteString(", module.sig_enforce=1")
	}
	if s.Enforced {
		fmt.Fprintf(&b, ": module signatures enforced, %d certificates on the kernel's keyrings", len(s.Keys))
		if s.KeysError != "" {
			fmt.Fprintf(&b, " (cannot read them: %s)", s.KeysError)
		}
	}
	return b.String()
}
