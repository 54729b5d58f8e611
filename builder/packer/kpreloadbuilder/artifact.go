package kpreloadbuilder

import (
	"fmt"
	"os"
	"strings"

	"github.com/kpreload/kpreload/builder/image"
)

// Artifact is a built image: its disk files and manifest.
type Artifact struct {
	// Name is the image's name.
	Name string
	// Disks maps each written format ("raw", "qcow2") to its file.
	Disks map[string]string
	// ManifestPath is the manifest JSON file.
	ManifestPath string
	// Kernels are the image's kernels, the default boot entry first.
	Kernels []string
	// Drivers describes the driver sets, as "recipe version kernel".
	Drivers []string

	order []string
}

// newArtifact describes the image a manifest (written at manifestPath) records.
func newArtifact(m *image.Manifest, manifestPath string) *Artifact {
	a := &Artifact{Name: m.Name, Disks: map[string]string{}, ManifestPath: manifestPath, Kernels: m.Kernels}
	for _, f := range m.Files {
		a.Disks[f.Format] = f.Path
		a.order = append(a.order, f.Path)
	}
	for _, d := range m.Drivers {
		a.Drivers = append(a.Drivers, fmt.Sprintf("%s %s %s", d.Recipe, d.Version, d.Kernel))
	}
	return a
}

// BuilderId is the kpreload builder's id.
func (a *Artifact) BuilderId() string { return BuilderID }

// Files lists the disk images (raw, then qcow2, as written) and the manifest.
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
	return b.String()
}

// State returns "raw", "qcow2" and "manifest" (file paths), "kernels", and
// "generated_data" (ImageName, ManifestPath) for post-processors.
func (a *Artifact) State(name string) interface{} {
	switch name {
	case "raw", "qcow2":
		return a.Disks[name]
	case "manifest":
		return a.ManifestPath
	case "kernels":
		return a.Kernels
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
