package cdispec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/internal/inroot"
)

// DefaultSpecFile is where Refresh keeps the NVIDIA spec of a kpreload
// image: a directory CDI runtimes read by default, on /run, so it never
// outlives the boot. Its name is kpreload's own: NVIDIA Container Toolkit
// (1.18 and later, nvidia-cdi-refresh.service) keeps /var/run/cdi/nvidia.yaml.
const DefaultSpecFile = "/var/run/cdi/kpreload-nvidia.yaml"

// LegacySpecFile is where kpreload kept its NVIDIA spec before it had a name
// of its own; RefreshActive removes a spec there only when it is byte for
// byte the one the boot report records kpreload writing (RemoveRecorded).
const LegacySpecFile = "/var/run/cdi/nvidia.yaml"

// SpecDirs are the directories container runtimes read CDI specs from, in
// their order of precedence (the CDI library's DefaultSpecDirs): a device
// name in a later directory overrides the same name in an earlier one; the
// same name in two specs of one directory is a conflict, and runtimes drop
// it (neither spec's device can be requested).
var SpecDirs = cdi.DefaultSpecDirs

// ConfigFile holds kpreload's CDI settings on the system:
//
//	nvidia: false   # write no nvidia.com/gpu spec (NVIDIA's toolkit keeps its own)
const ConfigFile = "/etc/kpreload/cdi.yaml"

// Config is ConfigFile's content.
type Config struct {
	// NVIDIA, when false, stops kpreload writing its nvidia.com/gpu spec
	// (refresh removes the one it wrote); unset means true.
	NVIDIA *bool `yaml:"nvidia"`
}

// ReadConfig reads ConfigFile of the system at root (read inside root,
// bounded, strict: an unknown key is an error naming the file); a missing
// file is the default configuration.
func ReadConfig(root string) (Config, error) {
	var c Config
	b, err := inroot.ReadFile(root, ConfigFile, inroot.MaxText)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("cdi: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return c, fmt.Errorf("cdi: %s: %w (it takes one key, \"nvidia: false\" to write no nvidia.com/gpu spec)", filepath.Join(root, ConfigFile), err)
	}
	return c, nil
}

// nvidiaOff says why kpreload writes no NVIDIA spec ("" when it does).
func nvidiaOff(c Config) string {
	if c.NVIDIA != nil && !*c.NVIDIA {
		return "nvidia: false in " + ConfigFile
	}
	return ""
}

// Result says what a refresh did.
type Result struct {
	// Driver is the active driver the activation record names ("" for none).
	Driver string `json:"driver,omitempty"`
	// Written is the spec file written ("" for none), Kind its CDI kind.
	Written string `json:"written,omitempty"`
	Kind    string `json:"kind,omitempty"`
	// Removed are kpreload's own spec files removed.
	Removed []string `json:"removed,omitempty"`
	// Left are the spec files kpreload did not write, left as they are.
	Left []Foreign `json:"left,omitempty"`
	// Off says why no NVIDIA spec is written although an NVIDIA driver may
	// be active ("nvidia: false in /etc/kpreload/cdi.yaml").
	Off string `json:"off,omitempty"`
	// Warnings are conflicts runtimes will see (the same device names in two
	// specs of one directory).
	Warnings []string `json:"warnings,omitempty"`
}

// Foreign is a spec file in a CDI directory that kpreload did not write.
type Foreign struct {
	Path string `json:"path"`
	// Why it is not kpreload's (Ownership.Why).
	Why string `json:"why"`
	// Kind is its CDI kind when it is a readable spec.
	Kind string `json:"kind,omitempty"`
	// Shared are the device names it defines that kpreload's written spec
	// defines too (same kind).
	Shared []string `json:"shared,omitempty"`
}

// specKind is one spec kpreload writes: the driver it describes, its file and kind.
type specKind struct {
	driver, file, kind string
	generate           func(root string, opts Options) (*specs.Spec, *Found, error)
}

