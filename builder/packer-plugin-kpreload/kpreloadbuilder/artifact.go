package kpreloadbuilder

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/builder/image/formats"
)

// Artifact is a built image: its disk files and manifest.
type Artifact struct {
	// Name is the image's name.
	Name string
	// Disks maps each written format ("raw", "qcow2", "vhd", "vmdk", "gce") to
	// its file.
	Disks map[string]string
	// ManifestPath is the manifest JSON file.
	ManifestPath string
	// Kernels are the image's kernels, the default boot entry first.
	Kernels []string
	// Drivers describes the driver sets, as "recipe version kernel".
	Drivers []string
	// BootFirmware is what the image boots under ("uefi", or "bios" and
	// "uefi"), and SecureBoot whether it boots with Secure Boot on: what a
	// cloud's import asks (the manifest's boot_firmware and secure_boot).
	BootFirmware []string
	SecureBoot   bool

	order []string
}

// newArtifact describes the image a manifest (written at manifestPath) records.
func newArtifact(m *image.Manifest, manifestPath string) *Artifact {
	a := &Artifact{Name: m.Name, Disks: map[string]string{}, ManifestPath: manifestPath, Kernels: m.Kernels,
		BootFirmware: m.BootFirmware, SecureBoot: m.SecureBoot}
	for _, f := range m.Files {
		a.Disks[f.Format] = f.Path
		a.order = append(a.order, f.Path)
	}
	if k := m.ModuleKey; k != nil {
		// A Secure Boot image's module key travels with it: the clouds
		// take the certificate as UEFI signature data.
		a.order = append(a.order, k.DER, k.PEM, k.OVMFVars)
	}
	for _, d := range m.Drivers {
		a.Drivers = append(a.Drivers, fmt.Sprintf("%s %s %s", d.Recipe, d.Version, d.Kernel))
	}
	return a
}

// BuilderId is the kpreload builder's id.
func (a *Artifact) BuilderId() string { return BuilderID }

// Files lists every disk image, in the order of formats as written, a
// Secure Boot image's module key files (DER, PEM, OVMF variable store), then the
// manifest, so post-processors (compress, checksum, upload) take them all.
func (a *Artifact) Files() []string {
	return append(append([]string(nil), a.order...), a.ManifestPath)
}

// Id is the image's name.
func (a *Artifact) Id() string { return a.Name }

// String describes the image for Packer's summary.
func (a *Artifact) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kpreload image %s: %s; kernels %s", a.Name, strings.Join(a.Files(), ", "), strings.Join(a.Kernels, ", "))
	if len(a.Drivers) > 0 {
		fmt.Fprintf(&b, "; drivers: %s", strings.Join(a.Drivers, "; "))
	}
	if len(a.BootFirmware) > 0 {
		fmt.Fprintf(&b, "; boots under %s (secure boot: %v)", strings.Join(a.BootFirmware, " and "), a.SecureBoot)
	}
	return b.String()
}

// State returns each format's file by its name ("raw", "qcow2", "vhd",
// "vmdk", "gce"; "" when not written), "manifest" (its path), "kernels",
// "boot_firmware", "secure_boot", and "generated_data" (ImageName,
// ManifestPath) for post-processors.
func (a *Artifact) State(name string) interface{} {
	if slices.Contains(formats.Names(), name) {
		return a.Disks[name]
	}
	switch name {
	case "manifest":
		return a.ManifestPath
	case "kernels":
		return a.Kernels
	case "boot_firmware":
		return a.BootFirmware
	case "secure_boot":
		return a.SecureBoot
	case "generated_data":
		return map[string]interface{}{"ImageName": a.Name, "ManifestPath": a.ManifestPath}
	}
	return nil
}

// Destroy removes the image's files.
func (a *Artifact) Destroy() error {
	for _, f := range a.Files() {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("remove %s: %w", f, err)
		}
	}
	return nil
}
