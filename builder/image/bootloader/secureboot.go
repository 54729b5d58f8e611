package bootloader

import (
	"context"
	"crypto/x509"
	"debug/pe"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/modkey"
	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/modsig"
	"github.com/kpreload/kpreload/kmodcache/secureboot"
)

// A GRUB image boots UEFI as Debian's cloud images do, through Debian's
// signed chain: shim (signed by Microsoft's UEFI CA, which every cloud's
// firmware trusts) → GRUB signed by Debian → Debian's signed kernel. The
// same files boot with Secure Boot off. What Secure Boot adds
// (Options.SecureBoot) is the module key: the drivers' modules are signed
// with the recipes' key, whose certificate must be a Machine Owner Key
// (shim's MokList, which the kernel puts on its .machine keyring) for the
// kernel to load them; a key in the firmware's db lands on the .platform
// keyring, which module signature checks do not use.

// SecureBootPackages are what a GRUB image adds for its signed UEFI boot
// path: shim (with mokutil, to enroll a module key from the running system)
// and GRUB signed by Debian.
var SecureBootPackages = []string{"shim-signed", "grub-efi-amd64-signed"}

// Signed boot files inside a root with SecureBootPackages.
const (
	// ShimImage is shim, signed by Microsoft's UEFI CA.
	ShimImage = "usr/lib/shim/shimx64.efi.signed"
	// MokManager is shim's MokManager, which enrolls a Machine Owner Key.
	MokManager = "usr/lib/shim/mmx64.efi.signed"
	// SignedGrub is GRUB's UEFI image signed by Debian.
	SignedGrub = "usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed"

	signedGrubDir  = "EFI/debian" // the prefix Debian's signed GRUB reads grub.cfg from
	shimLoaderGUID = modkey.ShimLockGUID
)

// shimESP returns the ESP files of a GRUB image's UEFI path: shim as the
// removable-media loader (EFI/BOOT/BOOTX64.EFI, which firmware boots with no
// NVRAM entry), the signed GRUB and MokManager beside it, and
// EFI/debian/grub.cfg, which sends the signed GRUB to the root filesystem's
// /boot/grub/grub.cfg as grub-install does for it.
func shimESP(root, work, rootUUID string) ([]disk.File, error) {
	for _, f := range []string{ShimImage, MokManager, SignedGrub} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			return nil, fmt.Errorf("UEFI boot through shim: %w (are %s in the image?)", err, strings.Join(SecureBootPackages, " and "))
		}
	}
	cfg := filepath.Join(work, "esp-grub.cfg")
	text := "search.fs_uuid " + rootUUID + " root\nset prefix=($root)/boot/grub\nconfigfile $prefix/grub.cfg\n"
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		return nil, err
	}
	return []disk.File{
		{Src: filepath.Join(root, ShimImage), Dst: install.ESPBootloader},
		{Src: filepath.Join(root, SignedGrub), Dst: "EFI/BOOT/grubx64.efi"},
		{Src: filepath.Join(root, MokManager), Dst: "EFI/BOOT/mmx64.efi"},
		{Src: cfg, Dst: signedGrubDir + "/grub.cfg"},
	}, nil
}

// CheckSignedKernel fails unless the kernel image at path carries an
// Authenticode signature (a PE certificate table), as Debian's signed
// linux-image packages do; GRUB under Secure Boot refuses any other.
func CheckSignedKernel(path string) error {
	f, err := pe.Open(path)
	if err != nil {
		return fmt.Errorf("kernel %s: %w", path, err)
	}
	defer f.Close()
	const certTable = 4 // IMAGE_DIRECTORY_ENTRY_SECURITY
	var size uint32
	switch h := f.OptionalHeader.(type) {
	case *pe.OptionalHeader64:
		if len(h.DataDirectory) > certTable {
			size = h.DataDirectory[certTable].Size
		}
	case *pe.OptionalHeader32:
		if len(h.DataDirectory) > certTable {
			size = h.DataDirectory[certTable].Size
		}
	}
	if size == 0 {
		return fmt.Errorf("kernel %s is not signed (no Authenticode signature): under Secure Boot GRUB refuses it; use Debian's signed linux-image package, not the -unsigned one", path)
	}
	return nil
}