// specKinds are the drivers kpreload writes specs for, with their files.
var specKinds = []specKind{
	{"nvidia", DefaultSpecFile, Kind, Generate},
	{EduDriver, EduSpecFile, EduKind, GenerateEdu},
}

// RefreshActive brings every spec file kpreload keeps in line with the
// active driver: the active driver's spec is written (marked as kpreload's,
// validated, atomically) and every other kind's file removed, so containers
// never get a driver or version that is not the loaded one. Only files
// kpreload wrote (Check) are written over or removed: anything else in the
// CDI directories is left and listed in Result.Left, and a foreign file at
// kpreload's own name is an error (*NotOwnError) for the kind it blocks.
// opts.Recorded, the spec the boot report says kpreload wrote, lets a spec
// an older kpreload wrote without the marker go (RemoveRecorded).
func RefreshActive(root string, opts Options) (*Result, error) {
	res := &Result{}
	ready, rerr := activate.ReadReadyIn(root, activate.RunDir)
	if rerr == nil {
		res.Driver = ready.Driver
	}
	conf, cerr := ReadConfig(root)
	var errs []error
	if cerr != nil {
		errs = append(errs, cerr)
	}
	res.Off = nvidiaOff(conf)
	errs = append(errs, removeRecorded(root, opts, res))
	var written *specs.Spec
	for _, k := range specKinds {
		active := rerr == nil && ready.Driver == k.driver && !(k.driver == "nvidia" && (res.Off != "" || cerr != nil))
		var spec *specs.Spec
		var err error
		if active {
			spec, _, err = k.generate(root, opts)
			if errors.Is(err, ErrNoDriver) {
				active, err = false, nil
			}
		}
		if active && err == nil {
			var data []byte
			if data, err = Marshal(spec, false); err == nil {
				if err = WriteOwn(root, k.file, data); err == nil {
					res.Written, res.Kind, written = k.file, k.kind, spec
					continue
				}
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
		var nerr *NotOwnError
		if errors.As(err, &nerr) {
			continue // not kpreload's: neither written nor removed
		}
		removed, _, rmErr := RemoveOwn(root, k.file)
		if removed {
			res.Removed = append(res.Removed, k.file)
		}
		errs = append(errs, rmErr)
	}
	if rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		errs = append(errs, rerr)
	}
	left, err := foreignSpecs(root, res.Written, written)
	res.Left = left
	errs = append(errs, err)
	res.Warnings = conflicts(res.Written, res.Kind, left)
	return res, errors.Join(errs...)
}

// removeRecorded removes the spec an older kpreload recorded writing
// without the marker, when it is still byte for byte that spec.
func removeRecorded(root string, opts Options, res *Result) error {
	if opts.Recorded == nil {
		return nil
	}
	if o, err := Check(root, opts.Recorded.Path); err != nil || o.Own {
		return err // a marked spec is handled by its kind
	}
	removed, err := RemoveRecorded(root, *opts.Recorded)
	if removed {
		res.Removed = append(res.Removed, opts.Recorded.Path)
	}
	return err
}

// Refresh writes NVIDIA's spec to file, a path of the system at root, when
// /run/kpreload/ready names an active NVIDIA driver (as RefreshActive does
// for DefaultSpecFile), and otherwise removes file if kpreload wrote it.
// File must be YAML: a JSON spec cannot carry the marker.
func Refresh(root, file string, opts Options) (*Result, error) {
	res := &Result{}
	if ext := filepath.Ext(file); ext != ".yaml" {
		return res, fmt.Errorf("cdi: %s: refresh writes YAML spec files only (a .yaml name): kpreload marks the files it owns with a comment line, which JSON cannot carry", file)
	}
	conf, err := ReadConfig(root)
	if err != nil {
		return res, err
	}
	res.Off = nvidiaOff(conf)
	ready, err := activate.ReadReadyIn(root, activate.RunDir)
	if err == nil {
		res.Driver = ready.Driver
	}
	remove := func(errs ...error) (*Result, error) {
		removed, _, rerr := RemoveOwn(root, file)
		if removed {
			res.Removed = append(res.Removed, file)
		}
		left, lerr := foreignSpecs(root, "", nil)
		res.Left = left
		return res, errors.Join(append(errs, rerr, lerr)...)
	}
	if errors.Is(err, fs.ErrNotExist) || (err == nil && ready.Driver != "nvidia") || res.Off != "" {
		return remove() // no driver active, not NVIDIA's, or turned off
	}
	if err != nil {
		return remove(err)
	}
	spec, _, err := Generate(root, opts)
	if errors.Is(err, ErrNoDriver) {
		return remove()
	}
	var data []byte
	if err == nil {
		data, err = Marshal(spec, false)
	}
	if err == nil {
		err = WriteOwn(root, file, data)
	}
	var nerr *NotOwnError
	if errors.As(err, &nerr) {
		return res, err // not kpreload's: left as it is
	}
	if err != nil {
		return remove(err)
	}
	res.Written, res.Kind = file, Kind
	left, err := foreignSpecs(root, file, spec)
	res.Left = left
	res.Warnings = conflicts(file, Kind, left)
	return res, err
}

// foreignSpecs lists the *.yaml and *.json files of the CDI directories
// under root that kpreload did not write, with their kind and the device
// names they share with written (the spec kpreload wrote to writtenFile, or
// nil).
func foreignSpecs(root, writtenFile string, written *specs.Spec) ([]Foreign, error) {
	var out []Foreign
	var errs []error
	for _, dir := range SpecDirs {
		ents, err := inroot.ReadDir(root, dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("cdi: %w", err))
			continue
		}
		for _, e := range ents {
			if ext := path.Ext(e.Name()); ext != ".yaml" && ext != ".json" {
				continue
			}
			file := path.Join(dir, e.Name())
			if file == writtenFile {
				continue
			}
			o, err := Check(root, file)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if !o.Exists || o.Own {
				continue
			}
			f := Foreign{Path: file, Why: o.Why}
			if o.Why == "no kpreload marker on its first line" {
				if b, err := inroot.ReadFile(root, file, inroot.MaxLarge); err == nil {
					if s, err := cdi.ParseSpec(b); err == nil {
						f.Kind = s.Kind
						if written != nil && s.Kind == written.Kind {
							f.Shared = sharedNames(written, s)
						}
					}
				}
			}
			out = append(out, f)
		}
	}
	return out, errors.Join(errs...)
}

