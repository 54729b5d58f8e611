package matrix

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/builder/recipe"
)

// source is a recipe's DKMS source tree, ready to build.
type source struct {
	// dir holds dkms.conf.
	dir string
	// digest is the SHA-256 of the tree (see treeDigest).
	digest string
	// confDigest is the SHA-256 of dir/dkms.conf.
	confDigest string
}

// prepareSource finds or unpacks the DKMS source of r and digests it. A
// Source.Dir is used in place; a Source.Package is downloaded into
// downloads/debs and unpacked into downloads/sources/<name>_<version>.
func prepareSource(ctx context.Context, r *recipe.Recipe, downloads string) (*source, error) {
	dir := r.SourceDir()
	if dir == "" {
		name, version, ok := recipe.SplitPackage(r.Source.Package)
		if !ok {
			return nil, fmt.Errorf("recipe %s: source.package %q is not name=version", r.Name, r.Source.Package)
		}
		root, err := unpackPackage(ctx, downloads, name, version)
		if err != nil {
			return nil, fmt.Errorf("recipe %s: %w", r.Name, err)
		}
		dir = filepath.Join(root, r.Source.Path)
	}
	conf, err := fileDigest(filepath.Join(dir, "dkms.conf"))
	if err != nil {
		return nil, fmt.Errorf("recipe %s: source %s: %w", r.Name, dir, err)
	}
	digest, err := treeDigest(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("recipe %s: %w", r.Name, err)
	}
	return &source{dir: dir, digest: digest, confDigest: conf}, nil
}

// debVersion is how apt spells a version in a .deb file name (":" as "%3a").
func debVersion(version string) string { return strings.ReplaceAll(version, ":", "%3a") }

// unpackPackage returns downloads/sources/<name>_<version>, the package's
// contents unpacked with dpkg -x. It downloads the .deb first when
// downloads/debs does not have it. The tree is unpacked into a temporary
// directory and renamed into place, so it is either complete or absent.
func unpackPackage(ctx context.Context, downloads, name, version string) (string, error) {
	sources := filepath.Join(downloads, "sources")
	dest := filepath.Join(sources, name+"_"+debVersion(version))
	if _, err := os.Stat(dest); err == nil {
		return dest, nil
	}
	deb, err := downloadDeb(ctx, filepath.Join(downloads, "debs"), name, version)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(sources, 0o755); err != nil {
		return "", fmt.Errorf("unpack %s: %w", deb, err)
	}
	tmp, err := os.MkdirTemp(sources, ".tmp-"+name+"-")
	if err != nil {
		return "", fmt.Errorf("unpack %s: %w", deb, err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if out, err := exec.CommandContext(ctx, "dpkg", "-x", deb, tmp).CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg -x %s: %w: %s", deb, err, strings.TrimSpace(string(out)))
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("unpack %s: %w", deb, err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		// Another build may have unpacked it meanwhile.
		if _, statErr := os.Stat(dest); statErr == nil {
			return dest, nil
		}
		return "", fmt.Errorf("unpack %s: %w", deb, err)
	}
	return dest, nil
}

// downloadDeb returns debs/<name>_<version>_<arch>.deb, fetching it with
// "apt-get download name=version" when it is not there. apt-get runs in a
// temporary directory and the .deb is renamed into place.
func downloadDeb(ctx context.Context, debs, name, version string) (string, error) {
	pattern := filepath.Join(debs, name+"_"+debVersion(version)+"_*.deb")
	if found, _ := filepath.Glob(pattern); len(found) > 0 {
		return found[0], nil
	}
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return "", fmt.Errorf("download %s=%s: %w", name, version, err)
	}
	tmp, err := os.MkdirTemp(debs, ".tmp-download-")
	if err != nil {
		return "", fmt.Errorf("download %s=%s: %w", name, version, err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "apt-get", "download", "-q", name+"="+version)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("apt-get download %s=%s (is the package's archive component, such as non-free, in the apt sources?): %w: %s", name, version, err, strings.TrimSpace(string(out)))
	}
	got, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(got) != 1 {
		return "", fmt.Errorf("apt-get download %s=%s left %d .deb files, want 1", name, version, len(got))
	}
	dest := filepath.Join(debs, filepath.Base(got[0]))
	if err := os.Rename(got[0], dest); err != nil {
		return "", fmt.Errorf("download %s=%s: %w", name, version, err)
	}
	return dest, nil
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
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// copyFile copies src to dst (created or truncated) with mode 0644.
func copyFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, out.Close()) }()
	_, err = io.Copy(out, in)
	return err
}
