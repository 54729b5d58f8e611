package cdispec

import (
	"bufio"
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

// ContainerRoot reads the OCI state from r and returns the container's root
// filesystem: root.path of <bundle>/config.json, relative to the bundle unless absolute.
func ContainerRoot(r io.Reader) (string, error) {
	var st State
	if err := json.NewDecoder(r).Decode(&st); err != nil {
		return "", fmt.Errorf("container state: %w", err)
	}
	if st.Bundle == "" {
		return "", errors.New("container state: no bundle")
	}
	b, err := os.ReadFile(filepath.Join(st.Bundle, "config.json"))
	if err != nil {
		return "", fmt.Errorf("container state: %w", err)
	}
	var cfg struct {
		Root struct {
			Path string `json:"path"`
		} `json:"root"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return "", fmt.Errorf("container spec %s: %w", filepath.Join(st.Bundle, "config.json"), err)
	}
	root := cfg.Root.Path
	if root == "" {
		return "", fmt.Errorf("container spec %s: no root.path", filepath.Join(st.Bundle, "config.json"))
	}
	if !filepath.IsAbs(root) {
		root = filepath.Join(st.Bundle, root)
	}
	return root, nil
}

// UpdateLdcache is the createContainer hook: it adds the folders (container
// paths) that are not in the container's linker configuration yet to a drop-in
// <root>/etc/ld.so.conf.d/00-kpreload-cdi.conf (creating /etc/ld.so.conf with an
// include of ld.so.conf.d/*.conf when the image has none), then runs
// `ldconfig -r <root>` so the cache of the container, not the host's, is rebuilt
// and libcuda.so.1 resolves. Files are written through os.Root, so links in the
// container image cannot point the writes outside it.
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
	known := configuredDirs(r)
	var lines []string
	for _, d := range folders {
		d = path.Clean("/" + d)
		if known[d] {
			continue
		}
		if fi, err := r.Stat(strings.TrimPrefix(d, "/")); err != nil || !fi.IsDir() {
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
// its ld.so.conf.d/*.conf drop-ins (one level of include, as images use it).
func configuredDirs(r *os.Root) map[string]bool {
	dirs := map[string]bool{}
	var read func(name string, depth int)
	read = func(name string, depth int) {
		f, err := r.Open(strings.TrimPrefix(name, "/"))
		if err != nil {
			return
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
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
				matches, _ := fs.Glob(r.FS(), strings.TrimPrefix(pattern, "/"))
				for _, m := range matches {
					read("/"+m, depth+1)
				}
			default:
				dirs[path.Clean(line)] = true
			}
		}
	}
	read(ldsoconf, 0)
	return dirs
}