// sharedNames lists the device names both specs define.
func sharedNames(a, b *specs.Spec) []string {
	var out []string
	for _, d := range a.Devices {
		if slices.ContainsFunc(b.Devices, func(e specs.Device) bool { return e.Name == d.Name }) {
			out = append(out, d.Name)
		}
	}
	return out
}

// conflicts says, for the spec kpreload wrote, what runtimes make of the
// foreign specs that define the same device names: in the same directory
// both lose (the CDI library drops a name two specs of one directory
// define); in an earlier directory kpreload's wins.
func conflicts(written, kind string, left []Foreign) []string {
	var out []string
	for _, f := range left {
		if len(f.Shared) == 0 {
			continue
		}
		names := kind + "=" + strings.Join(f.Shared, ", "+kind+"=")
		if path.Dir(f.Path) == path.Dir(written) {
			out = append(out, fmt.Sprintf("%s (not written by kpreload) also defines %s in %s: container runtimes refuse a device name two specs of one directory define, so neither spec's %s can be requested; turn one side off (set \"nvidia: false\" in %s, or stop NVIDIA's nvidia-cdi-refresh)", f.Path, names, path.Dir(f.Path), names, ConfigFile))
		} else if specDirIndex(path.Dir(f.Path)) > specDirIndex(path.Dir(written)) {
			out = append(out, fmt.Sprintf("%s (not written by kpreload) also defines %s and overrides kpreload's %s (a later CDI directory wins)", f.Path, names, written))
		}
	}
	return out
}

func specDirIndex(dir string) int {
	return slices.Index(SpecDirs, dir)
}
