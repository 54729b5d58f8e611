package matrix

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/kpreload/kpreload/builder/archive"
	toolrun "github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/internal/inroot"
)

// source is a recipe's DKMS source tree, ready to build.
type source struct {
	// dir holds dkms.conf.
	dir string
	// digest is the SHA-256 of the tree (see treeDigest).
	digest string
	// confDigest is the SHA-256 of dir/dkms.conf.
	confDigest string
	// patches is the digest of the recipe's patches ("" without patches).
	patches string
}

// prepareSource finds or unpacks the DKMS source of r, applies its patches
// and digests it. A Source.Dir is used in place; a Source.Package is
// downloaded from the recipe's suite into downloads/debs and unpacked into
// downloads/sources/<name>_<version>. With patches, the tree is copied to
// downloads/sources/<tree>+patched-<digest of the patches> and patched there
// (see applyPatches, which runs cp and patch through run; nil is
// runner.Default); the original stays untouched.
func prepareSource(ctx context.Context, run toolrun.Runner, r *recipe.Recipe, downloads string) (*source, error) {
	dir := r.SourceDir()
	if dir == "" {
		name, version, ok := recipe.SplitPackage(r.Source.Package)
		if !ok {
			return nil, fmt.Errorf("recipe %s: source.package %q is not name=version", r.Name, r.Source.Package)
		}
		root, err := unpackPackage(ctx, r, downloads, name, version)
		if err != nil {
			return nil, fmt.Errorf("recipe %s: %w", r.Name, err)
		}
		dir = filepath.Join(root, r.Source.Path)
	}
	var patches string
	if len(r.Patches) > 0 {
		var err error
		if dir, patches, err = applyPatches(ctx, run, r, dir, filepath.Join(downloads, "sources")); err != nil {
			return nil, fmt.Errorf("recipe %s: %w", r.Name, err)
		}
	}
	conf, err := fileDigest(filepath.Join(dir, "dkms.conf"))
	if err != nil {
		return nil, fmt.Errorf("recipe %s: source %s: %w", r.Name, dir, err)
	}
	digest, err := treeDigest(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("recipe %s: %w", r.Name, err)
	}
	return &source{dir: dir, digest: digest, confDigest: conf, patches: patches}, nil
}

// recipeArchive returns the archive of the recipe's suite.
func recipeArchive(r *recipe.Recipe, downloads string) (*archive.Archive, error) {
	a, err := r.Archive(downloads)
	if err != nil {
		return nil, fmt.Errorf("recipe %s: %w", r.Name, err)
	}
	return a, nil
}

// unpackPackage returns downloads/sources/<name>_<version>, the package's
// contents unpacked with dpkg -x, fetched from the recipe's suite (see
// archive.Archive.Unpack: complete or absent).
func unpackPackage(ctx context.Context, r *recipe.Recipe, downloads, name, version string) (string, error) {
	a, err := recipeArchive(r, downloads)
	if err != nil {
		return "", err
	}
	return a.Unpack(ctx, name, version, filepath.Join(downloads, "debs"), filepath.Join(downloads, "sources"))
}

// applyPatches copies the source tree dir to
// sources/<base>+patched-<digest> (once; complete or absent) and applies
// the recipe's patches there in order with "patch -p1 --forward --batch".
// It returns the patched tree and the digest of the patches (the SHA-256 of
// each patch's name and contents, in order), which is part of the cell's
// content key. A patch that does not apply fails the recipe, naming it, the
// command and the end of patch's output. cp and patch run through run (nil:
// runner.Default).
func applyPatches(ctx context.Context, run toolrun.Runner, r *recipe.Recipe, dir, sources string) (string, string, error) {
	// Read the patches through the paths the recipe resolved and checked to
	// lie inside its directory, never through the names as written.
	files, err := r.PatchFiles()
	if err != nil {
		return "", "", fmt.Errorf("patches: %w", err)
	}
	h := sha256.New()
	for i, p := range r.Patches {
		data, err := inroot.ReadPath(files[i], recipe.MaxPatch)
		if err != nil {
			return "", "", fmt.Errorf("patches: %w", err)
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(h, "%s\x00%x\x00", p, sum)
	}
	digest := hex.EncodeToString(h.Sum(nil))
	dest := filepath.Join(sources, filepath.Base(filepath.Dir(dir))+"_"+filepath.Base(dir)+"+patched-"+digest[:16])
	if _, err := os.Stat(dest); err == nil {
		return dest, digest, nil
	}
	if err := os.MkdirAll(sources, 0o755); err != nil {
		return "", "", fmt.Errorf("patches: %w", err)
	}
	tmp, err := os.MkdirTemp(sources, ".tmp-patched-")
	if err != nil {
		return "", "", fmt.Errorf("patches: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	work := filepath.Join(tmp, "src")
	run = toolrun.Or(run)
	if _, err := run.Run(ctx, toolrun.Cmd{Name: "cp", Args: []string{"-a", dir, work}, Combined: true}); err != nil {
		return "", "", fmt.Errorf("patches: copy %s: %w", dir, err)
	}
	for i, file := range files {
		c := toolrun.Cmd{Name: "patch", Args: []string{"-p1", "--forward", "--batch", "--no-backup-if-mismatch", "-i", file}, Dir: work, Combined: true}
		if _, err := run.Run(ctx, c); err != nil {
			return "", "", fmt.Errorf("patch %s does not apply to %s: %w", r.Path(r.Patches[i]), dir, err)
		}
	}
	if err := os.Rename(work, dest); err != nil {
		if _, statErr := os.Stat(dest); statErr == nil {
			return dest, digest, nil
		}
		return "", "", fmt.Errorf("patches: %w", err)
	}
	return dest, digest, nil
}

// treeDigest returns the hex SHA-256 of the tree at dir: for every entry in
// lexical order, its kind, path relative to dir and, for regular files, the
// executable bit, size and SHA-256 of the contents; for symlinks, the target.
// Any change to a file, a name, or the set of files changes the digest.
func treeDigest(ctx context.Context, dir string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		switch t := d.Type(); {
		case t.IsDir():
			fmt.Fprintf(h, "d %s\x00", rel)
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "l %s\x00%s\x00", rel, target)
		case t.IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			sum, err := fileDigest(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "f %s\x00%t %d %s\x00", rel, info.Mode()&0o111 != 0, info.Size(), sum)
		default:
			fmt.Fprintf(h, "o %s\x00%s\x00", rel, t)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("digest source %s: %w", dir, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fileDigest returns the hex SHA-256 of the file at path.
func fileDigest(path string) (string, error) {
	f, err := inroot.OpenPath(path) // a regular file: never a FIFO waited on
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err // names path
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
