package instance

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// Where a request can come from, in the order /init looks.
const (
	// SourceCmdline is the kernel command line: kpreload.instance=<base64 YAML>,
	// kpreload.driver=<version>, kpreload.flavor=<flavour> (the last two override
	// the first's fields).
	SourceCmdline = "cmdline"
	// SourceFwCfg is QEMU's fw_cfg item opt/kpreload/instance.yaml (kpreload boot --instance).
	SourceFwCfg = "fw_cfg"
	// SourceSeed is the request in the #cloud-config user-data on a
	// cloud-init seed disk (NoCloud's CIDATA, OpenStack's config-2): its
	// write_files entry for WriteFilesPath (or its deprecated kpreload: key),
	// read by /init before cloud-init runs.
	SourceSeed = "seed"
	// SourceUserData is the request in the user-data cloud-init read
	// (from a seed or a cloud's metadata service), applied after boot by
	// kpreload-user-data.service where /init could not read it.
	SourceUserData = "user-data"
	// SourceImage is /etc/kpreload/instance.yaml on the root filesystem.
	SourceImage = "image"
	// SourceDefault is the image's default: the latest cached version, flavour auto.
	SourceDefault = "default"
)

// FwCfgName is the fw_cfg item that carries an instance YAML.
const FwCfgName = "opt/kpreload/instance.yaml"

// FwCfgPath is where the qemu_fw_cfg module shows that item.
const FwCfgPath = "/sys/firmware/qemu_fw_cfg/by_name/" + FwCfgName + "/raw"

// ImagePath is the instance YAML baked into an image, relative to its root.
const ImagePath = "etc/kpreload/instance.yaml"

// InitramfsPath is where an initramfs carries a copy of the image's instance
// YAML (kpreload initramfs --instance), for /init's early decision.
const InitramfsPath = "/" + ImagePath

// Kernel command line flags.
const (
	FlagInstance = "kpreload.instance"
	FlagDriver   = "kpreload.driver"
	FlagFlavor   = "kpreload.flavor"
)

// Request is an instance request and where it came from.
type Request struct {
	// Source is one of the Source* constants.
	Source string `json:"source"`
	// Origin says exactly where: the flags or the file read.
	Origin   string   `json:"origin,omitempty"`
	Instance Instance `json:"instance"`
	// VersionAt says where the driver version was asked: "file:line" for a
	// file, the flag for the command line; "" when no version was given.
	VersionAt string `json:"version_at,omitempty"`
	// Notes say why sources before this one gave no request, where that is
	// worth knowing (user-data only cloud-init can read, a seed without a
	// kpreload key).
	Notes []string `json:"notes,omitempty"`
}

// File is a place an instance YAML may be, for Find.
type File struct {
	Source string
	Path   string
	// Read, when set, reads the file instead of ReadPath(Path), which then
	// only names it; an absent file is an error wrapping fs.ErrNotExist.
	Read func() ([]byte, error)
	// UserData says the file is cloud-init user-data: the request is in its
	// #cloud-config document (ParseUserData).
	UserData bool
}

// read returns the file's contents.
func (f File) read() ([]byte, error) {
	if f.Read != nil {
		return f.Read()
	}
	return ReadPath(f.Path)
}

