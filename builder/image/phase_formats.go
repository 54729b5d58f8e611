package image

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kpreload/kpreload/builder/image/formats"
	"github.com/kpreload/kpreload/internal/fileutil"
)

// formats writes each requested format from the raw disk (formats.go) and the
// manifest, and, once every output is complete, renames them into OutDir, the
// manifest last, so that a failed or cancelled build leaves no file under the
// final names.
func (j *Job) formats(ctx context.Context) error {
	o, m := j.o, j.m
	m.BootFirmware = formats.BootFirmware(o.Boot.Loader)
	for _, f := range o.Formats {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("image: disk: %s: %w", f, err)
		}
		p, virtual, err := formats.Write(ctx, j.tools().forFormats(), j.raw, f, j.outTmp, o.Name, o.Progress)
		if err != nil {
			return fmt.Errorf("image: disk: %w", err)
		}
		o.Progress.say("disk: sha256 of %s", filepath.Base(p))
		size, sum, err := digest(p)
		if err != nil {
			return fmt.Errorf("image: %w", err)
		}
		m.Files = append(m.Files, File{Path: OutputPath(o.OutDir, o.Name, f), Format: f, Size: size, SHA256: sum, VirtualSize: virtual})
		j.outputs = append(j.outputs, p)
	}
	m.Created = time.Now().UTC().Format(time.RFC3339)
	m.Seconds = time.Since(j.start).Seconds()
	mj, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("image: manifest: %w", err)
	}
	manifestTmp := filepath.Join(j.outTmp, o.Name+".manifest.json")
	if err := os.WriteFile(manifestTmp, append(mj, '\n'), 0o644); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	// Every output is complete: move them into place, the manifest last.
	for i, f := range m.Files {
		if err := j.place(j.outputs[i], f.Path); err != nil {
			return err
		}
	}
	if k := m.ModuleKey; k != nil {
		for _, p := range k.Files() {
			if err := j.place(filepath.Join(j.outTmp, filepath.Base(p)), p); err != nil {
				return err
			}
		}
	}
	if err := j.place(manifestTmp, OutputPath(o.OutDir, o.Name, "manifest.json")); err != nil {
		return err
	}
	j.done = true
	o.Progress.say("image %s done in %.0fs", o.Name, time.Since(j.start).Seconds())
	return nil
}

// place moves a finished output tmp to its final path through
// fileutil.Publish (the file and OutDir synced). A file already there (an
// earlier build's) is moved aside into the temporary directory first
// (fileutil.Move), so that cleanupFormats can put it back when the build
// fails.
func (j *Job) place(tmp, final string) error {
	if _, err := os.Lstat(final); err == nil {
		aside := filepath.Join(j.outTmp, "previous-"+filepath.Base(final))
		if err := fileutil.Move(final, aside); err != nil {
			return fmt.Errorf("image: %w", err)
		}
		j.aside = append(j.aside, [2]string{aside, final})
	}
	if err := fileutil.Publish(tmp, final); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	j.placed = append(j.placed, final)
	return nil
}

// cleanupFormats removes the formats not moved into OutDir and, when the build
// failed, the outputs it moved there, putting back the earlier files they
// replaced. (On success those are removed with the temporary directory.)
func (j *Job) cleanupFormats(failed bool) {
	for _, p := range j.outputs {
		os.Remove(p) // gone already once moved into OutDir
	}
	if failed {
		for _, p := range j.placed {
			os.Remove(p)
		}
		for _, a := range j.aside {
			fileutil.Move(a[0], a[1])
		}
		j.done = false
	}
}
