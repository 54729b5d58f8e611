package cdispec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/internal/inroot"
)

// DefaultLdconfig is the host's ldconfig the hook runs.
const DefaultLdconfig = "/sbin/ldconfig"

// ldsoconf and ldsoconfd are the container's linker configuration.
const (
	ldsoconf  = "/etc/ld.so.conf"
	ldsoconfd = "/etc/ld.so.conf.d"
)

// State is the part of the OCI container state (what a runtime writes on a hook's
// stdin) the hook needs.
type State struct {
	ID     string `json:"id"`
	Bundle string `json:"bundle"`
}

// ContainerRoot reads the OCI state from r (at most inroot.MaxText bytes) and
// returns the container's root filesystem: root.path of <bundle>/config.json
// (a regular file of at most inroot.MaxLarge bytes), relative to the bundle
// unless absolute, cleaned.
func ContainerRoot(r io.Reader) (string, error) {
	state, err := io.ReadAll(io.LimitReader(r, inroot.MaxText+1))
	if err != nil {
		return "", fmt.Errorf("container state: %w", err)
	}
	if len(state) > inroot.MaxText {
		return "", fmt.Errorf("container state: more than %d bytes on stdin", inroot.MaxText)
	}
	var st State
	if err := json.NewDecoder(bytes.NewReader(state)).Decode(&st); err != nil {
		return "", fmt.Errorf("container state: %w", err)
	}
	if st.Bundle == "" {
		return "", errors.New("container state: no bundle")
	}
	file := filepath.Join(st.Bundle, "config.json")
	b, err := inroot.ReadPath(file, inroot.MaxLarge)
	if err != nil {
		return "", fmt.Errorf("container state: %w", err)
	}
	return rootPath(b, st.Bundle, file)
}

// rootPath returns the container root named by an OCI config.json (file,
// in bundle).
func rootPath(config []byte, bundle, file string) (string, error) {
	var cfg struct {
		Root struct {
			Path string `json:"path"`
		} `json:"root"`
	}
	if err := json.Unmarshal(config, &cfg); err != nil {
		return "", fmt.Errorf("container spec %s: %w", file, err)
	}
	root := cfg.Root.Path
	if root == "" {
		return "", fmt.Errorf("container spec %s: no root.path", file)
	}
	if !filepath.IsAbs(root) {
		root = filepath.Join(bundle, root)
	}
	return filepath.Clean(root), nil
}

// UpdateLdcache is the createContainer hook: it adds the folders (container
// paths) that are not in the container's linker configuration yet to a drop-in
// <root>/etc/ld.so.conf.d/00-kpreload-cdi.conf (creating /etc/ld.so.conf with an
// include of ld.so.conf.d/*.conf when the image has none), then runs
// `ldconfig -r <root>` so the cache of the container, not the host's, is rebuilt
// and libcuda.so.1 resolves. Files are written through os.Root and read
// through internal/inroot, so links in the container image cannot point the
// writes or the reads outside it, and a FIFO in the image cannot hang it.
func UpdateLdcache(containerRoot, ldconfig string, folders []string) error {
	if containerRoot == "" || filepath.Clean(containerRoot) == "/" {
		return fmt.Errorf("update-ldcache: refusing container root %q", containerRoot)
	}
	r, err := os.OpenRoot(containerRoot)
	if err != nil {
		return fmt.Errorf("update-ldcache: %w", err)
	}
	defer r.Close()
	if _, err := r.Stat(strings.TrimPrefix(ldsoconf, "/")); errors.Is(err, fs.ErrNotExist) {
		if err := r.MkdirAll("etc", 0o755); err != nil {
			return fmt.Errorf("update-ldcache: %w", err)
		}
		if err := r.WriteFile(strings.TrimPrefix(ldsoconf, "/"), []byte("include "+ldsoconfd+"/*.conf\n"), 0o644); err != nil {
			return fmt.Errorf("update-ldcache: %w", err)
		}
	}
	known := configuredDirs(containerRoot)
	var lines []string
	for _, d := range folders {
		d = path.Clean("/" + d)
		if known[d] {
			continue
		}
		if fi, err := inroot.Stat(containerRoot, d); err != nil || !fi.IsDir() {
			continue // not mounted into this container
		}
		known[d] = true
		lines = append(lines, d)
	}
	if len(lines) > 0 {
		if err := r.MkdirAll(strings.TrimPrefix(ldsoconfd, "/"), 0o755); err != nil {
			return fmt.Errorf("update-ldcache: %w", err)
		}
		conf := "# written by kpreload cdi hook update-ldcache\n" + strings.Join(lines, "\n") + "\n"
		if err := r.WriteFile(strings.TrimPrefix(ldsoconfd, "/")+"/00-kpreload-cdi.conf", []byte(conf), 0o644); err != nil {
			return fmt.Errorf("update-ldcache: %w", err)
		}
	}
	cmd := exec.Command(ldconfig, "-r", containerRoot, "-f", ldsoconf, "-C", "/etc/ld.so.cache")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("update-ldcache: %s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// configuredDirs returns the directories listed in the container's ld.so.conf and
// its ld.so.conf.d/*.conf drop-ins (one level of include, as images use it);
// each file is read inside the container's root, at most inroot.MaxText bytes,
// and one that cannot be read is left out.
func configuredDirs(containerRoot string) map[string]bool {
	dirs := map[string]bool{}
	var read func(name string, depth int)
	read = func(name string, depth int) {
		b, err := inroot.ReadFile(containerRoot, name, inroot.MaxText)
		if err != nil {
			return
		}
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if i := strings.IndexByte(line, '#'); i >= 0 {
				line = strings.TrimSpace(line[:i])
			}
			switch {
			case line == "":
			case strings.HasPrefix(line, "include"):
				if depth > 0 {
					continue
				}
				pattern := strings.TrimSpace(strings.TrimPrefix(line, "include"))
				if !path.IsAbs(pattern) {
					pattern = path.Join(path.Dir(name), pattern)
				}
				matches, _ := inroot.Glob(containerRoot, pattern)
				for _, m := range matches {
					read(m, depth+1)
				}
			default:
				dirs[path.Clean(line)] = true
			}
		}
	}
	read(ldsoconf, 0)
	return dirs
}