// ModuleKey is the certificate a Secure Boot image's driver modules are
// signed with, and the files the build wrote for it.
type ModuleKey struct {
	// Subject is the certificate's subject common name (modinfo's signer).
	Subject string `json:"subject"`
	// SigKey is its serial number as modinfo prints sig_key.
	SigKey string `json:"sig_key"`
	// DER and PEM are the certificate beside the image: what GCE
	// (--signature-database-file), Azure and EC2 take as UEFI data, and what
	// mokutil --import takes. InImage is its path inside the image.
	DER     string `json:"der"`
	PEM     string `json:"pem"`
	InImage string `json:"in_image"`
	// OVMFVars is a UEFI variable store for QEMU: Microsoft's keys, Secure
	// Boot on, and this certificate as a MOK.
	OVMFVars string `json:"ovmf_vars"`
}

// ModuleCert returns the certificate the recipes sign their modules with.
// A Secure Boot image needs exactly one: recipes that sign nothing are
// named in the warning (their modules are refused at boot), recipes with
// another certificate are an error.
func ModuleCert(recipes []*recipe.Recipe) (cert *x509.Certificate, path string, unsigned []string, err error) {
	var from string
	for _, r := range recipes {
		if r.Signing == nil {
			unsigned = append(unsigned, r.Name)
			continue
		}
		p := r.Path(r.Signing.Cert)
		c, err := ReadCertificate(p)
		if err != nil {
			return nil, "", nil, fmt.Errorf("recipe %s: %w", r.Name, err)
		}
		if cert != nil && !c.Equal(cert) {
			return nil, "", nil, fmt.Errorf("recipes %s and %s sign with different certificates (%s, %s): a Secure Boot image enrolls one module key", from, r.Name, path, p)
		}
		cert, path, from = c, p, r.Name
	}
	if cert == nil {
		return nil, "", unsigned, fmt.Errorf("no recipe signs its modules (a recipe's signing: key and cert): under Secure Boot the kernel refuses unsigned modules")
	}
	return cert, path, unsigned, nil
}

// ReadCertificate reads an X.509 certificate in PEM or DER form.
func ReadCertificate(path string) (*x509.Certificate, error) {
	b, err := inroot.ReadPath(path, inroot.MaxText)
	if err != nil {
		return nil, fmt.Errorf("module certificate: %w", err)
	}
	if blk, _ := pem.Decode(b); blk != nil {
		b = blk.Bytes
	}
	c, err := x509.ParseCertificate(b)
	if err != nil {
		return nil, fmt.Errorf("module certificate %s: %w", path, err)
	}
	return c, nil
}

// SecureBootFiles puts the module certificate where the image's users and
// /init's refusals name it (secureboot.KeyFile) and writes, into tmp, the
// certificate as <name>.module-key.der and .pem and an OVMF variable store
// (Microsoft's keys, Secure Boot on) with it enrolled as a MOK (virt-fw-vars,
// python3-virt-firmware).
//
// The ModuleKey names the files where they go in outDir (the caller moves
// them there: ModuleKey.Files).
func SecureBootFiles(ctx context.Context, t Tools, root, tmp, outDir, name string, cert *x509.Certificate) (*ModuleKey, error) {
	sigKey := modsig.ColonHex(cert.SerialNumber.Bytes())
	k := &ModuleKey{
		Subject: cert.Subject.CommonName, SigKey: sigKey, InImage: secureboot.KeyFile(sigKey),
		DER: filepath.Join(outDir, name+".module-key.der"), PEM: filepath.Join(outDir, name+".module-key.pem"),
		OVMFVars: filepath.Join(outDir, name+".ovmf-vars.fd"),
	}
	der, pemFile, vars := filepath.Join(tmp, filepath.Base(k.DER)), filepath.Join(tmp, filepath.Base(k.PEM)), filepath.Join(tmp, filepath.Base(k.OVMFVars))
	if err := fileutil.WriteAtomicAll(filepath.Join(root, k.InImage), cert.Raw, 0o644, false); err != nil {
		return nil, err
	}
	if err := os.WriteFile(der, cert.Raw, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(pemFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o644); err != nil {
		return nil, err
	}
	if _, err := t.Runner.LookPath("virt-fw-vars"); err != nil {
		return nil, fmt.Errorf("virt-fw-vars is missing (python3-virt-firmware from bookworm-backports: scripts/deps.sh): %w", err)
	}
	if err := t.VirtFwVars.AddMOK(ctx, qemu.SecureBootVars, shimLoaderGUID, pemFile, vars); err != nil {
		return nil, fmt.Errorf("enroll the module key in an OVMF variable store: %w", err)
	}
	return k, nil
}

// Files are the module key's outputs, by their final paths.
func (k *ModuleKey) Files() []string { return []string{k.DER, k.PEM, k.OVMFVars} }
