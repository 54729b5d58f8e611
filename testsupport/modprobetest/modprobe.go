// Package modprobetest runs the real kmod as an oracle for tests: what
// `modprobe -R` and `modprobe --show-depends` say for a module tree that is
// not the running kernel's. Only tests import it.
package modprobetest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/kmodcache/modname"
)

// The real kmod, run as an oracle for tests: modprobe against a module tree that is
// not the running kernel's (-d ROOT -S KVER), with an empty configuration directory
// (-C) so that the host's modprobe.d (aliases, options, install commands) does not
// leak into the answer. The module tree's own modules.softdep still applies.

// modprobePath finds the real modprobe, which often lives in /sbin outside PATH.
func modprobePath() (string, error) {
	if p, err := exec.LookPath("modprobe"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/modprobe", "/sbin/modprobe"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("modprobe not found: install kmod (scripts/deps.sh)")
}

// runModprobe runs modprobe against the tree ROOT/lib/modules/KVER with no host
// configuration. notFound is true when modprobe said the module does not exist.
func runModprobe(root, kver string, args ...string) (out string, notFound bool, err error) {
	bin, err := modprobePath()
	if err != nil {
		return "", false, err
	}
	conf, err := os.MkdirTemp("", "modprobe-conf-")
	if err != nil {
		return "", false, fmt.Errorf("modprobe oracle: %w", err)
	}
	defer os.RemoveAll(conf)
	full := append([]string{"-C", conf, "-d", root, "-S", kver}, args...)
	cmd := exec.Command(bin, full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if err != nil {
		if strings.Contains(stderr.String(), " not found in directory ") {
			return stdout.String(), true, nil
		}
		return "", false, fmt.Errorf("%s %s: %w: %s", bin, strings.Join(full, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), false, nil
}

// Resolve runs the real `modprobe -R MODALIAS` against the module tree
// ROOT/lib/modules/KVER (root is the directory holding lib/modules) and returns
// the module names it prints, in order; none (and no error) when nothing matches.
// The host's modprobe.d configuration is left out, as modalias.Tree.Resolve
// leaves it out.
func Resolve(root, kver, modalias string) ([]string, error) {
	out, notFound, err := runModprobe(root, kver, "-R", "--", modalias)
	if err != nil || notFound {
		return nil, err
	}
	return strings.Fields(out), nil
}

// Module is one line of `modprobe --show-depends`.
type Module struct {
	// Name is the module name, normalised ('-' becomes '_').
	Name string
	// Path is the module file relative to the modules directory; "" when built in.
	Path string
	// Builtin is true for a "builtin NAME" line.
	Builtin bool
}

// ShowDepends runs the real `modprobe --show-depends NAME` against the
// module tree ROOT/lib/modules/KVER and returns what it would insert, in its
// order and with its repetitions: "insmod PATH" lines as modules with Path made
// relative to the modules directory, "builtin NAME" lines as built-in modules.
func ShowDepends(root, kver, name string) ([]Module, error) {
	out, notFound, err := runModprobe(root, kver, "--show-depends", "--", name)
	if err != nil {
		return nil, err
	}
	if notFound {
		return nil, fmt.Errorf("modprobe --show-depends %s: module not found in %s", name, filepath.Join(root, "lib/modules", kver))
	}
	return parseShowDepends(root, kver, name, out)
}

// parseShowDepends reads the output of `modprobe --show-depends NAME` against
// ROOT/lib/modules/KVER: "insmod PATH" lines as modules with Path made relative
// to the modules directory, "builtin NAME" lines as built-in modules.
func parseShowDepends(root, kver, name, out string) ([]Module, error) {
	raw := root + "/lib/modules/" + kver + "/"
	clean := filepath.Join(root, "lib/modules", kver) + "/"
	var mods []Module
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "insmod" && len(f) >= 2:
			mods = append(mods, Module{Name: modname.FromPath(f[1]), Path: strings.TrimPrefix(strings.TrimPrefix(f[1], raw), clean)})
		case f[0] == "builtin" && len(f) == 2:
			mods = append(mods, Module{Name: f[1], Builtin: true})
		default:
			return nil, fmt.Errorf("modprobe --show-depends %s: unexpected line %q", name, line)
		}
	}
	return mods, nil
}