// FromCmdline reads a request from kernel command line flags (flag returns a
// flag's value and whether it is present). found is false when none of the
// flags is there.
func FromCmdline(flag func(name string) (string, bool)) (in *Instance, origin string, found bool, err error) {
	in = &Instance{}
	var used []string
	if v, ok := flag(FlagInstance); ok {
		found = true
		used = append(used, FlagInstance)
		b, derr := decodeBase64(v)
		if derr != nil {
			return nil, "", true, fmt.Errorf("kernel command line %s=: not base64: %w", FlagInstance, derr)
		}
		if in, err = Parse("kernel command line "+FlagInstance, b); err != nil {
			return nil, "", true, err
		}
	}
	if v, ok := flag(FlagDriver); ok {
		found = true
		used = append(used, FlagDriver+"="+v)
		if err := CheckVersion(v); err != nil {
			return nil, "", true, fmt.Errorf("kernel command line %s=%s: %w", FlagDriver, v, err)
		}
		in.Resources.Driver.Version = v
	}
	if v, ok := flag(FlagFlavor); ok {
		found = true
		used = append(used, FlagFlavor+"="+v)
		if err := CheckFlavor(v); err != nil {
			return nil, "", true, fmt.Errorf("kernel command line %s=%s: %w", FlagFlavor, v, err)
		}
		in.Resources.Driver.Flavor = v
	}
	if !found {
		return nil, "", false, nil
	}
	return in, "kernel command line " + strings.Join(used, " "), true, nil
}

func decodeBase64(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	_, err := base64.StdEncoding.DecodeString(s)
	return nil, err
}

// ReadRequest reads the instance YAML at path as a request from source
// (plan's --instance): unlike Find, a missing or invalid file is an error.
func ReadRequest(source, path string) (Request, error) {
	b, err := ReadPath(path)
	if err != nil {
		return Request{}, fmt.Errorf("instance: %w", err)
	}
	var line int
	in, err := parse(path, b, &line)
	if err != nil {
		return Request{}, err
	}
	req := Request{Source: source, Origin: path, Instance: *in}
	if line > 0 {
		req.VersionAt = fmt.Sprintf("%s:%d", path, line)
	}
	return req, nil
}

// Find returns the first request found: the kernel command line, then each
// file in order (missing files are skipped), then the default. A source that
// is present but invalid is skipped with an error in errs (the request it
// carried cannot be honoured; the next source is used), so boot goes on.
func Find(flag func(name string) (string, bool), files []File) (req Request, errs []error) {
	var notes []string
	in, origin, found, err := FromCmdline(flag)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("instance request from the kernel command line ignored: %w", err))
	case found:
		req := Request{Source: SourceCmdline, Origin: origin, Instance: *in}
		if v, ok := flag(FlagDriver); ok {
			req.VersionAt = FlagDriver + "=" + v
		} else if in.Resources.Driver.Version != "" {
			req.VersionAt = FlagInstance
		}
		return req, errs
	}
	for _, f := range files {
		b, err := f.read()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("instance request from %s ignored: %w", f.Source, err))
			continue
		}
		if f.UserData {
			r, err := parseUserData(f.Path, b)
			switch {
			case errors.Is(err, ErrNotCloudConfig):
				notes = append(notes, fmt.Sprintf("%s: user-data is %v: a request in it is applied after boot, once cloud-init has read it (kpreload-user-data.service)", f.Source, err))
				continue
			case err != nil:
				errs = append(errs, fmt.Errorf("instance request from %s ignored: %w", f.Source, err))
				if r.legacy {
					notes = append(notes, fmt.Sprintf("%s: %s", f.Source, DeprecatedKeyNote))
				}
				continue
			case !r.found:
				notes = append(notes, fmt.Sprintf("%s: %s has neither a write_files entry for %s nor a %s: key", f.Source, f.Path, WriteFilesPath, UserDataKey))
				continue
			}
			return r.request(f.Source, f.Path, notes), errs
		}
		var versionLine int
		in, err := parse(f.Path, b, &versionLine)
		if err != nil {
			errs = append(errs, fmt.Errorf("instance request from %s ignored: %w", f.Source, err))
			continue
		}
		req := Request{Source: f.Source, Origin: f.Path, Instance: *in, Notes: notes}
		if versionLine > 0 {
			req.VersionAt = fmt.Sprintf("%s:%d", f.Path, versionLine)
		}
		return req, errs
	}
	return Request{Source: SourceDefault, Origin: "no instance request found: latest cached version, flavour auto", Notes: notes}, errs
}
