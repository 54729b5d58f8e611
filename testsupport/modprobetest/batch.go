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

// batchSize is how many names one modprobe run of a batch is asked about.
const batchSize = 400

// oracleConf makes a modprobe configuration directory that knows only
// endName; the caller removes it.
func oracleConf() (string, error) {
	conf, err := os.MkdirTemp("", "modprobe-conf-")
	if err != nil {
		return "", fmt.Errorf("modprobe oracle: %w", err)
	}
	if err := os.WriteFile(filepath.Join(conf, "end.conf"), []byte("install "+endName+" /bin/true kpreload-oracle-end\n"), 0o644); err != nil {
		os.RemoveAll(conf)
		return "", fmt.Errorf("modprobe oracle: %w", err)
	}
	return conf, nil
}

// runBatch runs the real modprobe once with mode (such as "--show-depends")
// on the names in part, each followed by endName, and returns its output; an
// exit status modprobe gives for names it does not find is not an error.
func runBatch(bin, conf, root, kver, mode string, part []string) (stdout, stderr string, err error) {
	args := []string{"-C", conf, "-d", root, "-S", kver, "-a", mode, "--"}
	for _, n := range part {
		if n == endName || strings.HasPrefix(n, "-") {
			return "", "", fmt.Errorf("modprobe oracle: %q cannot be asked in a batch", n)
		}
		args = append(args, n, endName)
	}
	cmd := exec.Command(bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return "", "", fmt.Errorf("%s -a %s: %w", bin, mode, err)
	}
	return out.String(), errOut.String(), err
}

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
	conf, err := oracleConf()
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(conf)
	mods := make([][]Module, len(names))
	errs := make([]error, len(names))
	for start := 0; start < len(names); start += batchSize {
		part := names[start:min(start+batchSize, len(names))]
		stdout, stderr, err := runBatch(bin, conf, root, kver, "--show-depends", part)
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			return nil, nil, err
		}
		answers := strings.Split(stdout, endLine)
		// Each answer ends in endLine's line: a trailing blank and "\n".
		if len(answers) != len(part)+1 || strings.TrimSpace(answers[len(part)]) != "" {
			return nil, nil, fmt.Errorf("%s -a --show-depends of %d names printed %d answers: %v: %s", bin, len(part), len(answers)-1, err, strings.TrimSpace(stderr))
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
	conf, err := oracleConf()
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(conf)
	names := make([][]string, len(modaliases))
	for start := 0; start < len(modaliases); start += batchSize {
		part := modaliases[start:min(start+batchSize, len(modaliases))]
		stdout, stderr, err := runBatch(bin, conf, root, kver, "-R", part)
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			return nil, err
		}
		// Only "not found" may go wrong: any other complaint is the oracle's failure.
		for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
			if l != "" && !strings.Contains(l, " not found in directory ") {
				return nil, fmt.Errorf("%s -a -R: %v: %s", bin, err, strings.TrimSpace(stderr))
			}
		}
		i := 0
		for _, f := range strings.Fields(stdout) {
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
			return nil, fmt.Errorf("%s -a -R of %d modaliases printed %d answers: %s", bin, len(part), i, strings.TrimSpace(stderr))
		}
	}
	return names, nil
}
