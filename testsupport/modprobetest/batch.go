package modprobetest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// endName is a module name that only the oracle's own configuration knows:
// an install command whose --show-depends line ("install /bin/true
// kpreload-oracle-end") ends each name's answer in one modprobe run of many.
const (
	endName = "kpreload_oracle_end"
	endLine = "install /bin/true kpreload-oracle-end"
)

// ShowDependsAll answers ShowDepends for every name with one run of the real
// `modprobe -a --show-depends` per batch of names instead of one per name:
// modprobe answers each name on its own (--show-depends ignores what is
// loaded), so a name's answer is the same as its own run's; a line only the
// oracle's configuration makes follows each one. A name modprobe does not
// find gets an error, as with ShowDepends.
func ShowDependsAll(root, kver string, names []string) ([][]Module, []error, error) {
	bin, err := modprobePath()
	if err != nil {
		return nil, nil, err
	}
	conf, err := os.MkdirTemp("", "modprobe-conf-")
	if err != nil {
		return nil, nil, fmt.Errorf("modprobe oracle: %w", err)
	}
	defer os.RemoveAll(conf)
	if err := os.WriteFile(filepath.Join(conf, "end.conf"), []byte("install "+endName+" /bin/true kpreload-oracle-end\n"), 0o644); err != nil {
		return nil, nil, fmt.Errorf("modprobe oracle: %w", err)
	}
	mods := make([][]Module, len(names))
	errs := make([]error, len(names))
	const batch = 400
	for start := 0; start < len(names); start += batch {
		part := names[start:min(start+batch, len(names))]
		args := []string{"-C", conf, "-d", root, "-S", kver, "-a", "--show-depends", "--"}
		for _, n := range part {
			if n == endName || strings.HasPrefix(n, "-") {
				return nil, nil, fmt.Errorf("modprobe oracle: name %q cannot be asked in a batch", n)
			}
			args = append(args, n, endName)
		}
		cmd := exec.Command(bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			return nil, nil, fmt.Errorf("%s -a --show-depends: %w", bin, err)
		}
		answers := strings.Split(stdout.String(), endLine)
		// Each answer ends in endLine's line: a trailing blank and "\n".
		if len(answers) != len(part)+1 || strings.TrimSpace(answers[len(part)]) != "" {
			return nil, nil, fmt.Errorf("%s -a --show-depends of %d names printed %d answers: %v: %s", bin, len(part), len(answers)-1, err, strings.TrimSpace(stderr.String()))
		}
		for i, n := range part {
			out := strings.TrimLeft(answers[i], " \n")
			if strings.TrimSpace(out) == "" {
				errs[start+i] = fmt.Errorf("modprobe --show-depends %s: module not found in %s", n, filepath.Join(root, "lib/modules", kver))
				continue
			}
			mods[start+i], errs[start+i] = parseShowDepends(root, kver, n, out)
		}
	}
	return mods, errs, nil
}

// ResolveAll answers Resolve for every modalias with one run of the real
// `modprobe -a -R` per batch instead of one per modalias: a line naming only
// the oracle's own module follows each answer. A modalias nothing matches
// gets no names and no error, as with Resolve.
func ResolveAll(root, kver string, modaliases []string) ([][]string, error) {
	bin, err := modprobePath()
	if err != nil {
		return nil, err
	}
	conf, err := os.MkdirTemp("", "modprobe-conf-")
	if err != nil {
		return nil, fmt.Errorf("modprobe oracle: %w", err)
	}
	defer os.RemoveAll(conf)
	if err := os.WriteFile(filepath.Join(conf, "end.conf"), []byte("install "+endName+" /bin/true kpreload-oracle-end\n"), 0o644); err != nil {
		return nil, fmt.Errorf("modprobe oracle: %w", err)
	}
	names := make([][]string, len(modaliases))
	const batch = 400
	for start := 0; start < len(modaliases); start += batch {
		part := modaliases[start:min(start+batch, len(modaliases))]
		args := []string{"-C", conf, "-d", root, "-S", kver, "-a", "-R", "--"}
		for _, a := range part {
			if a == endName || strings.HasPrefix(a, "-") {
				return nil, fmt.Errorf("modprobe oracle: modalias %q cannot be asked in a batch", a)
			}
			args = append(args, a, endName)
		}
		cmd := exec.Command(bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			return nil, fmt.Errorf("%s -a -R: %w", bin, err)
		}
		// Only "not found" may go wrong: any other complaint is the oracle's failure.
		for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
			if l != "" && !strings.Contains(l, " not found in directory ") {
				return nil, fmt.Errorf("%s -a -R: %v: %s", bin, err, strings.TrimSpace(stderr.String()))
			}
		}
		i := 0
		for _, f := range strings.Fields(stdout.String()) {
			if f == endName {
				i++
				continue
			}
			if i >= len(part) {
				break
			}
			names[start+i] = append(names[start+i], f)
		}
		if i != len(part) {
			return nil, fmt.Errorf("%s -a -R of %d modaliases printed %d answers: %s", bin, len(part), i, strings.TrimSpace(stderr.String()))
		}
	}
	return names, nil
}
